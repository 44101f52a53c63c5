"""Train the tiny Qwen3-MoE target on chat-formatted examples of the four tiny task families.

Loss on assistant tokens only (the reply and its `<|im_end|>`), plus the router load-balancing loss
(`output_router_logits`, `router_aux_loss_coef`). AdamW with linear warmup and cosine decay over a token
budget (non-pad tokens seen); a wall-clock guard stops early and still saves. Batches are length-bucketed
to limit padding. Writes `save_pretrained` safetensors, the tokenizer and `train_summary.json`.

    python -m acceptmoe.tiny.train_target --tokenizer models/tiny/tokenizer --out models/tiny/target
"""
from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import logging
import math
import random
import time
from collections.abc import Iterator
from pathlib import Path

import torch

from acceptmoe.evals.generators import mixed_stream

from . import config as tiny_config
from .tokenizer import IM_END, chat_text

log = logging.getLogger("acceptmoe.tiny")
BETAS = (0.9, 0.95)              # AdamW betas of the target (and the draft)


def build_model(cfg: tiny_config.TargetConfig, tok, seed: int):
    """A freshly initialised Qwen3MoeForCausalLM; errors if it exceeds cfg.max_params."""
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    torch.manual_seed(seed)
    mc = Qwen3MoeConfig(
        vocab_size=len(tok), hidden_size=cfg.hidden_size, intermediate_size=4 * cfg.hidden_size,
        num_hidden_layers=cfg.num_layers, num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_kv_heads, head_dim=cfg.head_dim, num_experts=cfg.num_experts,
        num_experts_per_tok=cfg.top_k, moe_intermediate_size=cfg.moe_intermediate_size, norm_topk_prob=True,
        output_router_logits=True, router_aux_loss_coef=cfg.router_aux_loss_coef,
        tie_word_embeddings=cfg.tie_word_embeddings, max_position_embeddings=cfg.max_position_embeddings,
        rope_parameters={"rope_type": "default", "rope_theta": cfg.rope_theta},
        bos_token_id=None, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    model = Qwen3MoeForCausalLM(mc)
    n = count_params(model)
    if n > cfg.max_params:
        raise tiny_config.TinyConfigError(f"target has {n:,} parameters, over max_params={cfg.max_params:,}: "
                                          f"shrink num_experts, moe_intermediate_size or num_layers")
    return model


def count_params(model) -> int:
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


def encode(tok, ex: dict) -> tuple[list[int], list[int]]:
    """(input ids, labels): the prompt exactly as at inference, then the reply and <|im_end|> as targets."""
    prompt = tok(chat_text(ex["question"]), add_special_tokens=False)["input_ids"]
    reply = tok(ex["reference"], add_special_tokens=False)["input_ids"] + [tok.convert_tokens_to_ids(IM_END)]
    return prompt + reply, [-100] * len(prompt) + reply


def batches(tok, seed: int, batch_size: int, weights: dict[str, int] | None = None,
            pool_batches: int = 32) -> Iterator[dict]:
    """Endless length-bucketed, right-padded batches from the seeded training mixture."""
    rng, examples = random.Random(seed), mixed_stream("train", seed, weights)
    while True:
        pool = [encode(tok, ex) for ex in itertools.islice(examples, batch_size * pool_batches)]
        rng.shuffle(pool)
        pool.sort(key=lambda p: len(p[0]))
        chunks = [pool[i:i + batch_size] for i in range(0, len(pool), batch_size)]
        rng.shuffle(chunks)
        for chunk in chunks:
            yield collate(chunk, tok.pad_token_id)


def collate(chunk: list[tuple[list[int], list[int]]], pad_id: int) -> dict:
    width = max(len(ids) for ids, _ in chunk)
    ids = torch.full((len(chunk), width), pad_id, dtype=torch.long)          # [B, L]
    labels = torch.full((len(chunk), width), -100, dtype=torch.long)        # [B, L]
    mask = torch.zeros((len(chunk), width), dtype=torch.long)               # [B, L]
    for row, (x, y) in enumerate(chunk):
        ids[row, :len(x)], labels[row, :len(y)], mask[row, :len(x)] = torch.tensor(x), torch.tensor(y), 1
    return {"input_ids": ids, "labels": labels, "attention_mask": mask}


def lr_at(tokens: int, cfg: tiny_config.TrainConfig) -> float:
    """Linear warmup, then cosine decay to min_lr_ratio * lr at max_tokens."""
    warmup = cfg.warmup_frac * cfg.max_tokens
    if tokens < warmup:
        return cfg.lr * max(tokens, 1) / warmup
    frac = min(1.0, (tokens - warmup) / max(1.0, cfg.max_tokens - warmup))
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * frac)))


def optimizer(model, cfg: tiny_config.TrainConfig) -> torch.optim.Optimizer:
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                              {"params": rest, "weight_decay": 0.0}], lr=cfg.lr, betas=BETAS)


