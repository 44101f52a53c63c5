"""An lm-evaluation-harness model backend: any generative lm-eval task under any method, on any engine.

    ./reproduce.sh lm-eval --model acceptmoe \
        --model_args method=acceptmoe,commitment=RUN/calibration/tiny/tiny-gsm-train.json \
        --tasks acceptmoe_tiny_gsm --apply_chat_template --limit 50 --output_path results/lm-eval

    import acceptmoe.integrations.lm_eval.backend                 # registers "acceptmoe" with lm-eval
    lm_eval.simple_evaluate(model="acceptmoe", model_args="method=standard-sd", tasks=[...])

lm-eval 0.4.13 discovers models only through its own registry (no entry points), so the `lm-eval` command
registers this backend and then runs lm-eval's own command line, with three additions (`prepare_argv`,
`annotate_results`): a task named in `--tasks` that is one of the project's offline tasks
(`tasks/*.yaml`: lm-eval's own configs reading the repository's checksummed data) is passed as its
YAML file; the run is labelled `model=<target folder>__<variant>` unless model_args give a `model`, so
lm-eval writes it under `<output_path>/<label>/` instead of a random name; and each results JSON the run
wrote gets an "acceptmoe" entry: the plan, and per task tau, the mean set size and the truncations.

Only `generate_until` is implemented (through `EngineBackend.generate`); log-likelihood requests are
refused with a clear error. Prompts are truncated as lm-eval's own HF backend truncates them: its
`normalize_gen_kwargs` gives the generation budget (`max_gen_toks`), and a prompt longer than the model's
context (`max_length`: as lm-eval's `resolve_max_length` reads the target's config and tokenizer, or the
model_arg) minus that budget keeps its last tokens (left truncation); a budget that leaves no room is an
error, as there. Sampling follows the request's gen kwargs as lm-eval normalises them (`--gen_kwargs
do_sample=true,temperature=0.6,top_p=0.95,top_k=20`, or a task's `generation_kwargs`): `do_sample` false (or
temperature 0) is greedy decoding; otherwise temperature, top_p and top_k become the request's
`GenerationOptions` (docs/method.md "Sampling"). Each request draws from its own stream, seeded by
`GenerationOptions.for_request` from the `seed` model_arg and the request's task, document, index and
repeat, so a rerun reproduces on one machine and a task's repeats draw apart; the results JSON's
"acceptmoe" entry lists the sampling settings the run used.

model_args: target, draft (folders or hub ids), method (a registry name), budget (fixed-size methods), beta,
commitment (a CommitmentTable JSON, as `./reproduce.sh calibrate` writes under
RUN/calibration/<model>/<task>-<split>.json) or p_hat (e.g. "1.0;0.8;0.6"), prune (true/false), engine
(native | sglang), device, dtype, tree ("5;10;64": num_steps;topk;num_draft_tokens), max_gen_toks,
max_length (the context in tokens; default: the target's, as lm-eval's HF backend resolves it), model (the
run's label), seed (the sampling seed, default the experiments' 0). The method's settings become a `Variant`, bound to the opened engine (`Variant.bind`), which
checks the rest.
"""
from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

from lm_eval.api.model import LM
from lm_eval.api.registry import register_model
from lm_eval.models.utils import normalize_gen_kwargs, resolve_max_length

from acceptmoe.commands import command
from acceptmoe.costs.verify import load_profile
from acceptmoe.engine.backend import GenerationOptions
from acceptmoe.engine.tree import TreeShape
from acceptmoe.errors import UserError
from acceptmoe.experiments.spine.config import GenerationConfig, SamplingConfig, WorldConfig
from acceptmoe.experiments.spine.engines import open_backend
from acceptmoe.experiments.spine.prompts import load_tokenizer, resolve_checkpoint
from acceptmoe.experiments.spine.rows import TraceStats
from acceptmoe.methods import DEFAULT_METHOD, CommitmentTable, ConfigError, Variant

NAME = __name__.partition(".")[0]     # lm-eval's model name: this package's
TASKS_DIR = Path(__file__).resolve().parent / "tasks"   # the offline tasks: lm-eval YAMLs on shipped data
TARGET, DRAFT = "models/tiny/target", "models/tiny/draft"     # the embedded world's pair, when model_args name none
MAX_GEN_TOKS = GenerationConfig().max_new_tokens      # a request without max_gen_toks: the world's default
WORLD = {f.name: f.default for f in dataclasses.fields(WorldConfig)}        # engine, device, dtype defaults
TREE = ";".join(str(v) for v in dataclasses.astuple(TreeShape()))          # the default tree, as model_args spell it


