"""HumanEval (164 problems): pass@1 by running the problem's tests on the completed function.

Prompt (our choice, for instruct models): the function signature and docstring in a Python block, with a
request to return the complete function in one fenced block. The code is the first fenced Python block
that defines the entry point (else the first Python block, else the whole response, which then counts
as a plain completion of the body). Program: the original prompt (its imports and helpers), then either
the body (a completion) or, after a newline, the model's full definition that replaces the docstring-only
stub; then the test code and `check(entry_point)`.
"""
from __future__ import annotations

from acceptmoe.evals.data import read_records, take
from acceptmoe.evals.extract import defines, extract_code
from acceptmoe.evals.sandbox import run_program
from acceptmoe.evals.tasks import Score, check_split, code_score, user_message

NAME = "humaneval"
VERSION = "1"
SPLITS = ("test",)
INSTRUCTION = ("Complete the following Python function. Reply with the complete function, including its "
               "signature and any imports it needs, in a single ```python code block.")


def load(split: str = "test", limit: int | None = None) -> list[dict]:
    check_split(NAME, split, SPLITS)
    return take([{"id": r["task_id"], **r} for r in read_records("humaneval")], limit)


def messages(example: dict) -> list[dict]:
    return user_message(f"{INSTRUCTION}\n\n```python\n{example['prompt']}```")


def extract(example: dict, response: str) -> str:
    return extract_code(response, example["entry_point"])


def humaneval_program(prompt: str, code: str, test: str, entry_point: str) -> str:
    """prompt + code (a body) or prompt + newline + code (a full definition), then tests and check()."""
    solution = prompt + "\n" + code if defines(code, entry_point) else prompt + code
    return f"{solution}\n\n{test}\n\ncheck({entry_point})\n"


def program(example: dict, response: str) -> str:
    return humaneval_program(example["prompt"], extract(example, response), example["test"],
                             example["entry_point"])


def score(example: dict, response: str) -> Score:
    return code_score(extract(example, response), run_program(program(example, response)))
