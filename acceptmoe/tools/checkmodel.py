"""`./reproduce.sh check-model --model DIR [--draft DIR]`: what the project makes of a user's MoE checkpoint,
before any experiment runs on it (docs/models.md, "Checking a checkpoint").

    ./reproduce.sh check-model --model DIR [--draft DIR] [--prompts 3] [--tokens 24] [--device cpu] [--json]

It reports, in order, and stops at the first problem with one `error:` line (exit 2):
1. the model family (`engine.families`, from config.json's model_type) and its router kind and settings;
2. logits of the native engine's `MoEModel` against transformers' own class for that family (imported only
   here), both fp32 on `--device`, on `--prompts` prompts of random token ids (seeded: no tokenizer is read):
   the largest absolute difference, that relative to the largest |logit|, and greedy (argmax) agreement over
   every position; a reference transformers cannot load or run is one `error:` line, and a setting its class
   misreads without it shaping any weight is overridden and named (`reference_overrides`);
3. experts per MoE layer and the store's memory (`engine.memory`, from config.json alone, bf16 weights as the
   GPUs run them): device GB of the resident store with the other weights, and per GPU of `costs.shapes.GPUS`
   whether that fits, else the largest X-slot offloaded pool that does (weights only: KV cache, draft and
   runtime come on top, `./reproduce.sh plan` counts them);
4. which methods bind to the model (`Variant.bind`: budgets within [k, E]) and which verifier backends map
   its router kind and every method's score and sizing (`methods.BACKENDS`);
5. with `--draft`: its format (an EAGLE-3 head in the SpecForge / SGLang layout) bound to the target, and its
   acceptance on the same prompts: tau (output tokens per target step) under Standard SD, whose tokens must
   equal Vanilla AR's.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from acceptmoe.commands import command, parser
from acceptmoe.costs.fit import GB
from acceptmoe.costs.shapes import GPUS
from acceptmoe.costs.verify import load_profile
from acceptmoe.engine import Engine, TreeShape
from acceptmoe.engine.backend import GenerationOptions
from acceptmoe.engine.config import CheckpointError, ModelConfig
from acceptmoe.engine.device import check_device
from acceptmoe.engine.eagle3 import Eagle3Draft
from acceptmoe.engine.families import FAMILIES
from acceptmoe.engine.memory import mxfp4_in_config, store_bytes, weight_bytes
from acceptmoe.engine.model import MoEModel
from acceptmoe.errors import UserError
from acceptmoe.experiments.spine.options import positive_int
from acceptmoe.methods import BASELINE, METHODS, REFERENCE, ConfigError, Variant
from acceptmoe.methods.registry import BACKENDS

GIB = 2 ** 30
PROMPT_LENGTHS = (8, 16, 32)          # prompt i has PROMPT_LENGTHS[i % 3] tokens
SEED = 0


class ReferenceFailed(UserError):
    """transformers cannot load or run the checkpoint the native engine was compared against."""


def prompts(vocab: int, n: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(SEED)
    return [torch.randint(0, vocab, (PROMPT_LENGTHS[i % len(PROMPT_LENGTHS)],), generator=g).tolist()
            for i in range(n)]


def family_row(cfg: ModelConfig) -> dict:
    r = cfg.moe.router
    return {"family": cfg.arch, "label": FAMILIES[cfg.arch].label, "router_kind": r.name,
            "top_k": r.top_k, "renormalize": r.renormalize, "groups": r.groups, "group_top": r.group_top,
            "scale": r.scale, "selection_bias": r.biased,
            "attention": "latent (MLA)" if cfg.attn.latent else "grouped-query",
            "shared_experts": cfg.moe.shared_intermediate_size > 0, "moe_layers": len(cfg.moe.layer_ids),
            "layers": cfg.num_layers}


def reference_overrides(cfg: ModelConfig, raw: dict) -> dict:
    """config.json settings the reference is loaded with instead of the checkpoint's, where transformers' class
    misreads one that shapes no weight: latent attention expands a key and a value for every head (`kv_b_proj`),
    but transformers 5's DeepseekV3Attention repeats them num_attention_heads / num_key_value_heads times and
    fails when that is above 1, so it is loaded with num_key_value_heads = num_attention_heads (the released
    models' setting; the same weights, and its own unrepeated path's logits)."""
    if cfg.attn.latent and raw.get("num_key_value_heads", cfg.attn.num_heads) != cfg.attn.num_heads:
        return {"num_key_value_heads": cfg.attn.num_heads}
    return {}


def _first_line(exc: Exception) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def reference_model(folder: Path, cfg: ModelConfig, device: str, overrides: dict | None = None):
    """transformers' own class for the family, fp32 (imported here only), with `overrides` of config.json."""
    name = FAMILIES[cfg.arch].transformers
    try:
        import transformers
        transformers.utils.logging.disable_progress_bar()                # the report is the output
        model_class = getattr(transformers, name)
        return model_class.from_pretrained(folder, dtype=torch.float32, **(overrides or {})).to(device).eval()
    except Exception as exc:  # noqa: BLE001 - any failure of the reference is reported, not a crash
        raise ReferenceFailed(f"transformers cannot load {folder} as {name} ({_first_line(exc)}); check the "
                              f"checkpoint with transformers itself") from None


