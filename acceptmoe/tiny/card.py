"""The tiny world's model card: measured quality of models/tiny, written to models/tiny/README.md and card.json.

- Greedy accuracy of the target per tiny task on its test split (transformers, `quick_eval`).
- Router health per MoE layer: expert load entropy over the test prompts and reference replies (teacher
  forced, natural routing), normalised by log(E); the busiest expert's share; experts never chosen.
- Verification blocks under Standard SD with the paper's tree (5 steps, top-k 10, 64 tokens): mean tokens
  per block, mean natural routed union per block and layer (against E and k), and tau.

    ./reproduce.sh train-tiny --stages card        (or python -m acceptmoe.tiny.card --model models/tiny)
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

import torch

from acceptmoe.evals.generators import FAMILIES, generate
from acceptmoe.methods import BASELINE, Variant

from .quick_eval import evaluate
from .tokenizer import chat_text
from .train_target import BETAS


@torch.inference_mode()
def router_health(model, tok, n: int, seed: int = 0) -> list[dict]:
    """Per MoE layer: normalised load entropy, top expert share, unused experts (natural routing)."""
    E = model.config.moe.num_experts
    loads = {l: torch.zeros(E) for l in model.config.moe.layer_ids}

    def policy(layer, logits):
        ids, w = model.router.natural(logits)
        loads[layer] += torch.bincount(ids.flatten(), minlength=E).float()
        return ids, w
    for family in FAMILIES:
        for ex in generate(family, "test", n, seed):
            ids = tok(chat_text(ex["question"]) + ex["reference"], add_special_tokens=False)["input_ids"]
            x = torch.tensor(ids)
            model.forward(x, torch.arange(len(ids)), model.new_cache(len(ids)), 0, policy=policy)
    out = []
    for layer, c in loads.items():
        p = c / c.sum()
        h = float(-(p[p > 0] * p[p > 0].log()).sum())
        out.append({"layer": layer, "entropy_over_log_E": round(h / math.log(E), 4),
                    "top_expert_share": round(float(p.max()), 4), "unused_experts": int((c == 0).sum())})
    return out


def block_stats(engine, tok, n: int, seed: int = 0) -> dict:
    """Standard SD with the paper tree on n test prompts per family: block size, natural union, tau."""
    unions, sizes, taus = [], [], []
    for family in FAMILIES:
        for ex in generate(family, "test", n, seed):
            ids = tok(chat_text(ex["question"]), add_special_tokens=False)["input_ids"]
            gen = engine.generate(ids, Variant(BASELINE).bind(engine.fit), 96)
            taus.append(gen.mean_accept_length)
            for b in gen.trace.blocks:
                sizes.append(len(b.parents))
                unions += b.layers["natural_union"]
    return {"mean_block_tokens": round(statistics.mean(sizes), 2), "mean_natural_union": round(statistics.mean(unions), 2),
            "max_natural_union": max(unions), "tau": round(statistics.mean(taus), 3), "blocks": len(sizes)}


# what regenerates bit for bit, and where (measured; the same words in README.md)
REPRODUCIBILITY = [
    "## Reproducibility", "",
    "- Data and tokenizer: byte for byte. A retrain on another CPU type and the worlds study's retrains here",
    "  reproduce `data/manifest.json` and `tokenizer/` exactly (the tests check the manifest).",
    "- Weights: bit for bit on the machine type they were trained on (Intel Xeon, family 6 model 207, AVX-512",
    "  with AMX; torch 2.13.0+cpu from PyPI, which reports CPU capability AVX512; one thread). On another",
    "  instruction set float kernels differ: a retrain there diverged from step 75 and moved per-task greedy",
    "  accuracy by up to 7 pp (tiny-math 68.7 -> 77.0 %).",
    "- Worlds trained from other weights seeds (`train-tiny --seed S`) are the model-to-model spread a single",
    "  world's intervals leave out: `./reproduce.sh worlds` (results/reference/worlds/).", ""]


def render(card: dict) -> str:
    t, acc, rh, bs = card["target"], card["accuracy"], card["router_health"], card["blocks"]
    lines = ["# The tiny world: models/tiny", "",
             "Produced by `./reproduce.sh train-tiny` from seeds (settings: `configs/tiny/world.yaml`); this card by its",
             "`card` stage. Everything here is measured on the committed files.", "",
             "## Contents", "",
             "| folder | what |", "|---|---|",
             f"| `target/` | Qwen3-MoE architecture, {t['parameters']:,} parameters: hidden {t['hidden_size']}, "
             f"{t['num_layers']} layers, {t['num_experts']} experts with top-{t['top_k']} (Qwen3-30B-A3B's ratio), "
             f"expert width {t['moe_intermediate_size']}, vocab {t['vocab_size']}; fp32 safetensors |",
             "| `draft/` | EAGLE-3 head (SpecForge format): fc over target layers "
             f"{card['draft']['aux_layer_ids']}, one decoder layer, full draft vocabulary |",
             "| `tokenizer/` | byte-level BPE with ChatML special tokens and chat template (also inside `target/`) |",
             "| `data/` | the four tiny tasks' test splits as generated (sha256 in `data/manifest.json`) |", "",
             "## Training", "",
             f"- Target: {card['train']['target_tokens']:,} non-pad tokens of chat-formatted training examples of "
             f"the four tiny tasks (loss on assistant tokens, router load-balancing loss), "
             f"{card['train']['target_seconds']:.0f} s on one CPU thread, final loss {card['train']['target_loss']}.",
             f"- Target settings: {_settings(card['train'].get('settings'))}.",
             f"- Draft: trained on the target's own greedy replies and hidden states with training-time test "
             f"unrolling of {card['draft']['ttt_steps']} steps, {card['draft']['seconds']:.0f} s.", "",
             *REPRODUCIBILITY,
             "## Quality", "",
             f"Greedy accuracy of the target on the first {card['accuracy_n']} test examples per task (quick checks; "
             "Table 1 reports the project's scorers):", "",
             "| task | accuracy |", "|---|---:|"]
    lines += [f"| {f} | {100 * acc[f]:.1f} % |" for f in acc]
    lines += ["", f"Standard SD with the paper tree (5 steps, top-k 10, 64 draft tokens) on {card['blocks_n']} test "
              f"prompts per task: tau = {bs['tau']} accepted tokens per verification step over {bs['blocks']} blocks "
              f"of {bs['mean_block_tokens']} tokens on average; the natural routed union per block and layer is "
              f"{bs['mean_natural_union']} experts on average (max {bs['max_natural_union']}) of E = "
              f"{t['num_experts']} with k = {t['top_k']}.", "",
              "Router health (natural routing over test prompts and reference replies):", "",
              "| layer | load entropy / log E | busiest expert's share | unused experts |", "|---:|---:|---:|---:|"]
    lines += [f"| {r['layer']} | {r['entropy_over_log_E']} | {r['top_expert_share']} | {r['unused_experts']} |" for r in rh]
    return "\n".join(lines) + "\n"


def _settings(train: dict | None) -> str:
    """One line of the target's training settings (the `train` section of the config it was trained with)."""
    if not train:
        return "not recorded"
    mix = train.get("mixture") or {}
    mixture = ":".join(str(mix.get(k, 1)) for k in ("gsm", "math", "humaneval", "mbpp"))
    return (f"batch {train['batch_size']} examples, AdamW lr {train['lr']:g} (betas {BETAS[0]:g}/{BETAS[1]:g}, weight decay "
            f"{train['weight_decay']:g}), linear warmup over {100 * train['warmup_frac']:g} % of the tokens then cosine "
            f"decay to {train['min_lr_ratio']:g} x lr, gradient clip {train['grad_clip']:g}, seed-ordered mixture "
            f"gsm:math:humaneval:mbpp = {mixture} examples per round")


