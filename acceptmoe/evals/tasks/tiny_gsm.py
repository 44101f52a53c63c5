"""tiny-gsm: the tiny world's word problems (acceptmoe.tiny.tasks), graded exactly like GSM8K
(flexible-extract exact match against the integer answer; strict-match recorded)."""
from __future__ import annotations

from acceptmoe.evals.tasks import Score, check_split, gsm8k, user_message
from acceptmoe.tiny import tasks as tiny

NAME = "tiny-gsm"
VERSION = f"1+tiny{tiny.TASKS_VERSION}"
SPLITS = ("test", "train")
SEED = 0


def load(split: str = "test", limit: int | None = None) -> list[dict]:
    check_split(NAME, split, SPLITS)
    return tiny.generate(NAME, split, n=limit, seed=SEED)


def messages(example: dict) -> list[dict]:
    return user_message(example["question"])


def extract(example: dict, response: str) -> str:
    return gsm8k.flexible_extract(response)


def score(example: dict, response: str) -> Score:
    return gsm8k.score_against(example["answer"], response)
