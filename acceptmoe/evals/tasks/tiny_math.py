"""tiny-math: the tiny world's expressions (acceptmoe.tiny.tasks), graded exactly like MATH500
(math_verify against the LaTeX answer)."""
from __future__ import annotations

from acceptmoe.evals.tasks import Score, check_split, math500, user_message
from acceptmoe.tiny import tasks as tiny

NAME = "tiny-math"
VERSION = f"1+tiny{tiny.TASKS_VERSION}"
SPLITS = ("test", "train")
SEED = 0


def load(split: str = "test", limit: int | None = None) -> list[dict]:
    check_split(NAME, split, SPLITS)
    return tiny.generate(NAME, split, n=limit, seed=SEED)


def messages(example: dict) -> list[dict]:
    return user_message(example["question"])


def extract(example: dict, response: str) -> str:
    return math500.extract(example, response)


def score(example: dict, response: str) -> Score:
    return math500.score_against(example["answer"], response)