def build(model_root: Path, accuracy_n: int, routing_n: int, blocks_n: int) -> dict:
    from transformers import AutoTokenizer

    from acceptmoe.engine import load_engine
    tok = AutoTokenizer.from_pretrained(model_root / "target")
    engine = load_engine(model_root)
    cfg = engine.model.config
    tsum = json.loads((model_root / "target" / "train_summary.json").read_text())
    dsum = json.loads((model_root / "draft" / "train_summary.json").read_text())
    acc = evaluate(model_root / "target", accuracy_n)
    return {
        "target": {"parameters": tsum["parameters"], "hidden_size": cfg.hidden_size, "num_layers": cfg.num_layers,
                   "num_experts": cfg.moe.num_experts, "top_k": cfg.moe.top_k, "vocab_size": cfg.vocab_size,
                   "moe_intermediate_size": tsum["config"]["target"]["moe_intermediate_size"]},
        "train": {"target_tokens": tsum.get("tokens"), "target_seconds": tsum.get("seconds"),
                  "target_loss": tsum.get("final_loss"), "target_steps": tsum.get("steps"),
                  "settings": tsum["config"]["train"]},
        "draft": {"aux_layer_ids": dsum["aux_layer_ids"], "ttt_steps": dsum["config"]["ttt_steps"],
                  "seconds": dsum.get("total_seconds", 0.0)},
        "accuracy_n": accuracy_n, "accuracy": {f: r["accuracy"] for f, r in acc.items()},
        "router_health": router_health(engine.model, tok, routing_n),
        "blocks_n": blocks_n, "blocks": block_stats(engine, tok, blocks_n),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m acceptmoe.tiny.card", description=__doc__.split("\n")[0])
    p.add_argument("--model", default="models/tiny", help="folder with target/ and draft/")
    p.add_argument("--accuracy-n", type=int, default=300, help="test examples per task for accuracy")
    p.add_argument("--routing-n", type=int, default=50, help="test examples per task for router health")
    p.add_argument("--blocks-n", type=int, default=10, help="test prompts per task for block statistics")
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    root = Path(a.model)
    card = build(root, a.accuracy_n, a.routing_n, a.blocks_n)
    (root / "card.json").write_text(json.dumps(card, indent=1) + "\n")
    (root / "README.md").write_text(render(card))
    print(render(card))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
