"""`./reproduce.sh gpu-check`: check and time the engine on one CUDA GPU, run as is, in at most 10 minutes.

Checks, each with a verdict (PASS / FAIL / SKIP):
- kernel:   the fused verifier kernel equals the reference (`select`, `prune_nonresident`, `route`) on
            bf16 router logits with deliberate ties at and inside the top-k boundary, every method;
- experts:  the Triton experts kernel equals the per-expert definition: bf16 / fp32 dense, MXFP4 (`gpu_experts`);
- parity:   logits of small random Qwen3-MoE and GPT-OSS checkpoints against transformers, fp32 and bf16;
- graphs:   CUDA-graph replay equals the same static passes run eagerly, and eager, every method on the tiny
            world, with no capture falling back (SKIP on CPU, where only static = eager runs);
- lossless: Standard SD = Vanilla AR token for token on the tiny world, resident and offloaded;
- pinned:   the offloaded store's host weights are pinned and its loads are counted and timed (the copies'
            seconds give the load bandwidth; the stall seconds are reported beside them);
- replay:   Standard SD and AcceptMoE routes recorded on the offloaded tiny engine, replayed at Qwen3-30B-A3B's
            expert shape in bf16 through the same store (`replay`): the replayed pool equals the recorded one at
            every pass; its table gives expert ms per target pass beside the H200 / RTX bytes-over-bandwidth bounds.
Then a timing table: decode step, verify step, selection per layer and aten operations per step, eager and
replayed from CUDA graphs, on the tiny world and on a random MoE with Qwen3-30B-A3B's layer shape (hidden 2048, 128 experts, top-8, expert
width 768; 4 layers, bf16); then the experts kernel against torch's grouped and per-pair paths at Qwen3-30B-A3B's and
GPT-OSS-120B's expert shapes (`gpu_experts.time_experts`, CUDA only). Writes `<out>/gpu_check.json` next to
`<out>/gpu_check.md` (the table).

Every check takes a device, so its CPU side runs in the tests (the kernel under TRITON_INTERPRET=1); the
command itself needs CUDA and says so in one `error:` line (exit 2) without it.

    ./reproduce.sh gpu-check [--model models/tiny --out results/gpu-check]
"""
from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from acceptmoe.commands import command, parser
from acceptmoe.engine.graphs import StepGraphs
from acceptmoe.engine.passes import TargetPass
from acceptmoe.methods import B0_METHOD, BASELINE, METHODS, REFERENCE, Fit, Variant

from .gpu_experts import timed

P_HAT = (1.0, 0.8, 0.64, 0.512, 0.41, 0.33)
# small random configs: the parity check here and the tests' fixtures
QWEN3_SMALL = dict(vocab_size=96, hidden_size=64, intermediate_size=80, moe_intermediate_size=32,
                   num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                   num_experts=8, num_experts_per_tok=2, norm_topk_prob=True, eos_token_id=[1, 2])
GPT_OSS_SMALL = dict(vocab_size=96, hidden_size=64, intermediate_size=32, num_hidden_layers=3,
                     num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_local_experts=8,
                     num_experts_per_tok=2, sliding_window=4, eos_token_id=3,
                     layer_types=["sliding_attention", "full_attention", "sliding_attention"])
# Qwen3-30B-A3B's MoE layer shape, 4 layers
QWEN3_30B_LAYERS = dict(hidden_size=2048, moe_intermediate_size=768, num_experts=128, num_experts_per_tok=8,
                        num_hidden_layers=4, num_attention_heads=32, num_key_value_heads=4, head_dim=128,
                        vocab_size=4096, intermediate_size=6144)


def verdict(ok: bool | None) -> str:
    return "SKIP" if ok is None else ("PASS" if ok else "FAIL")


# ----- kernel = reference on tied bf16 logits -----
def tied_logits(T: int, E: int, k: int, gen: torch.Generator, ties: bool = True) -> torch.Tensor:
    """bf16 router logits [T, E] with ties: every second row ties its k-th and (k+1)-th largest (the top-k
    boundary), every third row its two largest (order inside the top-k). ties=False: distinct values."""
    if not ties:
        return (torch.randperm(T * E, generator=gen).view(T, E).float() / 64 - T * E / 128).to(torch.bfloat16)
    z = torch.randn(T, E, generator=gen) * 2
    order = z.argsort(-1, descending=True)                                   # [T, E]
    rows = torch.arange(T)
    b = rows[rows % 2 == 0]
    z[b, order[b, k]] = z[b, order[b, k - 1]]
    t = rows[rows % 3 == 0]
    z[t, order[t, 1]] = z[t, order[t, 0]]
    return z.to(torch.bfloat16)


