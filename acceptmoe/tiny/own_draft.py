"""`./reproduce.sh train-draft`: an EAGLE-3 draft for a user's own target, trained as the tiny world's is
(docs/own-model.md; the steps are `train_draft`'s, with the user's prompts and the target's own template).

    ./reproduce.sh train-draft --target DIR --out DIR (--prompts FILE | --task T [T ...]) [--limit N]

1. Prompts: a JSONL file (each line {"messages": [...]} or {"prompt": "text"}, a user turn) or the train
   split of project tasks; the last `--eval-prompts` are held out. Each is rendered with the target's own
   chat template (`engine.text.prompt_ids`).
2. Data (`draft_data.build_from_ids`): the target's greedy replies (transformers' model of its family),
   one forward for the fused features of three layers (`train_draft.aux_layer_ids`) and the greedy token
   per position; saved to `<out>/train-data.pt`, so a resumed run does not regenerate it.
3. Model (`train_draft.new_draft`): one Llama decoder layer sized from the target (its hidden size, heads,
   head size, dense MLP width), the full vocabulary, the target's embedding copied and frozen.
4. Training (`train_draft.train`): test-time training unrolled over the tree depth, AdamW, warmup and
   cosine decay, a checkpoint every `--checkpoint-every` steps in `<out>/checkpoint.pt`; rerunning the
   same command resumes from it.
5. Measurement with this project's engine: tau (Standard SD, the `--tree` shape) and Vanilla AR = Standard
   SD token for token on the held-out prompts, in `<out>/train_summary.json`. The draft is saved in the
   SpecForge format the loader and SGLang read (`Eagle3Draft.save_pretrained`).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import time
from pathlib import Path

import torch

from acceptmoe.commands import command, parser
from acceptmoe.engine.backend import GenerationOptions
from acceptmoe.engine.device import check_device
from acceptmoe.engine.engine import load_engine
from acceptmoe.engine.text import load_tokenizer, prompt_ids
from acceptmoe.engine.tree import TreeShape
from acceptmoe.errors import UserError
from acceptmoe.evals.tasks import get_task
from acceptmoe.methods import BASELINE, REFERENCE, Variant

from . import draft_data, train_draft
from .config import DraftConfig

log = logging.getLogger("acceptmoe.tiny")


def read_prompts(path: Path) -> list[list[dict]]:
    """Chat messages per line of a JSONL file: {"messages": [...]} or {"prompt": "text"} (one user turn)."""
    out = []
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise UserError(f"--prompts {path}: cannot be read ({exc.strerror}); give a JSONL file") from None
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UserError(f"{path}:{n}: not JSON ({exc.msg}); each line is {{\"messages\": [...]}} or "
                            f"{{\"prompt\": \"...\"}}") from None
        if isinstance(row, dict) and isinstance(row.get("messages"), list) and row["messages"]:
            out.append(row["messages"])
        elif isinstance(row, dict) and isinstance(row.get("prompt"), str):
            out.append([{"role": "user", "content": row["prompt"]}])
        else:
            raise UserError(f"{path}:{n}: a line needs \"messages\" (a list of role/content turns) or \"prompt\" "
                            f"(text)")
    return out


def task_prompts(tasks: list[str], limit: int) -> list[list[dict]]:
    """The train split's chat messages of each task, interleaved, `limit` in all."""
    per = [[get_task(t).messages(ex) for ex in get_task(t).load("train", limit)] for t in tasks]
    mixed = [m for group in zip(*per, strict=False) for m in group] if per else []
    return mixed[:limit]


def sized(target_cfg: dict, steps: int, **over) -> DraftConfig:
    """The draft's shape from the target's config (as SpecForge sizes EAGLE-3 heads: the target's hidden
    size, heads and head size, its dense MLP width) and the training settings."""
    H, heads = target_cfg["hidden_size"], target_cfg["num_attention_heads"]
    kv = target_cfg.get("num_key_value_heads") or heads
    head_dim = target_cfg.get("head_dim") or H // heads
    width = target_cfg.get("intermediate_size") or 4 * H
    if heads % kv:
        kv = heads
    return DraftConfig(intermediate_size=width, num_heads=heads, num_kv_heads=kv, head_dim=head_dim,
                       ttt_steps=max(2, steps), **over)


def build_data(target_dir: Path, tok, prompts: list[list[int]], aux, dc: DraftConfig, cache: Path, device: str):
    """The training sequences (from `cache` when an earlier run saved them) and the transformers target."""
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(str(target_dir), dtype=torch.float32).to(device).eval()
    model.config.output_router_logits = False
    key = hashlib.sha256(json.dumps([prompts, list(aux), dc.max_new_tokens]).encode()).hexdigest()
    if cache.is_file():
        saved = torch.load(cache, weights_only=False)
        if saved["key"] != key:
            raise UserError(f"{cache} was made from other prompts or settings: give another --out, or delete it "
                            f"and {cache.parent / 'checkpoint.pt'} to start over")
        return saved["seqs"], model
    seqs = draft_data.build_from_ids(model, tok, prompts, aux, dc.max_new_tokens, dc.gen_batch_size)
    tmp = cache.with_suffix(".tmp")
    torch.save({"key": key, "seqs": seqs}, tmp)
    tmp.replace(cache)
    return seqs, model