def train(model, tok, cfg: tiny_config.TrainConfig, seed: int, init_seed: int | None = None) -> dict:
    """The training loop; returns a summary (tokens, seconds, tokens/s, loss history). `seed` orders the data,
    `init_seed` (default `seed`) seeds torch."""
    from tqdm import tqdm

    torch.manual_seed(seed if init_seed is None else init_seed)
    model.train()
    opt, data = optimizer(model, cfg), batches(tok, seed, cfg.batch_size, cfg.mixture.weights())
    tokens, step, start, cpu0, history = 0, 0, time.perf_counter(), time.process_time(), []
    ema = None
    bar = tqdm(total=cfg.max_tokens, unit="tok", unit_scale=True, desc="target", dynamic_ncols=True)
    while tokens < cfg.max_tokens:
        elapsed = time.perf_counter() - start
        if elapsed > cfg.max_minutes * 60:
            log.warning("time guard: stopping at %d of %d tokens after %.1f min (raise train.max_minutes or "
                        "lower train.max_tokens)", tokens, cfg.max_tokens, elapsed / 60)
            break
        batch = next(data)
        for group in opt.param_groups:
            group["lr"] = lr_at(tokens, cfg)
        out = model(**batch)
        opt.zero_grad(set_to_none=True)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        n = int(batch["attention_mask"].sum())
        tokens, step = tokens + n, step + 1
        aux = float(out.aux_loss.detach())
        lm = float(out.loss.detach()) - model.config.router_aux_loss_coef * aux
        ema = lm if ema is None else 0.95 * ema + 0.05 * lm
        bar.update(n)
        rate = tokens / (time.perf_counter() - start)
        bar.set_postfix(loss=f"{ema:.3f}", aux=f"{aux:.2f}", tok_s=f"{rate:,.0f}")
        if step % cfg.log_every == 0:
            cpu_rate = tokens / max(1e-9, time.process_time() - cpu0)   # tokens per CPU-second, all threads
            history.append({"step": step, "tokens": tokens, "loss": round(ema, 4), "aux": round(aux, 4),
                            "lr": group["lr"], "tok_s": round(rate), "tok_per_cpu_s": round(cpu_rate)})
            log.info("step %d tokens %d loss %.4f aux %.3f lr %.2e tok/s %.0f tok/cpu-s %.0f", step, tokens, ema,
                     aux, group["lr"], rate, cpu_rate)
    bar.close()
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu0
    return {"steps": step, "tokens": tokens, "seconds": round(seconds, 1), "tokens_per_s": round(tokens / seconds),
            "tokens_per_cpu_s": round(tokens / max(cpu, 1e-9)),
            "final_loss": round(ema, 4) if ema is not None else None, "history": history}


def run(cfg: tiny_config.TinyWorldConfig, tokenizer_dir: str | Path, out_dir: str | Path) -> dict:
    """Build, train and save the target into out_dir (weights, tokenizer, train_summary.json)."""
    from transformers import AutoTokenizer

    torch.set_num_threads(cfg.train.threads)
    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    model = build_model(cfg.target, tok, cfg.init_seed)
    log.info("target: %s parameters, E=%d top-%d, %d layers", f"{count_params(model):,}",
             cfg.target.num_experts, cfg.target.top_k, cfg.target.num_layers)
    summary = train(model, tok, cfg.train, cfg.seed, cfg.init_seed)
    out_dir = Path(out_dir)
    model.config.output_router_logits = False
    model.save_pretrained(str(out_dir))
    tok.save_pretrained(str(out_dir))
    summary = {"parameters": count_params(model), "config": tiny_config.as_dict(cfg), **summary}
    (out_dir / "train_summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    log.info("saved target to %s: %d tokens in %.1f s (%d tok/s), final loss %s", out_dir, summary["tokens"],
             summary["seconds"], summary["tokens_per_s"], summary["final_loss"])
    return summary


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m acceptmoe.tiny.train_target", description=__doc__.split("\n")[0])
    p.add_argument("--config", default=str(tiny_config.DEFAULT_PATH), help="tiny-world YAML")
    p.add_argument("--tokenizer", required=True, help="folder with the trained tokenizer")
    p.add_argument("--out", default="models/tiny/target", help="output folder")
    p.add_argument("--max-tokens", type=int, help="override train.max_tokens (e.g. a smoke test)")
    p.add_argument("--max-minutes", type=float, help="override train.max_minutes")
    p.add_argument("--threads", type=int, help="override train.threads")
    args = p.parse_args(argv)
    cfg = tiny_config.load(args.config)
    overrides = {k: v for k, v in (("max_tokens", args.max_tokens), ("max_minutes", args.max_minutes),
                                              ("threads", args.threads)) if v}
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, **overrides))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(Path(args.out) / "train_target.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    logging.getLogger().addHandler(handler)
    run(cfg, args.tokenizer, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