def random_block(T: int, gen: torch.Generator, max_depth: int = 5):
    """BlockInfo of a random draft tree of T nodes at most max_depth levels deep, topologically ordered."""
    from acceptmoe.methods import BlockInfo
    parents, depth = [-1], [0]
    for _ in range(1, T):
        shallow = [p for p in range(len(parents)) if depth[p] < max_depth]
        p = shallow[int(torch.randint(len(shallow), (1,), generator=gen))]
        parents.append(p)
        depth.append(depth[p] + 1)
    return BlockInfo.from_parents(parents)


def kernel_cases(T: int, E: int, k: int, seed: int, ties: bool):
    """(router, plan, block, logits, resident | None) for every speculating method, both router kinds, with and
    without residency pruning (pruning only where the method restricts, under an offloaded store)."""
    from acceptmoe.methods import Router
    gen = torch.Generator().manual_seed(seed)
    for kind in ("softmax_topk", "topk_softmax"):
        router = Router(kind, k, renormalize=True)
        for method, spec in METHODS.items():
            for prune in ((False, True) if spec.restricts else (False,)):
                if not spec.speculates:
                    continue
                block = random_block(T, gen)
                logits = tied_logits(T, E, k, gen, ties)
                resident = (torch.rand(E, generator=gen) < 0.5) if prune else None
                fit = Fit(router, E, max_depth=5, store="offloaded" if prune else "resident")
                plan = Variant(method, prune=prune if spec.restricts else None).bind(
                    fit, commitment=P_HAT, b0=max(k, E // 4))
                yield router, plan, block, logits, resident


def check_kernel(device, T: int = 64, E: int = 128, k: int = 8, seed: int = 0, ties: bool = True,
                 backend: str = "triton") -> dict:
    """The verifier `backend` (the fused kernel) vs the readable reference on tied bf16 logits (ties=False:
    tie-free ones): every method, both router kinds, with and without residency pruning. Eligible sets and
    routed ids exactly (in order), weights to 1e-6."""
    from acceptmoe.kernels import make_verifier
    from acceptmoe.methods import prune, route, select
    device = torch.device(device)
    cases, bad_rows, rows = [], 0, 0
    for router, plan, block, logits, resident in kernel_cases(T, E, k, seed, ties):
        sel = select(plan, logits, block)                                        # the readable reference
        eligible = prune(sel, resident, plan) if resident is not None else sel.eligible
        ids, weights = route(logits, eligible, router)
        verifier = make_verifier(backend, plan, device)
        verifier.prepare([block])
        out = verifier(logits[None].to(device), None if resident is None else resident.to(device))
        row_bad = ((out.ids[0].cpu() != ids).any(-1)
                   | ~torch.isclose(out.weights[0].cpu(), weights, atol=1e-6).all(-1))
        same_set = bool(torch.equal(out.eligible[0].cpu(), eligible))
        cases.append({"router": router.kind, "method": plan.spec.name, "prune": plan.prune,
                      "same_eligible": same_set, "rows_differing": int(row_bad.sum())})
        bad_rows += int(row_bad.sum()) + (0 if same_set else T)
        rows += T
    return {"check": "kernel", "verdict": verdict(bad_rows == 0), "backend": backend, "shape": [T, E, k],
            "ties": ties, "rows": rows, "rows_differing": bad_rows, "cases": cases}


# ----- parity with transformers -----
def random_checkpoint(kind: str, folder: Path, seed: int = 0):
    """A small random Qwen3-MoE ("qwen3_moe") or GPT-OSS ("gpt_oss") checkpoint saved to folder, with router
    weights spread (no near-ties) and, for GPT-OSS, expert weights and sinks large enough to matter."""
    from transformers import GptOssConfig, GptOssForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM
    torch.manual_seed(seed)
    if kind == "qwen3_moe":
        model = Qwen3MoeForCausalLM(Qwen3MoeConfig(**QWEN3_SMALL)).eval()
    else:
        model = GptOssForCausalLM(GptOssConfig(**GPT_OSS_SMALL)).eval()
    spread(model, kind)
    model.save_pretrained(folder)
    return model


def spread(model, kind: str) -> None:
    """Router weights larger than the default init, so top-k choices are well separated (no near-ties); for
    GPT-OSS also expert weights, biases and sinks large enough that the SwiGLU clamps and the sinks matter."""
    with torch.no_grad():
        for layer in model.model.layers:
            router = getattr(layer.mlp, "gate", None) or getattr(layer.mlp, "router", None)
            if router is not None:                       # dense layers have none
                router.weight.normal_(0.0, 0.5)
        for layer in model.model.layers if kind == "gpt_oss" else ():
            layer.mlp.experts.gate_up_proj.normal_(0.0, 1.0)
            layer.mlp.experts.gate_up_proj_bias.normal_(0.0, 1.0)
            layer.mlp.experts.down_proj_bias.normal_(0.0, 0.1)
            layer.self_attn.sinks.normal_(0.0, 2.0)


def check_parity(device, folder: Path, tokens: int = 24, load=None) -> dict:
    """Our logits vs transformers' on the same random checkpoints: relative max error (to max |logit|)
    <= 1e-4 in fp32 and <= 0.1 in bf16 (both sides in that dtype), plus top-1 agreement. load(path, device,
    dtype) -> our model (default `MoEModel.from_pretrained`)."""
    from acceptmoe.engine.model import MoEModel
    load = load or (lambda path, device, dtype: MoEModel.from_pretrained(path, device=device, dtype=dtype))
    device, rows, ok = torch.device(device), [], True
    for kind in ("qwen3_moe", "gpt_oss"):
        hf = random_checkpoint(kind, Path(folder) / kind)
        ids = torch.randint(0, 96, (tokens,), generator=torch.Generator().manual_seed(1))
        for dtype, tol in ((torch.float32, 1e-4), (torch.bfloat16, 0.1)):
            ours = load(Path(folder) / kind, device, dtype)
            logits, _ = ours.forward(ids.to(device), torch.arange(tokens, device=device),
                                     ours.new_cache(tokens), 0)
            with torch.no_grad():
                ref = hf.to(device=device, dtype=dtype)(ids[None].to(device)).logits[0].float()
            rel = float((logits - ref).abs().max() / ref.abs().max())
            top1 = float((logits.argmax(-1) == ref.argmax(-1)).float().mean())
            rows.append({"model": kind, "dtype": str(dtype)[6:], "rel_max_err": rel, "top1_agree": top1,
                         "tolerance": tol})
            ok &= rel <= tol
    return {"check": "parity", "verdict": verdict(ok), "rows": rows}


# ----- CUDA graphs -----
def check_graphs(device, model_dir: Path = Path("models/tiny")) -> dict:
    """On the tiny world, every method: steps="graphs" gives the tokens and the trace of steps="static" (the
    same passes run eagerly), whose tokens equal "eager"'s; graphs were replayed and no capture fell back.
    Without CUDA only static = eager runs: FAIL if they differ, else SKIP (the graphs themselves unchecked)."""
    from acceptmoe.engine import load_engine
    device = torch.device(device)
    modes = ("eager", "static", "graphs") if device.type == "cuda" else ("eager", "static")
    engines = {mode: load_engine(model_dir, device=device, steps=mode) for mode in modes}
    prompts = [[1, 17, 42, 99, 7, 300, 12], [5, 6, 7, 8, 9, 10, 11, 12, 13, 14]]
    rows = []
    for name in METHODS:
        for i, ids in enumerate(prompts):
            out = {}
            for mode, engine in engines.items():
                plan = Variant(name).bind(engine.fit, commitment=P_HAT, b0=24)
                gen = engine.generate(ids, plan, 24, ignore_eos=True)
                out[mode] = (gen.tokens, gen.trace.lines())
            row = {"method": name, "prompt": i, "static_equal_eager": out["static"][0] == out["eager"][0]}
            if "graphs" in out:
                row["graphs_equal_static"] = out["graphs"] == out["static"]
            rows.append(row)
    steps = engines["graphs"].steps.describe() if "graphs" in engines else None
    return {"check": "graphs", "verdict": graphs_verdict(rows, steps), "rows": rows, "steps": steps,
            **({} if steps else {"reason": "CUDA graphs need CUDA (static = eager checked)"})}


def graphs_verdict(rows: list[dict], steps: dict | None) -> str:
    """FAIL on any disagreement; without graph rows (no CUDA) SKIP; else PASS only if graphs were replayed
    and no capture fell back."""
    if not all(r["static_equal_eager"] and r.get("graphs_equal_static", True) for r in rows):
        return "FAIL"
    if steps is None:
        return "SKIP"
    return verdict(steps["replays"] > 0 and not steps["fallbacks"])


# ----- lossless on the tiny world -----
def check_lossless(engines: dict, prompts: list[list[int]], tokens: int, variant: Variant = Variant(BASELINE)) -> dict:
    """`variant` (Standard SD: lossless by construction) on every engine (resident and offloaded) = Vanilla AR
    on the resident one, token for token."""
    rows, ok = [], True
    for i, ids in enumerate(prompts):
        resident = engines["resident"]
        ar = resident.generate(ids, Variant(REFERENCE).bind(resident.fit), tokens, ignore_eos=True).tokens
        for store, eng in engines.items():
            plan = variant.bind(eng.fit, commitment=P_HAT, b0=eng.router.top_k)
            sd = eng.generate(ids, plan, tokens, ignore_eos=True, trace_layers=False)
            same = sd.tokens == ar
            rows.append({"prompt": i, "store": store, "equal": same, "tau": sd.mean_accept_length})
            ok &= same
    return {"check": "lossless", "verdict": verdict(ok), "variant": variant.name, "tokens": tokens, "rows": rows}


def check_pinned(engine) -> dict:
    """The offloaded store's host weights are pinned (CUDA), and a generation's loads are counted and timed."""
    store = engine.model.store
    tensors = [t for layer in store.host.values() for t in layer.values()]
    s = store.stats()["total"]
    pinned = all(t.is_pinned() for t in tensors) if store.cuda else None
    gbps = s["bytes"] / s["copy_s"] / 1e9 if s["copy_s"] > 0 else None
    return {"check": "pinned", "verdict": pinned_verdict(pinned, s["loads"], s["copy_s"]), "pinned": pinned,
            "loads": s["loads"], "bytes": s["bytes"], "copy_s": s["copy_s"], "wait_s": s["wait_s"],
            "load_gb_per_s": gbps, "hit_rate": s["hit_rate"]}


def pinned_verdict(pinned: bool | None, loads: int, copy_s: float) -> str:
    """SKIP without CUDA (pinned None); PASS only for pinned host weights whose loads were counted and their
    copies timed."""
    return verdict(None if pinned is None else (pinned and loads > 0 and copy_s > 0))


# ----- timing (`timed`: median ms, CUDA events on CUDA, from gpu_experts) -----


def aten_ops(fn) -> int:
    from acceptmoe.experiments.bench.engine_speed import AtenCounter
    with AtenCounter() as c:
        fn()
    return c.total


def random_model(shape: dict, device, dtype=torch.bfloat16, seed: int = 0):
    """A MoEModel with random weights built in memory (no checkpoint): Qwen3-MoE config `shape`."""
    from acceptmoe.engine.config import ModelConfig
    from acceptmoe.engine.model import MoEModel, _build_skeleton
    from acceptmoe.engine.store import ExpertMath, make_store
    from torch import nn
    raw = dict(model_type="qwen3_moe", architectures=["Qwen3MoeForCausalLM"], rms_norm_eps=1e-6,
               rope_theta=1e6, max_position_embeddings=4096, norm_topk_prob=True, eos_token_id=2,
               torch_dtype="bfloat16", **shape)
    cfg = ModelConfig.from_dict(raw, ())
    torch.manual_seed(seed)
    device = torch.device(device)
    state = {n: (torch.ones(p.shape) if n.endswith("norm.weight") else torch.randn(p.shape) * 0.02)
             for n, p in _build_skeleton(nn.Module(), cfg).named_parameters()}
    E, H, I = cfg.num_experts, cfg.hidden_size, shape["moe_intermediate_size"]
    experts = {l: {"w1": torch.randn(E, 2 * I, H, device=device, dtype=dtype) * 0.02,
                   "w2": torch.randn(E, H, I, device=device, dtype=dtype) * 0.02} for l in cfg.moe_layer_ids}
    store = make_store("resident", ExpertMath(cfg.expert_activation, dtype), experts, E, device)
    return MoEModel(cfg, store, state, device, dtype)


def time_layer_shape(device, shape: dict = QWEN3_30B_LAYERS, dtype=torch.bfloat16, context: int = 256,
                     tree_tokens: int = 64, repeats: int = 20) -> list[dict]:
    """Decode step, verify step (natural and AcceptMoE routing), selection per layer, aten ops per step,
    on a random model of `shape` after a `context`-token prefill."""
    from acceptmoe.engine.tree import DraftTree
    from acceptmoe.kernels import make_verifier
    device = torch.device(device)
    model = random_model(shape, device, dtype)
    cache = model.new_cache(context + tree_tokens + 1)
    gen = torch.Generator().manual_seed(0)
    V = model.config.vocab_size
    prompt = torch.randint(0, V, (context,), generator=gen).to(device)
    model.forward(prompt, torch.arange(context, device=device), cache, 0)
    block = random_block(tree_tokens, gen)
    tree = DraftTree.from_parents(torch.randint(0, V, (tree_tokens,), generator=gen), block.parents, context)
    tok, pos, mask = tree.tokens.to(device), tree.positions.to(device), tree.mask.to(device)
    one, at = torch.randint(0, V, (1,), generator=gen).to(device), torch.tensor([context], device=device)
    plan = Variant(B0_METHOD).bind(Fit(model.router, model.config.num_experts, max_depth=5), commitment=P_HAT)
    verifier = make_verifier("auto", plan, device)
    verifier.prepare([block])

    def policy(layer, logits):
        out = verifier(logits[None], None)
        return out.ids[0], out.weights[0]

    decode = lambda: model.forward(one, at, cache, context)                                    # noqa: E731
    verify = lambda: model.forward(tok, pos, cache, context, mask=mask)                        # noqa: E731
    verify_acc = lambda: model.forward(tok, pos, cache, context, mask=mask, policy=policy)    # noqa: E731
    # the same passes through StepGraphs: captured CUDA graphs on CUDA, the static passes run eagerly elsewhere
    mode = "graphs" if device.type == "cuda" else "static"
    steps = StepGraphs(device, mode, state=(model.store.tally,))
    held = steps.cache("target", context + tree_tokens + 1, model.new_cache)
    model.forward(prompt, torch.arange(context, device=device), held, 0)
    one_in = {"ids": one, "positions": at, "start": context}
    tree_in = {"ids": tok, "positions": pos, "start": context, "mask": mask}
    decode_g = lambda: steps.run(TargetPass(model, held), one_in)                       # noqa: E731
    verify_g = lambda: steps.run(TargetPass(model, held), tree_in)                      # noqa: E731
    verify_acc_g = lambda: steps.run(TargetPass(model, held, verifier), tree_in)        # noqa: E731
    logits = torch.randn(tree_tokens, model.config.num_experts, generator=gen).to(device)
    select = lambda: verifier(logits[None], None)                                              # noqa: E731
    L = model.config.num_layers
    return [
        {"step": "decode step (1 token)", "ms": timed(decode, device, repeats), "aten_ops": aten_ops(decode)},
        {"step": f"verify step ({tree_tokens} tokens, natural routing)", "ms": timed(verify, device, repeats),
         "aten_ops": aten_ops(verify)},
        {"step": f"verify step ({tree_tokens} tokens, AcceptMoE)", "ms": timed(verify_acc, device, repeats),
         "aten_ops": aten_ops(verify_acc)},
        {"step": f"selection + routing, one layer ({L} layers)", "ms": timed(select, device, repeats),
         "aten_ops": aten_ops(select)},
        {"step": f"decode step (1 token, {mode})", "ms": timed(decode_g, device, repeats), "aten_ops": aten_ops(decode_g)},
        {"step": f"verify step ({tree_tokens} tokens, natural routing, {mode})", "ms": timed(verify_g, device, repeats),
         "aten_ops": aten_ops(verify_g)},
        {"step": f"verify step ({tree_tokens} tokens, AcceptMoE, {mode})", "ms": timed(verify_acc_g, device, repeats),
         "aten_ops": aten_ops(verify_acc_g)},
    ]


def time_tiny(engine, prompts: list[list[int]], tokens: int) -> list[dict]:
    """Median target-step time (drafting included for SD), tokens/s, tau and aten ops per step (the
    engine's step mode in the label: with CUDA graphs the aten count is that of a replay)."""
    from acceptmoe.experiments.bench.engine_speed import ours_ops
    rows, mode = [], engine.steps.mode
    for method in (REFERENCE, BASELINE, B0_METHOD):
        variant = Variant(method).bind(engine.fit, commitment=P_HAT)
        steps, n, wall, taus = [], 0, 0.0, []
        for ids in prompts:
            t0 = engine.clock()
            g = engine.generate(ids, variant, tokens, ignore_eos=True, trace_layers=False)
            wall += engine.clock() - t0
            steps += g.step_times
            n += len(g.tokens)
            taus.append(g.mean_accept_length)
        rows.append({"step": f"tiny {method} step ({mode})", "ms": 1e3 * statistics.median(steps), "tokens_per_s": n / wall,
                     "tau": statistics.mean(taus), "aten_ops": ours_ops(engine, prompts[0], variant)})
    return rows


def check_replay(engine, prompts: list[list[int]], tokens: int, device, folder: Path,
                 shape: str = "qwen3-30b-a3b") -> tuple[dict, list[dict]]:
    """Routes of Standard SD and AcceptMoE recorded on `engine` (offloaded), replayed at `shape` on `device`
    (`experiments.replay`): PASS when the replayed pool agrees with the recorded one at every pass; the
    records (ms per target pass beside the bytes / bandwidth bounds) go to the timing table."""
    from acceptmoe.experiments.replay import report
    from acceptmoe.experiments.replay.config import load_replay_config
    from acceptmoe.experiments.replay.runner import run_replay
    from acceptmoe.experiments.spine.config import Pair
    from acceptmoe.experiments.spine.layout import RunPaths
    from acceptmoe.experiments.spine.runs import open_run
    paths = RunPaths(folder / "recorded")
    for method in (REFERENCE, B0_METHOD):
        plan = Variant(method).bind(engine.fit, commitment=P_HAT)
        for i, ids in enumerate(prompts[:2]):
            gen = engine.generate(ids, plan, tokens, ignore_eos=True, record_routes=True)
            gen.routes.save(paths.routes("gpu-check", Pair("tiny", "prompts"), plan.name, 0, i))
    cfg = load_replay_config("tiny", {"source": str(paths.root), "shape": shape, "device": str(device),
                                      "generations": 2, "passes_per_generation": 8, "repeats": 2})
    run = open_run("replay", "tiny", cfg, root=folder / "replay")
    run_replay(cfg, run, show_progress=False)
    recs = report.records(run.path)
    offloaded = [r for r in recs if r["store"] != "resident"]
    agreed = [r["counters_match"].split("/") for r in offloaded]                  # "agreeing/compared"
    ok = bool(agreed) and all(a == n and n != "0" for a, n in agreed)
    return {"check": "replay", "verdict": verdict(ok), "shape": shape,
            "counters": {r["variant"]: r["counters_match"] for r in offloaded}}, recs


def table(results: dict) -> str:
    from acceptmoe.experiments.gpu_experts import check_table, timing_table
    lines = ["| check | verdict |", "|---|---|"]
    lines += [f"| {c['check']} | {c['verdict']} |" for c in results["checks"]]
    if results.get("replay"):
        bounds = [k for k in results["replay"][0] if k.startswith("bound_ms_")]
        lines += ["", "| replay store | variant | experts/layer | hit rate | ms / target pass | "
                  + " | ".join(b.removeprefix("bound_ms_") + " bound ms" for b in bounds) + " |",
                  "|---|---|---:|---:|---:|" + "---:|" * len(bounds)]
        for r in results["replay"]:
            lines.append(f"| {r['store']} | {r['variant']} | {r['experts_per_layer']:.1f} | {r['hit_rate']:.3f} | "
                         f"{r['ms_per_pass']:.3f} | " + " | ".join(f"{r[b]:.3f}" for b in bounds) + " |")
    lines += ["", "| workload | step | ms | aten ops / step | tokens/s | tau |", "|---|---|---:|---:|---:|---:|"]
    for workload, rows in results["timing"].items():
        for r in rows:
            tps = f"{r['tokens_per_s']:.1f}" if "tokens_per_s" in r else ""
            tau = f"{r['tau']:.2f}" if "tau" in r else ""
            lines.append(f"| {workload} | {r['step']} | {r['ms']:.3f} | {r['aten_ops']:.0f} | {tps} | {tau} |")
    lines += [s for c in results["checks"] if c["check"] == "experts" for s in ("", check_table(c))]
    lines += ["", timing_table(results["experts_timing"])] if results.get("experts_timing") else []
    return "\n".join(lines)


def run_all(device, model_dir: Path, out: Path, prompts: int = 4, tokens: int = 32,
            layer_shape: dict = QWEN3_30B_LAYERS, kernel_shape: tuple[int, int, int] = (64, 128, 8),
            replay_shape: str = "qwen3-30b-a3b") -> dict:
    """Every check and the timing table on `device`; writes gpu_check.json and gpu_check.md under out."""
    from transformers import AutoTokenizer

    from acceptmoe.engine import load_engine
    from acceptmoe.engine.store import _NATIVE
    from acceptmoe.experiments.bench.engine_speed import tiny_prompts
    from acceptmoe.experiments.gpu_experts import check_experts, time_experts
    device = torch.device(device)
    out.mkdir(parents=True, exist_ok=True)
    results: dict = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                     "torch": torch.__version__, "checks": [], "timing": {}}

    def record(check: dict) -> None:
        results["checks"].append(check)
        print(f"{check['check']:<9} {check['verdict']}", flush=True)

    record(check_kernel(device, *kernel_shape))
    record(check_experts(device))
    with tempfile.TemporaryDirectory() as tmp:
        record(check_parity(device, Path(tmp)))
    record(check_graphs(device, model_dir))
    engines = {"resident": load_engine(model_dir, device=device)}
    E = engines["resident"].model.config.num_experts
    engines["offloaded"] = load_engine(model_dir, device=device, store="offloaded", slots=max(1, E // 4))
    ids = tiny_prompts(AutoTokenizer.from_pretrained(model_dir / "target"), prompts)
    engines["offloaded"].model.store.reset_counters()
    record(check_lossless(engines, ids, tokens))
    record(check_pinned(engines["offloaded"]))
    with tempfile.TemporaryDirectory() as tmp:
        replay, results["replay"] = check_replay(engines["offloaded"], ids, tokens, device, Path(tmp), replay_shape)
        record(replay)
    results["timing"]["tiny world"] = time_tiny(engines["resident"], ids, tokens)
    if engines["resident"].steps.mode != "eager":
        results["timing"]["tiny world"] += time_tiny(load_engine(model_dir, device=device, steps="eager"), ids, tokens)
    del engines
    shape_name = "random MoE, Qwen3-30B-A3B layer shape x4"
    results["timing"][shape_name] = time_layer_shape(device, layer_shape)
    results["experts_timing"] = time_experts(device) if device.type == "cuda" else []   # paper shapes: CUDA only
    results["grouped_mm_native"] = {f"{d}/{str(t)[6:]}": v for (d, t), v in _NATIVE.items()}
    (out / "gpu_check.json").write_text(json.dumps(results, indent=1) + "\n")
    (out / "gpu_check.md").write_text(table(results) + "\n")
    return results


@command("gpu-check", "check and time the engine and kernel on one CUDA GPU (at most 10 minutes; JSON + table)")
def main(argv: list[str] | None = None) -> int:
    p = parser("gpu-check")
    p.add_argument("--model", default="models/tiny", help="folder with target/ and draft/ (the tiny world)")
    p.add_argument("--out", default="results/gpu-check", help="folder for gpu_check.json and gpu_check.md")
    a = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("error: gpu-check needs a CUDA GPU and this machine has none (torch.cuda.is_available() is False); "
              "run it on a machine with one and the CUDA build of torch", file=sys.stderr, flush=True)
        return 2
    t0 = time.perf_counter()
    results = run_all(torch.device("cuda"), Path(a.model), Path(a.out))
    print("\n" + table(results))
    print(f"\n{time.perf_counter() - t0:.0f} s; wrote {Path(a.out) / 'gpu_check.json'} and gpu_check.md")
    return 1 if any(c["verdict"] == "FAIL" for c in results["checks"]) else 0


if __name__ == "__main__":
    raise SystemExit(main())
