"""tiny-humaneval: the tiny world's function completions (acceptmoe.tiny.tasks), graded exactly like
HumanEval: the question is the signature and docstring, the reply the indented body; the program is
prompt + body + test + check(entry_point), run in the sandbox."""
from __future__ import annotations

from acceptmoe.evals.extract import extract_code
from acceptmoe.evals.sandbox import run_program
from acceptmoe.evals.tasks import Score, check_split, code_score, user_message
from acceptmoe.evals.tasks.humaneval import humaneval_program
from acceptmoe.tiny import tasks as tiny

NAME = "tiny-humaneval"
VERSION = f"1+tiny{tiny.TASKS_VERSION}"
SPLITS = ("test", "train")
SEED = 0


def load(split: str = "test", limit: int | None = None) -> list[dict]:
    check_split(NAME, split, SPLITS)
    return tiny.generate(NAME, split, n=limit, seed=SEED)


def messages(example: dict) -> list[dict]:
    return user_message(example["question"])


def extract(example: dict, response: str) -> str:
    return extract_code(response, example["entry_point"])


def program(example: dict, response: str) -> str:
    return humaneval_program(example["prompt"], extract(example, response), example["test"],
                             example["entry_point"])


def score(example: dict, response: str) -> Score:
    return code_score(extract(example, response), run_program(program(example, response)))
