"""MATH500 (500 problems, the PRM800K test split of MATH): answers graded with math_verify.

Prompt (our choice, the form Qwen and DeepSeek instruct models are evaluated with): the problem followed
by "Please reason step by step, and put your final answer within \\boxed{}." The response is parsed with
math_verify's default extraction and compared with `verify(parse(\\boxed{gold}), parse(response))`. A
gold answer that does not parse within the time limit fails that sample (details["gold_error"]).
"""
from __future__ import annotations

from acceptmoe.evals.data import read_records, take
from acceptmoe.evals.mathcheck import math_check, parse_answer
from acceptmoe.evals.tasks import Grade, Task, check_split, user_message

NAME = "math500"
VERSION = "1"
SPLITS = ("test",)
INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."


def load(split: str = "test", limit: int | None = None) -> list[dict]:
    check_split(NAME, split, SPLITS)
    return take([{"id": r["unique_id"], **r} for r in read_records("math500")], limit)


def messages(example: dict) -> list[dict]:
    return user_message(f"{example['problem']}\n\n{INSTRUCTION}")


def extract(example: dict, response: str) -> str:
    parsed = parse_answer(response)
    return str(parsed[-1]) if parsed else ""


def score_against(gold_answer: str, response: str) -> Grade:
    verdict = math_check(gold_answer, response)
    details = {"target": gold_answer}
    if verdict.gold_error:
        details["gold_error"] = verdict.gold_error
    return Grade(correct=verdict.correct, extracted=verdict.extracted, details=details)


def score(example: dict, response: str) -> Grade:
    return score_against(example["answer"], response)


TASK = Task.of_module(__name__)