def _numbers(text, kind=float) -> tuple:
    return tuple(kind(x) for x in str(text).replace(";", " ").split())


def _flag(value) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    if str(value).lower() in ("true", "1", "yes", "on"):
        return True
    if str(value).lower() in ("false", "0", "no", "off"):
        return False
    raise UserError(f"prune={value!r}: give true or false")


def variant_of(method: str, budget=None, prune=None, beta=None) -> Variant:
    """The model_args of a method, parsed into a `Variant` (the parser configs and the SGLang plugin share)."""
    try:
        return Variant.from_mapping({"method": method, "budget": int(budget) if budget is not None else None,
                                     "prune": _flag(prune),
                                     "overrides": {} if beta is None else {"beta": float(beta)}})
    except (ConfigError, ValueError) as exc:
        raise UserError(f"model_args: {exc}") from None


@register_model(NAME)
class AcceptMoELM(LM):
    """Generation (greedy, or sampled as a request's gen kwargs say) with one `Variant` of a target + EAGLE-3
    draft pair."""

    def __init__(self, target: str = TARGET, draft: str = DRAFT,
                 method: str = DEFAULT_METHOD, budget: int | None = None, beta: float | None = None,
                 commitment: str | None = None, p_hat: str | None = None, prune=None, engine: str = WORLD["engine"],
                 device: str = WORLD["device"], dtype: str = WORLD["dtype"], tree: str = TREE,
                 max_gen_toks: int = MAX_GEN_TOKS, max_length: int | None = None, batch_size=1,
                 model: str | None = None, seed: int = SamplingConfig.seed, **unused) -> None:
        super().__init__()
        if unused:
            raise UserError(f"unknown model_args {sorted(unused)}; valid: target, draft, method, budget, beta, "
                            f"commitment, p_hat, prune, engine, device, dtype, tree, max_gen_toks, max_length, "
                            f"model, seed")
        variant = variant_of(method, budget, prune, beta)
        if commitment is not None and p_hat is not None:
            raise UserError("give commitment (a CommitmentTable JSON) or p_hat, not both")
        phat = CommitmentTable.load(commitment).p_hat if commitment else (_numbers(p_hat) if p_hat else None)
        target_dir, draft_dir = resolve_checkpoint(target), resolve_checkpoint(draft)
        self.engine = open_backend(engine, target=target_dir, draft=draft_dir, device=device, dtype=dtype,
                                   tree=TreeShape(*_numbers(tree, int)))
        try:
            cost = load_profile() if variant.spec.admits else None    # admission: the committed profile
            self.plan = variant.bind(self.engine.fit, commitment=phat, cost=cost)
        except ConfigError as exc:
            raise UserError(f"model_args: {exc} (p_hat: commitment=<table.json> from ./reproduce.sh calibrate, or "
                            f"p_hat=1.0;0.8;...; budget=<B> for fixed-budget methods)") from None
        self.tokenizer = load_tokenizer(target_dir)
        self.max_gen_toks = int(max_gen_toks)
        if max_length is None:
            from transformers import AutoConfig
            max_length = resolve_max_length(AutoConfig.from_pretrained(target_dir), self.tokenizer)
        self.max_length = int(max_length)
        self.batch_size = int(batch_size)
        try:
            self.seed = int(seed)
        except ValueError:
            raise UserError(f"model_args: seed={seed!r} is not a whole number; give e.g. seed=0") from None
        self.drawn: dict[tuple, int] = defaultdict(int)   # request identity -> requests seen with it (repeats)
        self.sampling: set[tuple] = set()                 # (temperature, top_k, top_p) of the sampled requests
        self.stats = _Counts()                       # the whole run
        self.per_task: dict[str, _Counts] = defaultdict(_Counts)
        INSTANCES.append(self)

    # ----- chat templates (lm-eval's --apply_chat_template) -----
    @property
    def tokenizer_name(self) -> str:
        return self.tokenizer.name_or_path.replace("/", "__")

    def chat_template(self, chat_template: bool | str = False) -> str | None:
        return self.tokenizer.chat_template

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        return self.tokenizer.apply_chat_template(chat_history, tokenize=False,
                                                  add_generation_prompt=add_generation_prompt)

    # ----- requests -----
    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        out = []
        for req in requests:
            context, gen_kwargs = req.args
            kwargs = normalize_gen_kwargs(dict(gen_kwargs), self.max_gen_toks)
            until = kwargs.get("until") or []
            until = [until] if isinstance(until, str) else list(until)
            options = self.options(req, kwargs)
            budget = int(kwargs["max_gen_toks"])
            counts = (self.stats, self.per_task[req.task_name or "-"])
            ids = self.prompt_ids(context, budget, counts)
            gen = self.engine.generate(ids, self.plan, budget, options)
            text = self.tokenizer.decode(gen.tokens, skip_special_tokens=True)
            cut = min((i for i in (text.find(s) for s in until if s) if i >= 0), default=len(text))
            out.append(text[:cut])
            for c in counts:
                c.add(gen)
            self.cache_hook.add_partial("generate_until", (context, gen_kwargs), text[:cut])
        return out

    def options(self, req, kwargs: dict) -> GenerationOptions:
        """The request's `GenerationOptions` from its normalised gen kwargs: greedy unless do_sample (lm-eval
        sets temperature 0 when do_sample is false); else temperature, top_p, top_k and the request's seed."""
        if not kwargs.get("do_sample") or not float(kwargs.get("temperature") or 0) > 0:
            return GenerationOptions()
        try:
            top_k, top_p = kwargs.get("top_k"), kwargs.get("top_p")
            base = GenerationOptions(temperature=float(kwargs["temperature"]),
                                     top_k=GenerationOptions.top_k if top_k is None else int(top_k),
                                     top_p=GenerationOptions.top_p if top_p is None else float(top_p), seed=self.seed)
        except (TypeError, ValueError) as exc:
            raise UserError(f"gen_kwargs: {exc}; give numbers, e.g. temperature=0.6,top_p=0.95,top_k=20") from None
        identity = (req.task_name or "-", req.doc_id, req.idx)
        self.drawn[identity] += 1
        self.sampling.add((base.temperature, base.top_k, base.top_p))
        return base.for_request(*identity, self.drawn[identity] - 1)

    def prompt_ids(self, context: str, max_gen_toks: int, counts: tuple = ()) -> list[int]:
        """The prompt's tokens, left-truncated to `max_length - max_gen_toks` as lm-eval's HF backend does
        (each of `counts` counts a truncation)."""
        room = self.max_length - max_gen_toks
        if room <= 0:
            raise UserError(f"max_gen_toks={max_gen_toks} leaves no room for a prompt in the model's context of "
                            f"{self.max_length} tokens (lm-eval's HF backend refuses it too): lower max_gen_toks")
        ids = self.tokenizer(context, add_special_tokens=False)["input_ids"]
        if len(ids) > room:
            for c in counts:
                c.truncated += 1
                c.truncated_to.add(room)
            ids = ids[-room:]
        return ids

    def loglikelihood(self, requests):
        raise UserError("the acceptmoe backend runs generative tasks only (generate_until): speculative "
                        "decoding verifies generated tokens, it does not score given continuations")

    def loglikelihood_rolling(self, requests):
        return self.loglikelihood(requests)

    # ----- statistics beside lm-eval's metrics -----
    def summary(self) -> dict:
        """The whole run's statistics (`_Counts.record`), with the method and the context length."""
        return {"method": self.plan.name, **self.stats.record(), "max_length": self.max_length}

    def record(self) -> dict:
        """What a results JSON carries for this backend: the plan and, per task, the statistics."""
        sampled = [{"temperature": t, "top_k": k, "top_p": p, "seed": self.seed} for t, k, p in sorted(self.sampling)]
        return {"plan": self.plan.describe(), "max_length": self.max_length, **({"sampling": sampled} if sampled else {}),
                "tasks": {task: c.record() for task, c in sorted(self.per_task.items())}}


