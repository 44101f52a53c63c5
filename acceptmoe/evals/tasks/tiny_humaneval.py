"""tiny-humaneval: the tiny world's function completions (acceptmoe.evals.generators), graded exactly like
HumanEval: the question is the signature and docstring, the reply the indented body; the program is
prompt + body + test + check(entry_point), run in the sandbox."""
from __future__ import annotations

from acceptmoe.evals.extract import extract_code
from acceptmoe.evals.sandbox import run_program
from acceptmoe.evals.tasks import Score, code_score, tiny_common
from acceptmoe.evals.tasks.humaneval import humaneval_program

NAME = "tiny-humaneval"
VERSION = tiny_common.VERSION
SPLITS = tiny_common.SPLITS


def load(split: str = "test", limit: int | None = None) -> list[dict]:
    return tiny_common.load_examples(NAME, split, limit)


messages = tiny_common.messages


def extract(example: dict, response: str) -> str:
    return extract_code(response, example["entry_point"])


def program(example: dict, response: str) -> str:
    return humaneval_program(example["prompt"], extract(example, response), example["test"],
                             example["entry_point"])


def score(example: dict, response: str) -> Score:
    return code_score(extract(example, response), run_program(program(example, response)))
