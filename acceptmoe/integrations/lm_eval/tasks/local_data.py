"""The shipped, checksummed data of the project's offline lm-eval tasks (the YAMLs beside this file name
these functions as `custom_dataset: !function local_data.<task>`). Read through the project's task loaders
(`acceptmoe.evals.tasks`), which verify each file's sha256 (data/SOURCES.md), so no dataset hub is needed.
"""
from __future__ import annotations

import datasets

from acceptmoe.evals.tasks import get_task


def _splits(task: str, fields: dict[str, str]) -> datasets.DatasetDict:
    """The task's train and test splits as lm-eval reads them: `fields` maps lm-eval's column to ours."""
    loader = get_task(task)
    return datasets.DatasetDict({
        split: datasets.Dataset.from_list([{col: ex[ours] for col, ours in fields.items()} for ex in loader.load(split)])
        for split in ("train", "test")})


def gsm8k(**_) -> datasets.DatasetDict:
    """GSM8K (data/gsm8k): question and the full worked answer ending in `#### n`, as openai/gsm8k's `main`."""
    return _splits("gsm8k", {"question": "question", "answer": "answer"})


def tiny_gsm(**_) -> datasets.DatasetDict:
    """The tiny world's word problems (models/tiny/data), answers in GSM8K's `#### n` form."""
    return _splits("tiny-gsm", {"question": "question", "answer": "reference"})
