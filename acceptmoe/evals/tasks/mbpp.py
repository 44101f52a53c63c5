"""MBPP graded as EvalPlus grades MBPP and MBPP+ (v0.2.0, the shipped file).

Splits: test = the 378 problems of MBPP+ (ids Mbpp/2 ... Mbpp/809), with EvalPlus's task statement and
example assert (from its prompt) and its test inputs; validation (511-600), train (601-974) and prompt
(1-10) = the original MBPP problems in those id ranges that are not MBPP+ problems, so no evaluation
problem is ever a calibration prompt.
Prompt (our choice, lm-eval's wording without few-shot examples, for chat models): the task text and its
asserts, asking for the function in a fenced block. Code (reading "evalplus", the default,
`codecheck.evalplus_code`): the whole reply through evalplus's sanitiser, as evalplus's codegen reads a
chat reply, or, where that defines no function, after the test split's prompt, as EvalPlus reads a base
model's completion (`prompt + completion`); reading "first-block" (a deviation,
`acceptmoe.evals.rules`): the first fenced Python block that defines the function (else the first Python
block, else the whole response), sanitised by evalplus.
Grading (acceptmoe.evals.codecheck): test-split problems call the function on MBPP+'s `base_input` (the
original MBPP tests' inputs) and `plus_input` in the sandbox and compare the return values here with the
canonical solution's by EvalPlus's MBPP rules. Grade.correct is base pass@1 (MBPP); details["plus"] is
MBPP+ (base and plus inputs both pass). Problems of the other splits have one base set: the literal
arguments of their asserts, compared with the original reference code's outputs (3 of those 320
problems call the function on objects built in the assert; grading them raises ValueError).
"""
from __future__ import annotations

import re

from acceptmoe.evals.codecheck import CodeProblem, assert_inputs, evalplus_code, mbpp_plus_inputs, sanitize
from acceptmoe.evals.data import read_records, take
from acceptmoe.evals.extract import extract_code
from acceptmoe.evals.tasks import Grade, Task, check_split, grade_code, user_message

NAME = "mbpp"
VERSION = "3"
SPLIT_IDS = {"validation": (511, 600), "train": (601, 974), "prompt": (1, 10)}
SPLITS = ("test", *SPLIT_IDS)
TEST_SETS = ("base", "plus")  # test split; the other splits have "base" only


def entry_point(code: str, tests: list[str]) -> str | None:
    """The function of the reference code that the tests call (None if no definition appears in them)."""
    for name in re.findall(r"^def\s+([A-Za-z_]\w*)\s*\(", code, re.M):
        if any(re.search(rf"\b{re.escape(name)}\s*\(", t) for t in tests):
            return name
    return None


def plus_ids() -> set[int]:
    return {int(r["task_id"].split("/")[1]) for r in read_records("mbpp-plus")}


def _plus_example(record: dict) -> dict:
    lines = record["prompt"].strip().strip('"').strip().splitlines()
    tests = [line for line in lines if line.startswith("assert")]
    text = " ".join(line for line in lines if not line.startswith("assert"))
    return {"id": record["task_id"], "text": text, "test_list": tests, **record}


def load(split: str = "test", limit: int | None = None) -> list[dict]:
    check_split(NAME, split, SPLITS)
    if split == "test":
        return take([_plus_example(r) for r in read_records("mbpp-plus")], limit)
    lo, hi = SPLIT_IDS[split]
    excluded = plus_ids()
    records = [r for r in read_records("mbpp") if lo <= r["task_id"] <= hi and r["task_id"] not in excluded]
    return take([{"id": f"mbpp/{r['task_id']}", "entry_point": entry_point(r["code"], r["test_list"]), **r}
                 for r in records], limit)


def messages(example: dict) -> list[dict]:
    tests = "\n".join(example["test_list"])
    return user_message(f"You are an expert Python programmer, and here is your task: {example['text']} "
                        f"Your code should pass these tests:\n\n{tests}\n\n"
                        "Reply with the complete function in a single ```python code block.")


def extract(example: dict, response: str, reading: str = "evalplus") -> str:
    ep = example["entry_point"]
    if reading == "evalplus":
        return evalplus_code(response, ep, example.get("prompt", ""))
    return sanitize(extract_code(response, ep), ep)


def problem(example: dict) -> CodeProblem:
    if "base_input" in example:
        tid = example["task_id"]
        return CodeProblem(task_id=tid, entry_point=example["entry_point"],
                           canonical=example["prompt"] + example["canonical_solution"],
                           test_sets=(("base", mbpp_plus_inputs(tid, example["base_input"])),
                                      ("plus", mbpp_plus_inputs(tid, example["plus_input"]))),
                           dataset="mbpp", atol=float(example["atol"]))
    canonical = f"{example['code']}\n"
    return CodeProblem(task_id=example["id"], entry_point=example["entry_point"], canonical=canonical,
                       test_sets=(("base", assert_inputs(example["test_list"], example["entry_point"])),))


def score(example: dict, response: str) -> Grade:
    return grade_code(NAME, problem, [example], [response])[0]


TASK = Task.of_module(__name__)
