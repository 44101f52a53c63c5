"""Train the tiny world's EAGLE-3 draft head on its target's own hidden states and greedy replies.

    python -m acceptmoe.tiny.train_draft --target models/tiny/target --out models/tiny/draft

1. Data (`draft_data`): chat prompts from the four families' train splits, the target's greedy replies,
   one target forward for the fused features of layers `aux_layer_ids(L)` and the greedy token per position.
2. Model: `Eagle3Draft` (SpecForge format) sized from the target, full vocabulary (draft_vocab_size = V,
   d2t zeros: with V = 1024 a frequency-selected subset saves nothing and would only lose tokens), its
   own embedding copied from the target and frozen, as SpecForge does.
3. Training (`draft_ttt`): training-time test unrolled `draft.ttt_steps` steps, cross-entropy against
   the target's greedy tokens on reply positions, step s weighted `step_decay ** s`; AdamW, warmup and
   cosine decay, a wall-clock guard.
4. Measurement: the engine with the saved draft, `standard-sd` with the paper's tree (5 steps, top-10,
   64 tokens) on test prompts: mean accepted length per verification step (tau) per family, and
   token-for-token equality with `vanilla-ar` on a few prompts. Written to `<out>/train_summary.json`.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import os
import random
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from acceptmoe.engine.backend import GenerationOptions
from acceptmoe.engine.eagle3 import ARCHITECTURE, Eagle3Draft
from acceptmoe.engine.tree import TreeShape
from acceptmoe.evals.generators import FAMILIES, generate
from acceptmoe.methods import BASELINE, REFERENCE, Variant

from . import config as tiny_config
from . import draft_data, train_target
from .draft_ttt import ttt_loss
from .tokenizer import chat_text

log = logging.getLogger("acceptmoe.tiny")
PAPER_TREE = TreeShape(num_steps=5, topk=10, num_draft_tokens=64)


def aux_layer_ids(num_layers: int) -> tuple[int, int, int]:
    """Low, middle and high target layers (outputs) whose hidden states the draft fuses.

    SGLang captures the *input* of layer id + 1, so the highest id is L - 2 (the last layer's input); for
    L = 4 this gives (0, 1, 2). Large models use SpecForge's (1, L // 2 - 1, L - 4)."""
    if num_layers < 4:
        raise ValueError(f"the draft fuses 3 distinct layers below the last; the target has {num_layers}")
    if num_layers >= 8:
        return (1, num_layers // 2 - 1, num_layers - 4)
    return (0, num_layers // 2 - 1, num_layers - 2)


def draft_config(target_cfg: dict, cfg: tiny_config.DraftConfig) -> dict:
    """The SpecForge/SGLang config.json of a draft for a Hugging Face target config."""
    H, V = target_cfg["hidden_size"], target_cfg["vocab_size"]
    rope = target_cfg.get("rope_parameters") or {}
    return {
        "architectures": [ARCHITECTURE], "model_type": "llama", "hidden_size": H,
        "intermediate_size": cfg.intermediate_size, "num_attention_heads": cfg.num_heads,
        "num_key_value_heads": cfg.num_kv_heads, "head_dim": cfg.head_dim, "num_hidden_layers": 1,
        "rms_norm_eps": target_cfg.get("rms_norm_eps", 1e-6),
        "rope_theta": rope.get("rope_theta", target_cfg.get("rope_theta", 10000.0)), "rope_scaling": None,
        "max_position_embeddings": target_cfg["max_position_embeddings"], "vocab_size": V,
        "draft_vocab_size": V, "target_hidden_size": H, "hidden_act": "silu", "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": list(aux_layer_ids(target_cfg["num_hidden_layers"])),
                         "use_aux_hidden_state": True},
    }


def new_draft(target, cfg: tiny_config.DraftConfig, seed: int) -> Eagle3Draft:
    """A fresh draft for a transformers target: own embedding copied from the target and frozen."""
    torch.manual_seed(seed)
    draft = Eagle3Draft(draft_config(target.config.to_dict(), cfg), own_embedding=True).float()
    with torch.no_grad():
        draft.embed_tokens.weight.copy_(target.get_input_embeddings().weight.float())
        draft.t2d.fill_(True)                    # full vocabulary: every target token is a draft token
    draft.embed_tokens.requires_grad_(False)
    return draft


def lr_at(step: int, total: int, cfg: tiny_config.DraftConfig) -> float:
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    frac = min(1.0, (step - cfg.warmup_steps) / max(1, total - cfg.warmup_steps))
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * frac)))


