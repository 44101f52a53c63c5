"""tiny-mbpp: the tiny world's task-text-plus-asserts problems (acceptmoe.evals.generators), graded like
MBPP base: the reply (a whole function, plain code) is sanitised, called in the sandbox on the inputs of
the three asserts, and its return values are compared here with the reference's
(acceptmoe.evals.codecheck)."""
from __future__ import annotations

from acceptmoe.evals.codecheck import CodeProblem, assert_inputs, sanitize
from acceptmoe.evals.extract import extract_code
from acceptmoe.evals.tasks import Grade, Task, grade_code, tiny_common
from acceptmoe.evals.tasks.mbpp import entry_point

NAME = "tiny-mbpp"
VERSION = tiny_common.version(2)
SPLITS = tiny_common.SPLITS
TEST_SETS = ("base",)


def load(split: str = "test", limit: int | None = None) -> list[dict]:
    return [{"entry_point": entry_point(ex["reference"], ex["test_list"]), **ex}
            for ex in tiny_common.load_examples(NAME, split, limit)]


messages = tiny_common.messages


def extract(example: dict, response: str, reading: str = "evalplus") -> str:
    """The code of a reply; both readings are the same here (the tiny model writes plain code, not chat)."""
    return sanitize(extract_code(response, example["entry_point"]), example["entry_point"])


def problem(example: dict) -> CodeProblem:
    return CodeProblem(task_id=example["id"], entry_point=example["entry_point"], canonical=example["reference"] + "\n",
                       test_sets=(("base", assert_inputs(example["test_list"], example["entry_point"])),))


def score(example: dict, response: str) -> Grade:
    return grade_code(NAME, problem, [example], [response])[0]


TASK = Task.of_module(__name__)
