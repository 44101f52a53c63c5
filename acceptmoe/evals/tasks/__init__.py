"""Task registry. A task is one module in this package with pure functions:

    NAME, VERSION, SPLITS                      constants (VERSION is recorded with every result)
    load(split="test", limit=None) -> list[dict]   examples, each with a unique "id"
    messages(example) -> list[{"role", "content"}]  the chat prompt (the model's chat template is applied later)
    extract(example, response) -> str          the answer (text tasks) or sanitised code (code tasks) that is graded
    score(example, response) -> Grade          one graded response
    problem(example) -> CodeProblem            code tasks only: entry point, reference solution, test inputs
    TEST_SETS                                  code tasks only: the verdicts a graded test-split row holds

`Task.score_many` grades a batch; code tasks go through `acceptmoe.evals.codecheck` (EvalPlus's rules,
the candidate run in the sandbox, its return values compared in this process). A code Grade's `correct`
is the "base" verdict; `details` holds "base" and, where the task has EvalPlus's extra inputs, "plus"
(base and plus inputs both pass), each with its sandbox status and the first failure. `Task.test_sets`
names those verdicts for tables: a sample row's `score_details[name]` is the pass/fail of column `name`.
Raw GPT-OSS outputs are graded with `response_format="harmony"` (final channel only).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from types import ModuleType
from typing import Callable

from acceptmoe.evals.codecheck import CANDIDATE_LIMITS, CodeProblem, CodeVerdict, grade_many
from acceptmoe.evals.extract import response_text
from acceptmoe.evals.sandbox import Limits

TASK_MODULES = {
    "gsm8k": "gsm8k",
    "math500": "math500",
    "humaneval": "humaneval",
    "mbpp": "mbpp",
    "tiny-gsm": "tiny_gsm",
    "tiny-math": "tiny_math",
    "tiny-humaneval": "tiny_humaneval",
    "tiny-mbpp": "tiny_mbpp",
}


@dataclass(frozen=True)
class Grade:
    """One graded response: correct or not, what was graded, and task-specific details (JSON-ready)."""

    correct: bool
    extracted: str
    details: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Task:
    name: str
    version: str
    splits: tuple[str, ...]
    load: Callable[..., list[dict]]
    messages: Callable[[dict], list[dict]]
    extract: Callable[[dict, str], str]
    score: Callable[[dict, str], Grade]
    problem: Callable[[dict], CodeProblem] | None = None
    test_sets: tuple[str, ...] = ()  # code tasks: ("base",) or ("base", "plus"); "base" is also `correct`

    @property
    def executes_code(self) -> bool:
        return self.problem is not None

    def score_many(self, examples: list[dict], responses: list[str], response_format: str = "plain",
                   workers: int = 2, limits: Limits = CANDIDATE_LIMITS) -> list[Grade]:
        """Grade responses[i] against examples[i]; code runs `workers` sandboxed programs at a time."""
        if len(examples) != len(responses):
            raise ValueError(f"{len(examples)} examples but {len(responses)} responses")
        texts = [response_text(r, response_format) for r in responses]
        if self.problem is None:
            return [self.score(ex, text) for ex, text in zip(examples, texts)]
        return grade_code(self.problem, self.extract, examples, texts, workers, limits)


def grade_code(problem: Callable[[dict], CodeProblem], extract: Callable[[dict, str], str], examples: list[dict],
               responses: list[str], workers: int = 2, limits: Limits = CANDIDATE_LIMITS) -> list[Grade]:
    """Scores of code responses (plain text, already out of any Harmony wrapper)."""
    verdicts = grade_many([problem(ex) for ex in examples], [extract(ex, r) for ex, r in zip(examples, responses)],
                          workers, limits)
    return [code_grade(v) for v in verdicts]


def code_grade(verdict: CodeVerdict) -> Grade:
    """A code verdict as a Grade: `correct` is the base verdict; details hold every test set's verdict."""
    return Grade(correct=verdict.passed("base"), extracted=verdict.code, details=verdict.details())


def _from_module(module: ModuleType) -> Task:
    return Task(name=module.NAME, version=module.VERSION, splits=tuple(module.SPLITS), load=module.load,
                messages=module.messages, extract=module.extract, score=module.score,
                problem=getattr(module, "problem", None), test_sets=tuple(getattr(module, "TEST_SETS", ())))


def get_task(name: str) -> Task:
    """The task registered as `name`; an unknown name is an error listing the valid ones."""
    if name not in TASK_MODULES:
        raise KeyError(f"unknown task {name!r}; valid tasks: {', '.join(TASK_MODULES)}")
    task = _from_module(importlib.import_module(f"{__name__}.{TASK_MODULES[name]}"))
    if task.name != name:
        raise RuntimeError(f"task module {TASK_MODULES[name]} declares NAME={task.name!r}, registered as {name!r}")
    return task


def user_message(content: str) -> list[dict]:
    """A one-turn chat prompt."""
    return [{"role": "user", "content": content}]


def check_split(name: str, split: str, splits: tuple[str, ...]) -> None:
    if split not in splits:
        raise ValueError(f"task {name} has no split {split!r}; valid splits: {', '.join(splits)}")