@dataclass(frozen=True)
class Checkpoints:
    """Where the training loop saves its state (draft, optimiser, step, history) every `every` steps, and
    resumes from: a rerun replays the data order up to the saved step and continues from there."""
    path: Path
    every: int

    def save(self, draft: Eagle3Draft, opt, state: dict) -> None:
        tmp = self.path.with_suffix(".tmp")
        torch.save({"draft": draft.state_dict(), "opt": opt.state_dict(), **state}, tmp)
        os.replace(tmp, self.path)

    def load(self, draft: Eagle3Draft, opt) -> dict | None:
        if not self.path.is_file():
            return None
        saved = torch.load(self.path, weights_only=False)
        draft.load_state_dict(saved.pop("draft"))
        opt.load_state_dict(saved.pop("opt"))
        return saved


def train(draft: Eagle3Draft, seqs: list[draft_data.DraftSequence], cfg: tiny_config.DraftConfig,
          seed: int, checkpoints: Checkpoints | None = None) -> dict:
    """The TTT training loop; returns a summary with the loss and per-step accuracy history. With
    `checkpoints`, it resumes from the saved state (if any) and saves every `checkpoints.every` steps."""
    from tqdm import tqdm

    rng = random.Random(seed)
    device = draft.fc.weight.device                # the batches are built on the host, trained where the draft is
    params = [p for p in draft.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, betas=train_target.BETAS, weight_decay=cfg.weight_decay)
    per_epoch = math.ceil(len(seqs) / cfg.batch_size)
    total = cfg.epochs * per_epoch
    draft.train()
    step, start, history, ema, before = 0, time.perf_counter(), [], None, 0.0
    saved = checkpoints.load(draft, opt) if checkpoints else None
    if saved:
        step, history, ema, before = saved["step"], saved["history"], saved["ema"], saved["seconds"]
        log.info("draft: resumed at step %d of %d from %s", step, total, checkpoints.path)
    elapsed = lambda: before + time.perf_counter() - start        # noqa: E731
    bar = tqdm(total=total, initial=step, unit="step", desc="draft", dynamic_ncols=True)
    stopped_early, seen = False, 0
    for epoch in range(cfg.epochs):
        for batch in draft_data.batches(seqs, cfg.batch_size, rng):
            seen += 1
            if seen <= step:                  # trained before the resume: the data order is replayed
                continue
            if elapsed() > cfg.max_minutes * 60:
                stopped_early = True
                break
            for group in opt.param_groups:
                group["lr"] = lr_at(step, total, cfg)
            loss, stats = ttt_loss(draft, batch.to(device), cfg.ttt_steps, cfg.step_decay)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
            opt.step()
            loss = float(loss.detach())
            step += 1
            accs = [s.accuracy for s in stats]
            ema = accs if ema is None else [0.9 * e + 0.1 * a for e, a in zip(ema, accs, strict=False)]
            bar.update(1)
            bar.set_postfix(loss=f"{loss:.3f}", acc0=f"{ema[0]:.3f}", accL=f"{ema[-1]:.3f}")
            if step % cfg.log_every == 0 or step == total:
                history.append({"step": step, "epoch": epoch, "loss": round(loss, 4),
                                "step_loss": [round(s.loss, 4) for s in stats],
                                "step_acc_ema": [round(a, 4) for a in ema], "lr": group["lr"],
                                "seconds": round(elapsed(), 1)})
                log.info("draft step %d/%d epoch %d loss %.4f step losses %s acc(ema) %s lr %.2e", step, total,
                         epoch, loss, [round(s.loss, 3) for s in stats], [round(a, 3) for a in ema],
                         group["lr"])
            if checkpoints and (step % checkpoints.every == 0 or step == total):
                checkpoints.save(draft, opt, {"step": step, "history": history, "ema": ema, "seconds": elapsed()})
        if stopped_early:
            log.warning("draft time guard: stopped at step %d of %d after %.1f min (raise draft.max_minutes or "
                        "lower draft.epochs)", step, total, elapsed() / 60)
            break
    bar.close()
    draft.eval()
    return {"steps": step, "planned_steps": total, "stopped_early": stopped_early,
            **({"resumed_at": saved["step"]} if saved else {}), "seconds": round(elapsed(), 1), "history": history}


