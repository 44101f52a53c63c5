"""`./reproduce.sh cross-engine [--limit N] [--tokens T] [--methods ...]`: native engine against SGLang.

    ./reproduce.sh cross-engine --limit 3              # tiny world on this CPU (SGLang's CPU path)
    ./reproduce.sh cross-engine --preset qwen3-30b --limit 8 --tokens 128     # a GPU with the paper's model

Prompts: the first `--limit` test examples of each of the preset's tasks, chat-formatted as the experiments
send them, all in flight in SGLang, one at a time in the native engine. Methods run in calibration order:
Standard SD first (its native traces give p_hat), AcceptMoE next (its mean set size gives the fixed-budget
methods their B), a batch-crediting method's twin (`methods.alone_twin`) before it, then the others; both
engines run the same plan. A method whose sets depend on the pass's other requests (`Score.credits_batch`) gets
two rows: one request at a time in both engines, where it must equal its twin token for token in each engine
and its sets the per-block ones; and every prompt in flight in SGLang beside the native engine's batched verify
pass over the same prompts (`Engine.generate_batch`), where its sets must equal the reference recomputed over
each of SGLang's own passes (SGLang forms its batches itself, so tokens and trees there are reported, not
required). SGLang runs eagerly here (CUDA graphs off):
the per-pass records the set check reads are a test switch that graphs would skip. Per model one SGLang server,
its pools sized for these prompts, serves every method, and both engines are closed before the next model opens.
Writes `report.json` and `report.md` in the run folder, with the config and environment; exits 1 on a required
disagreement.
"""
from __future__ import annotations

import dataclasses
import sys

from acceptmoe.commands import command, parser
from acceptmoe.engine.backend import GenerationOptions
from acceptmoe.errors import UserError
from acceptmoe.experiments.spine.options import positive_int
from acceptmoe.methods import B0_METHOD, CALIBRATION, METHODS, Variant, alone_twin

from .compare import agreement, table


def method_order(methods: list[str] | None) -> list[str]:
    """Calibration order: Standard SD, then AcceptMoE, then the others, a batch-crediting method's twin before it
    (each speculating method once, those that admit draft nodes among them)."""
    speculating = [m for m, s in METHODS.items() if s.speculates]
    chosen = methods or speculating
    unknown = [m for m in chosen if m not in speculating]
    if unknown:
        raise UserError(f"--methods: {', '.join(unknown)} not a speculating method; valid: {', '.join(speculating)}")
    first = [CALIBRATION] + ([B0_METHOD] if any(METHODS[m].needs_budget for m in chosen) else [])
    return list(dict.fromkeys(first + [t for m in chosen for t in (alone_twin(m), m) if t is not None]))


def compare_model(world, name: str, native, prompts: list[list[int]], order: list[str], tokens: int,
                  dumps) -> tuple[list, tuple | None, int | None]:
    """Every method of `order` on `prompts` through the native engine (`native`, a `Loaded`) and an SGLang server
    for the same checkpoints, its pools sized for these prompts (closed when this returns): the agreement rows,
    the p_hat and the budget the methods ran with."""
    from acceptmoe.engine.trace import commitment_table
    from acceptmoe.experiments.spine.engines import open_backend

    sglang = open_backend("sglang", target=native.target, draft=native.draft, device=world.device,
                          dtype=world.dtype, tree=world.tree, dump=str(dumps), disable_cuda_graph=True,
                          skip_tokenizer_init=True, requests=len(prompts),
                          request_tokens=max(len(p) for p in prompts) + tokens, log_level="error")
    rows, p_hat, budget = [], None, None
    try:
        if sglang.fit != native.engine.fit:
            raise UserError(f"{name}: SGLang serves {sglang.fit}, the native engine {native.engine.fit}: the "
                            f"engines disagree on the router, experts or tree depth")
        runs = {}                            # method -> (native alone, SGLang with every prompt in flight)
        for method in order:
            plan = native.plan(Variant(method), commitment=p_hat, b0=budget)
            served = Variant(method).bind(sglang.fit, commitment=p_hat, b0=budget, selector=world.selector,
                                          cost=plan.cost)
            ours = [native.engine.generate(p, plan, tokens, GenerationOptions(ignore_eos=True)) for p in prompts]
            theirs = sglang.generate_many(prompts, served, tokens, GenerationOptions(ignore_eos=True))
            runs[method] = ours, theirs
            if method == CALIBRATION:
                p_hat = commitment_table([g.trace for g in ours]).p_hat
            if method == B0_METHOD:
                sizes = [s for g in ours for b in g.trace.blocks if b.layers for s in b.layers["set_size"]]
                budget = max(native.engine.fit.router.top_k, round(sum(sizes) / len(sizes)))
            twin = alone_twin(method)
            if twin is None:
                rows.append(agreement(method, plan, ours, theirs, dumps / plan.name))
            else:
                rows += credited_rows(method, plan, served, runs, native, sglang, prompts, tokens, dumps)
            print(f"{name} {method}: done", file=sys.stderr, flush=True)
    finally:
        sglang.close()
    return rows, p_hat, budget