def reference_logits(hf, x: torch.Tensor) -> torch.Tensor:
    """The reference's logits [T, V] fp32 for ids x [T]; a failure of transformers' forward is one error line."""
    try:
        return hf(x[None]).logits[0].float()
    except Exception as exc:  # noqa: BLE001 - the reference's own failure is reported, not a crash
        raise ReferenceFailed(f"transformers' {type(hf).__name__} cannot run this checkpoint ({_first_line(exc)}); "
                              f"check the checkpoint with transformers itself") from None


@torch.no_grad()
def logits_row(ours: MoEModel, hf, ids_list: list[list[int]]) -> dict:
    worst, scale, agree, total = 0.0, 0.0, 0, 0
    for ids in ids_list:
        x = torch.tensor(ids, device=ours.device)
        mine, _ = ours.forward(x, torch.arange(len(ids), device=ours.device), ours.new_cache(len(ids)), 0)
        ref = reference_logits(hf, x)
        worst = max(worst, float((mine - ref).abs().max()))
        scale = max(scale, float(ref.abs().max()))
        agree += int((mine.argmax(-1) == ref.argmax(-1)).sum())
        total += len(ids)
    return {"prompts": len(ids_list), "tokens": total, "max_abs_diff": worst,
            "max_rel_diff": worst / scale if scale else 0.0, "greedy_agreement": agree / total}


def memory_rows(cfg: ModelConfig, mxfp4: bool) -> dict:
    """The store's device bytes (bf16) per GPU: resident, else the largest X-slot pool that fits."""
    resident = weight_bytes(cfg, mxfp4)
    rows = []
    for gpu in GPUS:
        cap = gpu.memory_gib * GIB
        if resident["total"] <= cap:
            rows.append({"gpu": gpu.name, "memory_gib": gpu.memory_gib, "fits": "resident",
                         "slots": cfg.moe.num_experts})
            continue
        slots = next((x for x in range(cfg.moe.num_experts - 1, cfg.moe.top_k - 1, -1)
                      if weight_bytes(cfg, mxfp4, "offloaded", x)["total"] <= cap), None)
        rows.append({"gpu": gpu.name, "memory_gib": gpu.memory_gib, "fits": "offloaded" if slots else "no",
                     "slots": slots})
    one_slot = store_bytes(cfg, torch.bfloat16, "offloaded", cfg.moe.top_k, mxfp4).host_experts
    return {"experts_per_layer": cfg.moe.num_experts, "mxfp4": mxfp4, "resident_gb": resident["total"] / GB,
            "experts_gb": resident["experts"] / GB, "other_gb": resident["other"] / GB,
            "host_experts_gb_offloaded": one_slot / GB, "gpus": rows}


