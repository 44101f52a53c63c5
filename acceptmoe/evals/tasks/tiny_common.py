"""What the four tiny task modules share: splits, seed, version, loading from acceptmoe.evals.generators and the
one-turn chat prompt (the question exactly as the tiny target was trained on it)."""
from __future__ import annotations

from acceptmoe.evals import generators as tiny
from acceptmoe.evals.tasks import check_split, user_message


def version(grading: int) -> str:
    """A tiny task's version: its grading version and the generators' TASKS_VERSION."""
    return f"{grading}+tiny{tiny.TASKS_VERSION}"


VERSION = version(1)
SPLITS = ("test", "train")
SEED = 0


def load_examples(name: str, split: str, limit: int | None) -> list[dict]:
    check_split(name, split, SPLITS)
    return tiny.generate(name, split, n=limit, seed=SEED)


def messages(example: dict) -> list[dict]:
    return user_message(example["question"])
