"""tiny-gsm: the tiny world's word problems (acceptmoe.evals.generators), graded exactly like GSM8K
(flexible-extract exact match against the integer answer; strict-match recorded)."""
from __future__ import annotations

from acceptmoe.evals.tasks import Grade, Task, gsm8k, tiny_common

NAME = "tiny-gsm"
VERSION = tiny_common.VERSION
SPLITS = tiny_common.SPLITS


def load(split: str = "test", limit: int | None = None) -> list[dict]:
    return tiny_common.load_examples(NAME, split, limit)


messages = tiny_common.messages


def extract(example: dict, response: str) -> str:
    return gsm8k.flexible_extract(response)


def score(example: dict, response: str) -> Grade:
    return gsm8k.score_against(example["answer"], response)


TASK = Task.of_module(__name__)
