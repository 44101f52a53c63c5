"""MBPP, full version (974 problems): pass@1 by running the problem's three asserts.

Splits as in lm-evaluation-harness and Hugging Face: test = task ids 11-510 (500, the evaluation set),
validation 511-600, train 601-974, prompt 1-10. Prompt (our choice, lm-eval's wording without few-shot
examples, for chat models): the task text and the three asserts, asking for the function in a fenced
block. The code is the first fenced Python block that defines the function the tests call (else the
first Python block, else the whole response). Program: the code, test_setup_code, the asserts.
"""
from __future__ import annotations

import re

from acceptmoe.evals.data import read_records, take
from acceptmoe.evals.extract import extract_code
from acceptmoe.evals.sandbox import run_program
from acceptmoe.evals.tasks import Score, check_split, code_score, user_message

NAME = "mbpp"
VERSION = "1"
SPLIT_IDS = {"test": (11, 510), "validation": (511, 600), "train": (601, 974), "prompt": (1, 10)}
SPLITS = tuple(SPLIT_IDS)


def entry_point(code: str, tests: list[str]) -> str | None:
    """The function of the reference code that the tests call (None if no definition appears in them)."""
    for name in re.findall(r"^def\s+([A-Za-z_]\w*)\s*\(", code, re.M):
        if any(re.search(rf"\b{re.escape(name)}\s*\(", t) for t in tests):
            return name
    return None


def load(split: str = "test", limit: int | None = None) -> list[dict]:
    check_split(NAME, split, SPLITS)
    lo, hi = SPLIT_IDS[split]
    records = [r for r in read_records("mbpp") if lo <= r["task_id"] <= hi]
    return take([{"id": f"mbpp/{r['task_id']}", "entry_point": entry_point(r["code"], r["test_list"]), **r}
                 for r in records], limit)


def messages(example: dict) -> list[dict]:
    tests = "\n".join(example["test_list"])
    return user_message(f"You are an expert Python programmer, and here is your task: {example['text']} "
                        f"Your code should pass these tests:\n\n{tests}\n\n"
                        "Reply with the complete function in a single ```python code block.")


def extract(example: dict, response: str) -> str:
    return extract_code(response, example.get("entry_point"))


def mbpp_program(setup: str, code: str, tests: list[str]) -> str:
    """The code, then test_setup_code (it builds inputs with the code's classes, e.g. task 367), then
    the asserts."""
    return f"{code}\n\n{setup}\n" + "\n".join(tests) + "\n"


def program(example: dict, response: str) -> str:
    return mbpp_program(example["test_setup_code"], extract(example, response), example["test_list"])


def score(example: dict, response: str) -> Score:
    return code_score(extract(example, response), run_program(program(example, response)))
