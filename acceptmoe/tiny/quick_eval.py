"""Greedy accuracy of a tiny target on the tiny test splits, with the self-contained checks in `checks`.

Batched greedy decoding with transformers (left padding), replies cut at `<|im_end|>`. A quick health
check for training; the project's scorers in acceptmoe.evals are the reference for reported numbers.

    python -m acceptmoe.tiny.quick_eval models/tiny/target --n 300
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from acceptmoe.commands import command, parser
from acceptmoe.evals.generators import FAMILIES, generate

from . import checks
from .tokenizer import chat_text


@torch.inference_mode()
def greedy_replies(model, tok, questions: list[str], batch_size: int = 32, max_new_tokens: int = 160) -> list[str]:
    """The model's greedy reply to each question (special tokens dropped)."""
    tok.padding_side = "left"
    replies: list[str] = []
    for i in range(0, len(questions), batch_size):
        enc = tok([chat_text(q) for q in questions[i:i + batch_size]], return_tensors="pt", padding=True,
                  add_special_tokens=False)
        out = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False,
                             eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
        new = out[:, enc["input_ids"].shape[1]:]                                   # [B, new]
        replies += tok.batch_decode(new, skip_special_tokens=True)
    return replies


def evaluate(model_dir: str | Path, n: int = 300, families: tuple[str, ...] = FAMILIES, seed: int = 0,
             batch_size: int = 32) -> dict:
    """Per-family accuracy on the first `n` test examples; also returns a few sample replies."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir)).eval()
    result = {}
    for family in families:
        start = time.perf_counter()
        examples = generate(family, "test", n, seed)
        replies = greedy_replies(model, tok, [e["question"] for e in examples], batch_size)
        verdicts = checks.score(family, examples, replies)
        result[family] = {"accuracy": sum(verdicts) / max(1, len(verdicts)), "n": len(verdicts),
                          "seconds": round(time.perf_counter() - start, 1),
                          "samples": [{"question": e["question"], "reply": r, "correct": v}
                                      for e, r, v in list(zip(examples, replies, verdicts, strict=True))[:3]]}
    return result


@command("tiny-eval", "greedy accuracy of a tiny target per tiny task (transformers)")
def main(argv: list[str] | None = None) -> int:
    p = parser("tiny-eval")
    p.add_argument("model_dir", help="folder with the target weights and tokenizer")
    p.add_argument("--n", type=int, default=300, help="test examples per family")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", help="also write the result (with sample replies) to this file")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    result = evaluate(args.model_dir, args.n)
    print(f"{'family':<16}{'accuracy':>9}{'n':>6}{'s':>8}")
    for family, r in result.items():
        print(f"{family:<16}{r['accuracy']:>9.3f}{r['n']:>6}{r['seconds']:>8}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