BACKEND_MODULES = ("acceptmoe.methods.reference", "acceptmoe.kernels.torch_verifier",
                   "acceptmoe.kernels.cpu_verifier", "acceptmoe.kernels.triton_verifier")


def load_backends() -> dict[str, str]:
    """Import every backend module (each declares its coverage in `methods.BACKENDS` as it loads); a module that
    cannot load here (Triton not installed) is reported by name."""
    import importlib
    failed = {}
    for module in BACKEND_MODULES:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            failed[module.rpartition(".")[2]] = f"not loadable here ({exc})"
    return failed


def methods_rows(engine: Engine) -> dict:
    """Which methods bind to the model's fit, and which backends serve its router kind and every method."""
    failed = load_backends()
    k = engine.fit.router.top_k
    methods = {}
    for name in METHODS:
        try:
            Variant(name).bind(engine.fit, commitment=(1.0,) * (engine.tree.num_steps + 1), b0=k,
                              cost=load_profile())
            methods[name] = "ok"
        except ConfigError as exc:
            methods[name] = str(exc)
    axes = engine.fit.router.axes
    backends = {}
    for name, coverage in BACKENDS.items():
        gaps = [f"{m}: {', '.join(coverage.missing(s))}" for m, s in METHODS.items() if coverage.missing(s)]
        gaps += [f"router {value}" for value in coverage.unmapped(axes)]
        backends[name] = "all methods" if not gaps else "lacks " + "; ".join(gaps)
    return {"methods": methods, "backends": {**backends, **failed}}


def draft_row(engine: Engine, ids_list: list[list[int]], tokens: int) -> dict:
    d = engine.draft
    vanilla, sd = Variant(REFERENCE).bind(engine.fit), Variant(BASELINE).bind(engine.fit)
    out, steps, same = 0, 0, True
    for ids in ids_list:
        truth = engine.generate(ids, vanilla, tokens, GenerationOptions(ignore_eos=True)).tokens
        gen = engine.generate(ids, sd, tokens, GenerationOptions(ignore_eos=True))
        out, steps, same = out + len(gen.tokens), steps + len(gen.accept_lengths), same and gen.tokens == truth
    return {"format": "EAGLE-3 (LlamaForCausalLMEagle3, SpecForge / SGLang layout)",
            "hidden_size": d.hidden_size,
            "draft_vocab_size": d.draft_vocab_size, "aux_layers": list(engine.draft.aux_layer_ids or ()),
            "tau": out / steps if steps else 0.0, "tokens": out, "steps": steps, "lossless": same}


def check(model: Path, draft: Path | None, n_prompts: int, tokens: int, device: str) -> dict:
    check_device(device)
    cfg = ModelConfig.from_folder(model)
    report = {"model": str(model), **family_row(cfg)}
    raw = json.loads((model / "config.json").read_text())
    ours = MoEModel.from_pretrained(model, device=device, dtype=torch.float32)
    ids_list = prompts(cfg.vocab_size, n_prompts)
    overrides = reference_overrides(cfg, raw)
    report["reference"] = {"class": FAMILIES[cfg.arch].transformers, "overrides": overrides}
    report["logits"] = logits_row(ours, reference_model(model, cfg, device, overrides), ids_list)
    report["memory"] = memory_rows(cfg, mxfp4_in_config(raw))
    head = load_draft(draft, device) if draft is not None else None
    engine = Engine(ours, head, tree=TreeShape())
    report.update(methods_rows(engine))
    if head is not None:
        report["draft"] = {"path": str(draft), **draft_row(engine, ids_list, tokens)}
    return report


