"""tiny-humaneval: the tiny world's function completions (acceptmoe.evals.generators), graded like
HumanEval base: the question is the signature and docstring, the reply the indented body; prompt + body
is sanitised, called in the sandbox on the inputs of the hidden asserts in `test`, and its return values
are compared here with those of prompt + reference (acceptmoe.evals.codecheck)."""
from __future__ import annotations

from acceptmoe.evals.codecheck import CodeProblem, assert_inputs, sanitize
from acceptmoe.evals.extract import extract_code
from acceptmoe.evals.tasks import Grade, Task, grade_code, tiny_common
from acceptmoe.evals.tasks.humaneval import completion_code

NAME = "tiny-humaneval"
VERSION = tiny_common.version(2)
SPLITS = tiny_common.SPLITS
TEST_SETS = ("base",)


def load(split: str = "test", limit: int | None = None) -> list[dict]:
    return tiny_common.load_examples(NAME, split, limit)


messages = tiny_common.messages


def extract(example: dict, response: str, reading: str = "evalplus") -> str:
    """The code of a reply; both readings are the same here (the tiny model writes plain code, not chat)."""
    ep = example["entry_point"]
    return sanitize(completion_code(example["prompt"], extract_code(response, ep), ep), ep)


def problem(example: dict) -> CodeProblem:
    asserts = [line for line in example["test"].splitlines() if line.strip().startswith("assert")]
    return CodeProblem(task_id=example["id"], entry_point=example["entry_point"],
                       canonical=example["prompt"] + example["reference"] + "\n",
                       test_sets=(("base", assert_inputs(asserts, example["entry_point"])),))


def score(example: dict, response: str) -> Grade:
    return grade_code(NAME, problem, [example], [response])[0]


TASK = Task.of_module(__name__)