def measure(target_dir: Path, draft_dir: Path, tok, cfg: tiny_config.DraftConfig, seed: int,
            shape: TreeShape = PAPER_TREE) -> dict:
    """tau (mean accepted length per verification step) with standard-sd per family, and losslessness."""
    from acceptmoe.engine.engine import load_engine

    engine = load_engine(target=target_dir, draft=draft_dir, tree=shape)
    result: dict = {"tree": dataclasses.asdict(shape), "families": {}, "lossless": {"checked": 0, "equal": 0}}
    all_steps = all_tokens = 0
    for family in FAMILIES:
        accepted = steps = 0
        for k, ex in enumerate(generate(family, "test", cfg.eval_prompts, seed)):
            prompt = tok(chat_text(ex["question"]), add_special_tokens=False)["input_ids"]
            sd = engine.generate(prompt, Variant(BASELINE).bind(engine.fit), cfg.max_new_tokens,
                                 GenerationOptions(trace_layers=False))
            accepted, steps = accepted + sum(sd.accept_lengths), steps + len(sd.accept_lengths)
            if k < cfg.lossless_prompts:
                ar = engine.generate(prompt, Variant(REFERENCE).bind(engine.fit), cfg.max_new_tokens)
                result["lossless"]["checked"] += 1
                result["lossless"]["equal"] += int(ar.tokens == sd.tokens)
        result["families"][family] = {"tau": round(accepted / max(1, steps), 3), "steps": steps,
                                      "prompts": cfg.eval_prompts}
        all_steps, all_tokens = all_steps + steps, all_tokens + accepted
        log.info("draft tau %s: %.3f over %d verification steps", family, accepted / max(1, steps), steps)
    result["tau"] = round(all_tokens / max(1, all_steps), 3)
    result["lossless"]["all_equal"] = result["lossless"]["equal"] == result["lossless"]["checked"]
    return result


def run(cfg: tiny_config.TinyWorldConfig, target_dir: str | Path, out_dir: str | Path) -> dict:
    """Data, training, save (`Eagle3Draft.save_pretrained`) and measurement; returns the summary."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dc, target_dir, out_dir = cfg.draft, Path(target_dir), Path(out_dir)
    torch.set_num_threads(dc.threads)
    tok = AutoTokenizer.from_pretrained(str(target_dir))
    target = AutoModelForCausalLM.from_pretrained(str(target_dir), dtype=torch.float32).eval()
    target.config.output_router_logits = False
    aux = aux_layer_ids(target.config.num_hidden_layers)
    t0 = time.perf_counter()
    questions = [e["question"] for f in FAMILIES for e in generate(f, "train", dc.prompts_per_family, cfg.seed)]
    seqs = draft_data.build(target, tok, questions, aux, dc.max_new_tokens, dc.gen_batch_size)
    data_s = time.perf_counter() - t0
    n_labels = sum(int((s.labels != draft_data.IGNORE).sum()) for s in seqs)
    n_eos = sum(int(s.ids[-1] == tok.eos_token_id) for s in seqs)
    log.info("draft data: %d sequences, %d tokens, %d labelled, %d of them end in EOS, %.1f s", len(seqs),
             sum(s.ids.shape[0] for s in seqs), n_labels, n_eos, data_s)
    draft = new_draft(target, dc, cfg.init_seed)
    del target
    summary = train(draft, seqs, dc, cfg.seed)
    draft.save_pretrained(out_dir)
    t1 = time.perf_counter()
    result = measure(target_dir, out_dir, tok, dc, cfg.seed)
    summary = {"config": dataclasses.asdict(dc), "aux_layer_ids": list(aux), "target": str(target_dir),
               "data": {"sequences": len(seqs), "labelled_tokens": n_labels, "ended_in_eos": n_eos,
                        "seconds": round(data_s, 1)},
               "train": summary, "eval": result, "eval_seconds": round(time.perf_counter() - t1, 1),
               "total_seconds": round(time.perf_counter() - t0, 1)}
    (out_dir / "train_summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    log.info("draft saved to %s: tau %.3f (%s), lossless %d/%d", out_dir, result["tau"],
             {f: r["tau"] for f, r in result["families"].items()}, result["lossless"]["equal"],
             result["lossless"]["checked"])
    return summary


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m acceptmoe.tiny.train_draft", description=__doc__.split("\n")[0])
    p.add_argument("--config", default=str(tiny_config.DEFAULT_PATH), help="tiny-world YAML")
    p.add_argument("--target", required=True, help="folder with the trained target and its tokenizer")
    p.add_argument("--out", default="models/tiny/draft", help="output folder")
    p.add_argument("--threads", type=int, help="override draft.threads")
    args = p.parse_args(argv)
    cfg = tiny_config.load(args.config)
    if args.threads:
        cfg = dataclasses.replace(cfg, draft=dataclasses.replace(cfg.draft, threads=args.threads))
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    run(cfg, args.target, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