class _Counts:
    """Generations, output tokens, target steps, set sizes and truncations of some requests."""

    def __init__(self) -> None:
        self.generations = self.output_tokens = self.steps = self.block_layers = self.truncated = 0
        self.set_size_sum = 0.0
        self.truncated_to: set[int] = set()

    def add(self, gen) -> None:
        st = TraceStats.of(gen.trace)
        self.generations += 1
        self.output_tokens += sum(gen.accept_lengths)
        self.steps += len(gen.accept_lengths)
        self.set_size_sum += st.set_size_sum
        self.block_layers += st.block_layers

    def record(self) -> dict:
        """tau (output tokens per target step), the mean set size over blocks and layers, truncations."""
        return {"generations": self.generations, "tau": self.output_tokens / self.steps if self.steps else None,
                "mean_set_size": self.set_size_sum / self.block_layers if self.block_layers else None,
                "truncated": self.truncated, "truncated_to": sorted(self.truncated_to)}


INSTANCES: list[AcceptMoELM] = []


def truncation_note(summary: dict) -> str:
    """What the backend did to long prompts, in one line."""
    if not summary["truncated"]:
        return (f"no prompt was truncated (context {summary['max_length']} tokens minus each request's "
                f"max_gen_toks, left truncation as lm-eval's HF backend)")
    lengths = ", ".join(map(str, summary["truncated_to"]))
    return (f"{summary['truncated']} of {summary['generations']} prompts were left-truncated to their last "
            f"{lengths} tokens (context {summary['max_length']} tokens minus the request's max_gen_toks), as "
            f"lm-eval's HF backend truncates them")


