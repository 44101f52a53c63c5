"""tiny-math: the tiny world's expressions (acceptmoe.evals.generators), graded exactly like MATH500
(math_verify against the LaTeX answer)."""
from __future__ import annotations

from acceptmoe.evals.tasks import Grade, Task, math500, tiny_common

NAME = "tiny-math"
VERSION = tiny_common.VERSION
SPLITS = tiny_common.SPLITS


def load(split: str = "test", limit: int | None = None) -> list[dict]:
    return tiny_common.load_examples(NAME, split, limit)


messages = tiny_common.messages


def extract(example: dict, response: str) -> str:
    return math500.extract(example, response)


def score(example: dict, response: str) -> Grade:
    return math500.score_against(example["answer"], response)


TASK = Task.of_module(__name__)
