"""tiny-mbpp: the tiny world's task-text-plus-asserts problems (acceptmoe.evals.generators), graded exactly
like MBPP: the reply is a whole function (plain code); the program is the code, test_setup_code and the
asserts, run in the sandbox."""
from __future__ import annotations

from acceptmoe.evals.extract import extract_code
from acceptmoe.evals.sandbox import run_program
from acceptmoe.evals.tasks import Score, code_score, tiny_common
from acceptmoe.evals.tasks.mbpp import entry_point, mbpp_program

NAME = "tiny-mbpp"
VERSION = tiny_common.VERSION
SPLITS = tiny_common.SPLITS


def load(split: str = "test", limit: int | None = None) -> list[dict]:
    return [{"entry_point": entry_point(ex["reference"], ex["test_list"]), **ex}
            for ex in tiny_common.load_examples(NAME, split, limit)]


messages = tiny_common.messages


def extract(example: dict, response: str) -> str:
    return extract_code(response, example.get("entry_point"))


def program(example: dict, response: str) -> str:
    return mbpp_program(example["test_setup_code"], extract(example, response), example["test_list"])


def score(example: dict, response: str) -> Score:
    return code_score(extract(example, response), run_program(program(example, response)))