def offline_tasks() -> dict[str, Path]:
    """The project's offline lm-eval tasks: task name -> its YAML (tasks/)."""
    out = {}
    for path in sorted(TASKS_DIR.glob("*.yaml")):
        for line in path.read_text().splitlines():
            if line.startswith("task: "):
                out[line.split(":", 1)[1].strip()] = path
    return out


def _values(argv: list[str], flags: tuple[str, ...]) -> tuple[int, int] | None:
    """The index range of the values after the first of `flags` in argv (up to the next option)."""
    for i, arg in enumerate(argv):
        if arg in flags:
            end = i + 1
            while end < len(argv) and not argv[end].startswith("-"):
                end += 1
            return i + 1, end
    return None


def _model_args(tokens: list[str]) -> dict[str, str]:
    """lm-eval's `key=val,key2=val2` tokens as a mapping (as its MergeDictAction reads them)."""
    out = {}
    for token in tokens:
        for part in filter(None, token.split(",")):
            key, _, value = part.partition("=")
            out[key.strip()] = value.strip()
    return out


def run_label(args: dict[str, str]) -> str:
    """`<target folder>__<variant name>`: where lm-eval writes the run (its model name)."""
    target = Path(args.get("target", TARGET).rstrip("/")).name
    variant = variant_of(args.get("method", DEFAULT_METHOD), args.get("budget"), args.get("prune"), args.get("beta"))
    return f"{target}__{variant.name}"


def prepare_argv(argv: list[str]) -> list[str]:
    """lm-eval's command line with the project's offline task names replaced by their YAMLs and the run
    labelled by model and method (`model=` in model_args, unless given)."""
    argv = [a for arg in argv for a in (arg.split("=", 1) if arg.startswith("--") and "=" in arg else [arg])]
    span = _values(argv, ("--tasks", "-t"))
    if span:
        known = offline_tasks()
        names = [n for token in argv[span[0]:span[1]] for n in token.split(",") if n]
        argv[span[0]:span[1]] = [",".join(str(known.get(n, n)) for n in names)]
    span = _values(argv, ("--model_args", "-a"))
    args = _model_args(argv[span[0]:span[1]]) if span else {}
    if span and "model" not in args:
        argv.insert(span[1], f"model={run_label(args)}")
    elif not span and "--model" in argv:
        argv += ["--model_args", f"model={run_label(args)}"]
    return argv


def annotate_results(output_path: str | None, since: float, lms: list[AcceptMoELM]) -> list[Path]:
    """Add an "acceptmoe" entry (`AcceptMoELM.record`) to each results JSON written since `since`."""
    if not output_path or not lms:
        return []
    root = Path(output_path)
    root = root.parent if root.suffix == ".json" else root
    written = [p for p in root.rglob("results*.json") if p.stat().st_mtime >= since]
    for path in written:
        results = json.loads(path.read_text())
        results[NAME] = lms[-1].record()              # the "acceptmoe" entry
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(results, indent=2, default=str))
        os.replace(tmp, path)
    return written


@command("lm-eval", "lm-evaluation-harness with the acceptmoe model backend (--model acceptmoe; lm-eval's options)")
def main(argv: list[str] | None = None) -> int:
    from lm_eval.__main__ import cli_evaluate
    argv = prepare_argv(list(sys.argv[1:] if argv is None else argv))
    span = _values(argv, ("--output_path", "-o"))
    output_path = argv[span[0]] if span and span[1] > span[0] else None
    first, since = len(INSTANCES), time.time() - 1
    saved, sys.argv = sys.argv, ["lm-eval", *argv]
    try:
        cli_evaluate()
    finally:
        sys.argv = saved
    for path in annotate_results(output_path, since, INSTANCES[first:]):
        print(f"acceptmoe: plan and per-task tau, set size and truncations added to {path}")
    for lm in INSTANCES[first:]:
        s = lm.summary()
        tau = "-" if s["tau"] is None else f"{s['tau']:.2f}"
        size = "-" if s["mean_set_size"] is None else f"{s['mean_set_size']:.1f}"
        print(f"acceptmoe {s['method']}: {s['generations']} generations, tau {tau} output tokens per target "
              f"step, mean set size {size} experts per layer")
        print(f"acceptmoe {s['method']}: {truncation_note(s)}")
    return 0
