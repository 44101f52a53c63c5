"""Task registry (`TASKS`, a `acceptmoe.registry.Registry`). A task is one module in this package with pure
functions, ending in `TASK = Task.of_module(__name__)`:

    NAME, VERSION, SPLITS                      constants (VERSION is recorded with every result)
    load(split="test", limit=None) -> list[dict]   examples, each with a unique "id"
    messages(example) -> list[{"role", "content"}]  the chat prompt (the model's chat template is applied later)
    extract(example, response) -> str          the answer (text tasks) or sanitised code (code tasks: also
                                               reading=, see acceptmoe.evals.rules) that is graded
    score(example, response) -> Grade          one graded response
    problem(example) -> CodeProblem            code tasks only: entry point, reference solution, test inputs
    TEST_SETS                                  code tasks only: the verdicts a graded test-split row holds

`Task.score_many` grades a batch; code tasks go through `acceptmoe.evals.codecheck` under
`acceptmoe.evals.rules.CodeRules` (EvalPlus's rules by default, the candidate run in the sandbox, its
return values compared in this process). Each code reply is read (final channel, code, evalplus's
sanitiser) by `read_reply` in a limited worker process (`acceptmoe.evals.contained`); a reply that cannot
be read in time fails with that reason. A code Grade's `correct` is the "base" verdict; `details` holds
"base" and, where the task has EvalPlus's extra inputs, "plus" (base and plus inputs both pass), each
with its sandbox status and the first failure, and "rules" (`CodeRules.record()`). `Task.test_sets` names
those verdicts for tables: a sample row's `score_details[name]` is the pass/fail of column `name`. An
error while scoring one reply of a text task is that reply's failure ("error" in details), never the
batch's. Raw GPT-OSS outputs are graded with `response_format="harmony"` (final channel only).
"""
from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from acceptmoe.errors import UserError
from acceptmoe.evals import contained
from acceptmoe.evals.codecheck import CodeProblem, CodeVerdict, grade_many
from acceptmoe.evals.extract import response_text
from acceptmoe.evals.rules import DEFAULT, CodeRules
from acceptmoe.registry import Registry


def _declares_its_name(name: str, task: Task) -> None:
    if task.name != name:
        raise RuntimeError(f"task {task.name!r} is registered as {name!r}")


# task name -> Task, each module imported on first lookup (its `TASK = Task.of_module(__name__)` line)
TASKS: Registry[Task] = Registry("task", check=_declares_its_name)
for _name in ("gsm8k", "math500", "humaneval", "mbpp", "tiny-gsm", "tiny-math", "tiny-humaneval", "tiny-mbpp"):
    TASKS.lazy(_name, f"{__name__}.{_name.replace('-', '_')}:TASK")


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

    @classmethod
    def of_module(cls, module: str) -> Task:
        """The task a task module defines by its constants and functions (the module's last line)."""
        m = sys.modules[module]
        return cls(name=m.NAME, version=m.VERSION, splits=tuple(m.SPLITS), load=m.load, messages=m.messages,
                   extract=m.extract, score=m.score, problem=getattr(m, "problem", None),
                   test_sets=tuple(getattr(m, "TEST_SETS", ())))

    @property
    def executes_code(self) -> bool:
        return self.problem is not None

    def score_many(self, examples: list[dict], responses: list[str], response_format: str = "plain",
                   workers: int = 2, rules: CodeRules = DEFAULT) -> list[Grade]:
        """Grade responses[i] against examples[i]; code runs `workers` sandboxed programs at a time."""
        if len(examples) != len(responses):
            raise ValueError(f"{len(examples)} examples but {len(responses)} responses")
        if self.problem is None:
            return [_scored(self.score, ex, response_text(r, response_format))
                    for ex, r in zip(examples, responses, strict=True)]
        return grade_code(self.name, self.problem, examples, responses, response_format, workers, rules)


def _scored(score: Callable[[dict, str], Grade], example: dict, text: str) -> Grade:
    try:
        return score(example, text)
    except UserError:         # a grader missing or mispinned: this machine's problem, never a reply's verdict
        raise
    except Exception as exc:  # this reply's failure, never the batch's
        return Grade(False, "", {"error": f"scoring raised {type(exc).__name__}: {str(exc)[:300]}"})


def read_reply(task: str, example: dict, raw: str, response_format: str, reading: str) -> str:
    """The code a raw reply is graded by (run in `contained`'s worker: its cost is the text's to set)."""
    return get_task(task).extract(example, response_text(raw, response_format), reading=reading)


# task name -> the YAML it was declared in (`from_file.register_file` fills it): a worker registers it again
TASK_FILES: dict[str, str] = {}


def _slim(example: dict) -> dict:
    """The fields of an example that reading a reply may use (the test inputs stay here)."""
    return {k: v for k, v in example.items() if v is None or isinstance(v, (str, int, float, bool))}


def grade_code(task: str, problem: Callable[[dict], CodeProblem], examples: list[dict], responses: list[str],
               response_format: str = "plain", workers: int = 2, rules: CodeRules = DEFAULT) -> list[Grade]:
    """Scores of raw code responses to the registered task `task`."""
    problems = [problem(ex) for ex in examples]
    source = TASK_FILES.get(task)                 # a task from a file: the worker reads it first
    reader, first = (f"{__name__}.from_file:read_file_reply", [source]) if source else (f"{__name__}:read_reply", [])
    read = contained.call_each(reader, [[*first, task, _slim(ex), r, response_format, rules.reading]
                                        for ex, r in zip(examples, responses, strict=True)],
                               contained.Limits(call_s=rules.sanitize_s))
    ok = [i for i, out in enumerate(read) if out.ok and isinstance(out.value, str)]
    graded = dict(zip(ok, grade_many([problems[i] for i in ok], [read[i].value for i in ok], workers, rules),
                      strict=True))
    verdicts = [graded.get(i) or CodeVerdict.failed([n for n, _ in problems[i].test_sets], "",
                                                    f"reading the reply failed: {read[i].error or 'not text'}")
                for i in range(len(examples))]
    return [code_grade(v, rules) for v in verdicts]


def code_grade(verdict: CodeVerdict, rules: CodeRules = DEFAULT) -> Grade:
    """A code verdict as a Grade: `correct` is the base verdict; details hold every test set's verdict and
    the rules it was graded by."""
    return Grade(correct=verdict.passed("base"), extracted=verdict.code,
                 details={**verdict.details(), "rules": rules.record()})


def get_task(name: str) -> Task:
    """The task registered as `name`; an unknown name is an error naming the closest and the valid ones."""
    return TASKS[name]


def user_message(content: str) -> list[dict]:
    """A one-turn chat prompt."""
    return [{"role": "user", "content": content}]


def check_split(name: str, split: str, splits: tuple[str, ...]) -> None:
    if split not in splits:
        raise ValueError(f"task {name} has no split {split!r}; valid splits: {', '.join(splits)}")