def load_draft(folder: Path, device: str) -> Eagle3Draft:
    if not folder.is_dir():
        raise CheckpointError(f"draft folder {folder} does not exist; pass an EAGLE-3 draft folder")
    try:
        return Eagle3Draft.from_pretrained(folder, device=device, dtype=torch.float32)
    except FileNotFoundError as exc:
        raise CheckpointError(str(exc)) from None


def render(r: dict) -> str:
    lines = [f"model       {r['model']}",
             f"family      {r['label']} ({r['family']}): {r['layers']} layers, {r['moe_layers']} MoE, "
             f"{r['attention']} attention, shared experts: {'yes' if r['shared_experts'] else 'no'}",
             f"router      {r['router_kind']}: top-{r['top_k']}, renormalise {r['renormalize']}"
             + (f", {r['groups']} groups (top {r['group_top']}), scale {r['scale']}, selection bias"
                if r["selection_bias"] else "")]
    lg, ref = r["logits"], r["reference"]
    if ref["overrides"]:
        lines.append(f"reference   transformers' {ref['class']} loaded with "
                     + ", ".join(f"{k}={v}" for k, v in ref["overrides"].items())
                     + " (latent attention: a key and a value per head)")
    lines.append(f"logits      vs transformers (fp32, {lg['prompts']} random-id prompts, {lg['tokens']} positions): "
                 f"max |diff| {lg['max_abs_diff']:.3g} ({lg['max_rel_diff']:.3g} of max |logit|), greedy "
                 f"agreement {lg['greedy_agreement']:.1%}")
    m = r["memory"]
    lines.append(f"experts     {m['experts_per_layer']} per MoE layer{' (MXFP4)' if m['mxfp4'] else ''}; bf16 "
                 f"weights resident {m['resident_gb']:.2f} GB (experts {m['experts_gb']:.2f}, other "
                 f"{m['other_gb']:.2f}); KV cache, draft and runtime not counted")
    for g in m["gpus"]:
        fit = {"resident": "fits resident", "offloaded": f"fits offloaded with X = {g['slots']} slots per layer",
               "no": "does not fit, even offloaded"}[g["fits"]]
        lines.append(f"  {g['gpu']:<13} {g['memory_gib']} GiB: {fit}")
    lines.append("methods     " + ", ".join(f"{n}: {v}" for n, v in r["methods"].items()))
    lines.append("backends    " + ", ".join(f"{n}: {v}" for n, v in r["backends"].items())
                 + " (triton runs on CUDA only)")
    if "draft" in r:
        d = r["draft"]
        lines.append(f"draft       {d['path']}: {d['format']}, hidden {d['hidden_size']}, draft vocab "
                     f"{d['draft_vocab_size']}, aux layers {d['aux_layers']}")
        lines.append(f"acceptance  tau {d['tau']:.2f} output tokens per target step under standard-sd "
                     f"({d['tokens']} tokens, {d['steps']} steps); same tokens as vanilla-ar: {d['lossless']}")
    return "\n".join(lines)


@command("check-model", "a user's MoE checkpoint: family, router kind, logits against transformers, memory per GPU, "
                        "methods and backends; with --draft, its acceptance")
def main(argv: list[str] | None = None) -> int:
    p = parser("check-model")
    p.add_argument("--model", required=True, type=Path,
                   help="a Hugging Face checkpoint folder (config.json + safetensors)")
    p.add_argument("--draft", type=Path, default=None, help="an EAGLE-3 draft folder to check against the model")
    p.add_argument("--prompts", type=positive_int, default=3, help="random-id prompts compared (default 3)")
    p.add_argument("--tokens", type=positive_int, default=24, help="tokens generated per prompt with --draft")
    p.add_argument("--device", default="cpu", help="where both models run, fp32 (default cpu)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    a = p.parse_args(argv)
    report = check(a.model, a.draft, a.prompts, a.tokens, a.device)
    print(json.dumps(report, indent=2) if a.json else render(report))
    return 0
