"""Self-contained answer checks for the tiny tasks (the project's full scorers live in acceptmoe.evals).

gsm: the last `#### N` equals the answer; math: math_verify on the reply's boxed answer; code: the
program passes in the project's sandbox (acceptmoe.evals.sandbox), like every program a model writes.
"""
from __future__ import annotations

import re

from acceptmoe.evals import sandbox

GSM_RE = re.compile(r"####\s*(-?[0-9][0-9,]*(?:\.[0-9]+)?)")


def gsm_extract(reply: str) -> str | None:
    """The number after the last `#### ` (commas dropped), or None."""
    found = GSM_RE.findall(reply)
    return found[-1].replace(",", "") if found else None


def gsm_correct(reply: str, answer: str) -> bool:
    got = gsm_extract(reply)
    return got is not None and float(got) == float(answer)


def math_correct(reply: str, answer: str) -> bool:
    """math_verify's verdict on the reply against the gold LaTeX answer."""
    try:
        from math_verify import parse, verify
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise RuntimeError("math_verify is missing: run `.venv/bin/pip install math-verify==0.9.0`") from exc
    return bool(verify(parse(f"${answer}$"), parse(reply)))


def humaneval_program(example: dict, reply: str) -> str:
    return example["prompt"] + reply + "\n" + example["test"] + f"\ncheck({example['entry_point']})\n"


def mbpp_program(example: dict, reply: str) -> str:
    return example["test_setup_code"] + "\n" + reply + "\n" + "\n".join(example["test_list"]) + "\n"


def run_program(source: str, timeout_s: float = 10.0) -> bool:
    """True when `source` passes in the sandbox within the timeout."""
    return run_programs([source], timeout_s, workers=1)[0]


def run_programs(sources: list[str], timeout_s: float = 10.0, workers: int = 2) -> list[bool]:
    limits = sandbox.Limits(timeout_s=timeout_s)
    return [r.passed for r in sandbox.run_many(sources, limits, workers)]


def score(family: str, examples: list[dict], replies: list[str]) -> list[bool]:
    """One verdict per (example, reply) pair; code families run their programs in the sandbox."""
    if len(examples) != len(replies):
        raise ValueError(f"{len(examples)} examples but {len(replies)} replies: pass one reply per example")
    pairs = list(zip(examples, replies, strict=True))
    if family == "tiny-gsm":
        return [gsm_correct(r, e["answer"]) for e, r in pairs]
    if family == "tiny-math":
        return [math_correct(r, e["answer"]) for e, r in pairs]
    if family == "tiny-humaneval":
        return run_programs([humaneval_program(e, r) for e, r in pairs])
    if family == "tiny-mbpp":
        return run_programs([mbpp_program(e, r) for e, r in pairs])
    raise ValueError(f"unknown tiny task family {family!r}; valid: tiny-gsm, tiny-math, tiny-humaneval, tiny-mbpp")
