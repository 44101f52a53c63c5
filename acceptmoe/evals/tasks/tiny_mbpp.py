"""tiny-mbpp: the tiny world's task-text-plus-asserts problems (acceptmoe.tiny.tasks), graded exactly
like MBPP: the reply is a whole function (plain code); the program is the code, test_setup_code and the
asserts, run in the sandbox."""
from __future__ import annotations

from acceptmoe.evals.extract import extract_code
from acceptmoe.evals.sandbox import run_program
from acceptmoe.evals.tasks import Score, check_split, code_score, user_message
from acceptmoe.evals.tasks.mbpp import entry_point, mbpp_program
from acceptmoe.tiny import tasks as tiny

NAME = "tiny-mbpp"
VERSION = f"1+tiny{tiny.TASKS_VERSION}"
SPLITS = ("test", "train")
SEED = 0


def load(split: str = "test", limit: int | None = None) -> list[dict]:
    check_split(NAME, split, SPLITS)
    return [{"entry_point": entry_point(ex["reference"], ex["test_list"]), **ex}
            for ex in tiny.generate(NAME, split, n=limit, seed=SEED)]


def messages(example: dict) -> list[dict]:
    return user_message(example["question"])


def extract(example: dict, response: str) -> str:
    return extract_code(response, example.get("entry_point"))


def program(example: dict, response: str) -> str:
    return mbpp_program(example["test_setup_code"], extract(example, response), example["test_list"])


def score(example: dict, response: str) -> Score:
    return code_score(extract(example, response), run_program(program(example, response)))
