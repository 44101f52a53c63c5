"""HumanEval (164 problems) graded as EvalPlus grades HumanEval and HumanEval+ (v0.1.10, the shipped file).

Prompt (our choice, for instruct models): the function signature and docstring in a Python block, with a
request to return the complete function in one fenced block. Code (reading "evalplus", the default,
`codecheck.evalplus_code`): a whole function or a chat reply through evalplus's sanitiser (its longest
syntactically valid span of lines, then the imports, the entry point and what it reaches), as evalplus's
codegen reads a chat model's reply; a body-only completion (a reply whose sanitised code defines no entry
point) after the prompt, as EvalPlus reads a base model's completion (`prompt + completion`). Reading
"first-block" (a deviation, `acceptmoe.evals.rules`): the first fenced Python block that defines the
entry point (else the first Python block, else the whole response, which then counts as a plain
completion of the body), placed after the prompt (its imports and helpers): the body directly, a full
definition after a newline; then the sanitiser. Grading (acceptmoe.evals.codecheck): the entry point is called on HumanEval+'s `base_input`
(the original HumanEval tests' inputs) and `plus_input` in the sandbox, and its return values are
compared here with the canonical solution's. Grade.correct is base pass@1 (HumanEval); details["plus"]
is HumanEval+ (base and plus inputs both pass).
"""
from __future__ import annotations

from acceptmoe.evals.codecheck import CodeProblem, evalplus_code, sanitize
from acceptmoe.evals.data import read_records, take
from acceptmoe.evals.extract import defines, extract_code
from acceptmoe.evals.tasks import Grade, Task, check_split, grade_code, user_message

NAME = "humaneval"
VERSION = "3"
SPLITS = ("test",)
TEST_SETS = ("base", "plus")
INSTRUCTION = ("Complete the following Python function. Reply with the complete function, including its "
               "signature and any imports it needs, in a single ```python code block.")


def load(split: str = "test", limit: int | None = None) -> list[dict]:
    check_split(NAME, split, SPLITS)
    return take([{"id": r["task_id"], **r} for r in read_records("humaneval-plus")], limit)


def messages(example: dict) -> list[dict]:
    return user_message(f"{INSTRUCTION}\n\n```python\n{example['prompt']}```")


def completion_code(prompt: str, code: str, entry_point: str) -> str:
    """The prompt followed by a body (a plain completion) or, after a newline, a full definition."""
    return prompt + "\n" + code if defines(code, entry_point) else prompt + code


def extract(example: dict, response: str, reading: str = "evalplus") -> str:
    ep = example["entry_point"]
    if reading == "evalplus":
        return evalplus_code(response, ep, example["prompt"])
    return sanitize(completion_code(example["prompt"], extract_code(response, ep), ep), ep)


def problem(example: dict) -> CodeProblem:
    return CodeProblem(task_id=example["id"], entry_point=example["entry_point"],
                       canonical=example["prompt"] + example["canonical_solution"],
                       test_sets=(("base", example["base_input"]), ("plus", example["plus_input"])),
                       dataset="humaneval", atol=float(example["atol"]))


def score(example: dict, response: str) -> Grade:
    return grade_code(NAME, problem, [example], [response])[0]


TASK = Task.of_module(__name__)
