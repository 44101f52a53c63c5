"""Task registry. A task is one module in this package with pure functions:

    NAME, VERSION, SPLITS                      constants (VERSION is recorded with every result)
    load(split="test", limit=None) -> list[dict]   examples, each with a unique "id"
    messages(example) -> list[{"role", "content"}]  the chat prompt (the model's chat template is applied later)
    extract(example, response) -> str          the answer (text tasks) or code (code tasks) that is graded
    score(example, response) -> Score          one graded response
    program(example, response) -> str          code tasks only: the full program run in the sandbox

`Task.score_many` grades a batch; for code tasks it runs the programs in the sandbox's worker pool.
Raw GPT-OSS outputs are graded with `response_format="harmony"` (final channel only).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from types import ModuleType
from typing import Callable

from acceptmoe.evals.extract import response_text
from acceptmoe.evals.sandbox import Limits, run_many

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
class Score:
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
    score: Callable[[dict, str], Score]
    program: Callable[[dict, str], str] | None = None

    @property
    def executes_code(self) -> bool:
        return self.program is not None

    def score_many(self, examples: list[dict], responses: list[str], response_format: str = "plain",
                   workers: int = 2, limits: Limits = Limits()) -> list[Score]:
        """Grade responses[i] against examples[i]; code runs `workers` sandboxed programs at a time."""
        if len(examples) != len(responses):
            raise ValueError(f"{len(examples)} examples but {len(responses)} responses")
        texts = [response_text(r, response_format) for r in responses]
        if self.program is None:
            return [self.score(ex, text) for ex, text in zip(examples, texts)]
        results = run_many([self.program(ex, t) for ex, t in zip(examples, texts)], limits, workers)
        return [code_score(self.extract(ex, t), res) for ex, t, res in zip(examples, texts, results)]


def code_score(code: str, result) -> Score:
    """Score of a sandboxed program run (a `sandbox.ExecResult`)."""
    return Score(correct=result.passed, extracted=code,
                 details={"status": result.status, "duration_s": round(result.duration_s, 4),
                          "stderr": result.stderr})


def _from_module(module: ModuleType) -> Task:
    return Task(name=module.NAME, version=module.VERSION, splits=tuple(module.SPLITS), load=module.load,
                messages=module.messages, extract=module.extract, score=module.score,
                program=getattr(module, "program", None))


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