def measure(target_dir: Path, out: Path, held_out: list[list[int]], dc: DraftConfig, tree: TreeShape,
            device: str = "cpu") -> dict:
    """tau with Standard SD and Vanilla AR = Standard SD token for token, on the held-out prompts."""
    engine = load_engine(target=target_dir, draft=out, tree=tree, device=device)
    try:
        sd_plan, ar_plan = Variant(BASELINE).bind(engine.fit), Variant(REFERENCE).bind(engine.fit)
        accepted = steps = equal = 0
        for ids in held_out:
            sd = engine.generate(ids, sd_plan, dc.max_new_tokens, GenerationOptions(trace_layers=False))
            ar = engine.generate(ids, ar_plan, dc.max_new_tokens, GenerationOptions(trace_layers=False))
            accepted, steps, equal = accepted + sum(sd.accept_lengths), steps + len(sd.accept_lengths), \
                equal + (ar.tokens == sd.tokens)
    finally:
        engine.close()
    return {"tree": dataclasses.asdict(tree), "prompts": len(held_out), "tau": round(accepted / max(1, steps), 3),
            "lossless": {"checked": len(held_out), "equal": equal, "all_equal": equal == len(held_out)}}


def run(args) -> dict:
    """Prompts, data, draft, training (resumable), save and measurement; returns the summary."""
    target, out = Path(args.target), Path(args.out)
    if not (target / "config.json").is_file():
        raise UserError(f"--target {target}: no config.json; give a Hugging Face checkpoint folder")
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(args.threads)
    tok = load_tokenizer(target)
    messages = read_prompts(Path(args.prompts)) if args.prompts else task_prompts(args.task, args.limit)
    messages = messages[:args.limit]
    if len(messages) <= args.eval_prompts:
        raise UserError(f"{len(messages)} prompts leave none to train on after {args.eval_prompts} held out: give "
                        f"more prompts or lower --eval-prompts")
    ids = [prompt_ids(tok, m) for m in messages]
    train_ids, held_out = ids[:-args.eval_prompts], ids[-args.eval_prompts:]
    target_cfg = json.loads((target / "config.json").read_text())
    aux = train_draft.aux_layer_ids(target_cfg["num_hidden_layers"])
    dc = sized(target_cfg, args.tree[0], max_new_tokens=args.max_new_tokens, epochs=args.epochs,
               batch_size=args.batch_size, lr=args.lr, warmup_steps=args.warmup_steps, threads=args.threads,
               max_minutes=args.max_minutes, eval_prompts=args.eval_prompts, lossless_prompts=args.eval_prompts,
               gen_batch_size=args.batch_size)
    t0 = time.perf_counter()
    seqs, model = build_data(target, tok, train_ids, aux, dc, out / "train-data.pt", args.device)
    draft = train_draft.new_draft(model, dc, args.seed).to(args.device)
    del model
    summary = train_draft.train(draft, seqs, dc, args.seed,
                                train_draft.Checkpoints(out / "checkpoint.pt", args.checkpoint_every))
    draft.cpu().save_pretrained(out)
    result = measure(target, out, held_out, dc, TreeShape(*args.tree), args.device)
    summary = {"target": str(target), "prompts": {"train": len(train_ids), "held_out": len(held_out)},
               "config": dataclasses.asdict(dc), "aux_layer_ids": list(aux), "train": summary, "eval": result,
               "seconds": round(time.perf_counter() - t0, 1)}
    (out / "train_summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


@command("train-draft", "an EAGLE-3 draft for your own target: its replies to your prompts (or a task's), "
                        "test-time training, resumable; tau and losslessness on held-out prompts")
def main(argv: list[str] | None = None) -> int:
    p = parser("train-draft")
    p.add_argument("--target", required=True, help="the target's Hugging Face checkpoint folder (with tokenizer)")
    p.add_argument("--out", required=True, help="the draft's folder (checkpoints and data are kept there)")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompts", help='JSONL: one {"messages": [...]} or {"prompt": "..."} per line')
    src.add_argument("--task", nargs="+", help="project tasks whose train split gives the prompts")
    p.add_argument("--limit", type=int, default=512, help="prompts in all, held-out ones included (default 512)")
    p.add_argument("--eval-prompts", type=int, default=16, help="held out for tau and the lossless check")
    p.add_argument("--max-new-tokens", type=int, default=128, help="the target's reply cap per prompt")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup-steps", type=int, default=20)
    p.add_argument("--max-minutes", type=float, default=600.0, help="a guard on the training loop")
    p.add_argument("--checkpoint-every", type=int, default=100, help="steps between checkpoints")
    p.add_argument("--tree", type=int, nargs=3, default=[5, 10, 64], metavar=("STEPS", "TOPK", "TOKENS"),
                   help="the tree tau is measured with (its depth is the training's unrolling)")
    p.add_argument("--threads", type=int, default=max(1, torch.get_num_threads()))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                   help="where the target answers and the draft trains (default: cuda when present)")
    args = p.parse_args(argv)
    check_device(args.device)
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    s = run(args)
    ev = s["eval"]
    print(f"draft written to {args.out}: tau {ev['tau']} on {ev['prompts']} held-out prompts (tree "
          f"{'/'.join(map(str, args.tree))}), Vanilla AR = Standard SD on {ev['lossless']['equal']} of "
          f"{ev['lossless']['checked']}; {s['train']['steps']} training steps")
    return 0