def credited_rows(method: str, plan, served, runs: dict, native, sglang, prompts, tokens: int, dumps) -> list:
    """A batch-crediting method's two rows (its runs with every prompt in flight are `runs[method]`): one request
    at a time in both engines, equal to its twin token for token in each (the twin's runs are `runs[twin]`); and
    SGLang's own batches beside the native engine's batched verify pass over the same prompts."""
    twin = alone_twin(method)
    ours, theirs = runs[method]
    sglang.dump, root = str(dumps / "one-at-a-time"), sglang.dump   # its own pass files
    try:
        alone = [sglang.generate(p, served, tokens, GenerationOptions(ignore_eos=True)) for p in prompts]
    finally:
        sglang.dump = root
    (twin_ours, twin_theirs) = runs[twin]
    same = sum(a.tokens == t.tokens and b.tokens == u.tokens
               for a, b, t, u in zip(ours, alone, twin_ours, twin_theirs, strict=False))
    batched = native.engine.generate_batch(prompts, plan, tokens, GenerationOptions(ignore_eos=True))
    return [agreement(method, plan, ours, alone, dumps / "one-at-a-time" / plan.name, in_flight=1, twin=twin,
                      twin_equal=same),
            agreement(method, plan, batched, theirs, dumps / plan.name, native_mode="batched")]


def cross_engine(preset: str, limit: int, tokens: int, methods: list[str] | None, results=None):
    from acceptmoe.evals.tasks import get_task
    from acceptmoe.experiments.spine.config import load_world
    from acceptmoe.experiments.spine.engines import backend_class, opened
    from acceptmoe.experiments.spine.prompts import prompt_ids
    from acceptmoe.experiments.spine.runs import open_run, write_json

    world = load_world(preset)
    order = method_order(methods)
    backend_class("sglang")                        # SGLang missing: one error before any run folder is made
    config = {"preset": preset, "limit": limit, "tokens": tokens, "methods": order}
    run = open_run("cross-engine", world.preset, config, root=results, fresh=True)
    rows, p_hat, budget = [], None, None
    for model in world.models:
        with opened(model, dataclasses.replace(world, engine="native"), run.path) as native:
            prompts = []
            for name in world.tasks:
                task = get_task(name)
                prompts += [prompt_ids(native.tokenizer, task.messages(ex), model)
                            for ex in task.load(world.eval_split, limit=limit)]
            found, p_hat, budget = compare_model(world, model.name, native, prompts, order, tokens,
                                                 run.path / "dumps" / model.name)
            rows += found
    report = {"rows": [r.row() for r in rows], "p_hat": p_hat, "budget": budget}
    write_json(run.path / "report.json", report)
    text = table(rows)
    (run.path / "report.md").write_text(f"# Native engine vs SGLang ({world.preset}, {limit} prompts per task, "
                                        f"{tokens} tokens)\n\n{text}\n")
    run.finish({"required_ok": all(r.required_ok for r in rows)})
    return run, rows, text


@command("cross-engine", "the same prompts through the native engine and SGLang per method: tree, token and set "
                         "agreement, tau; exits 1 on a required disagreement")
def main(argv: list[str] | None = None) -> int:
    p = parser("cross-engine")
    p.add_argument("--preset", default="tiny", help="configs/presets/<name>.yaml or a YAML path (default: tiny)")
    p.add_argument("--limit", type=positive_int, default=3, help="test prompts per task (default: 3)")
    p.add_argument("--tokens", type=positive_int, default=32, help="new tokens per prompt (default: 32)")
    p.add_argument("--methods", nargs="+", default=None, help="speculating methods (default: all)")
    p.add_argument("--results", default=None, help="results root (default: results/)")
    args = p.parse_args(argv)
    run, rows, text = cross_engine(args.preset, args.limit, args.tokens, args.methods, args.results)
    print(text)
    print(f"written: {run.path / 'report.md'}, {run.path / 'report.json'}")
    bad = [r.method for r in rows if not r.required_ok]
    if bad:
        print(f"error: required agreement failed for {', '.join(bad)} (see {run.path / 'report.md'})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
