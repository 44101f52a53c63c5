"""A task declared in a YAML file over JSONL data, usable wherever a shipped task is (docs/own-model.md,
"Your own tasks"): `register_file(path)` reads it, checks every data file's sha256 and registers the task
under its `name` in `TASKS`.

    name: my-arith                      # the task's name in presets, rows and tables
    version: "1"
    grader: numeric                     # exact | numeric (GSM8K's) | math_verify (MATH500's) | code
    prompt: "{question}"                # the user turn: a format string over a record's fields
    answer: answer                      # the record field graded against (code: the reference program)
    splits:                             # test is required; train calibrates (else calibration.sources)
      test: {file: arith-test.jsonl, sha256: 3f5c...}
      train: {file: arith-train.jsonl, sha256: 9a1b...}

Files are relative to the YAML's folder. A record may carry an "id"; otherwise its split and line number
name it. Graders are the shipped tasks' own: `exact` compares stripped text, `numeric` is GSM8K's
flexible-extract exact match, `math_verify` is MATH500's `math_check`, and `code` grades as tiny-mbpp does:
a record holds `entry_point` (the function's name), the reference program (`answer`) and `inputs` (a list
of argument lists); the reply's function runs in the sandbox on them and its return values are compared
with the reference's (`evals.codecheck`).
"""
from __future__ import annotations

import string
from pathlib import Path

from acceptmoe.errors import UserError
from acceptmoe.evals.data import parse_jsonl, read_text, sha256_of
from acceptmoe.evals.tasks import TASK_FILES, TASKS, Grade, Task, check_split, read_reply, user_message
from acceptmoe.yamlfile import read_mapping

KEYS = {"name", "version", "grader", "prompt", "answer", "splits"}


class TaskFileError(UserError, ValueError):
    """A task file that cannot be used; the message names the file, the key and the fix."""


def _exact(gold: str, response: str) -> Grade:
    extracted = response.strip()
    return Grade(extracted == gold.strip(), extracted, {"target": gold})


def _numeric(gold: str, response: str) -> Grade:
    from acceptmoe.evals.tasks import gsm8k
    return gsm8k.score_against(gold, response)


def _math_verify(gold: str, response: str) -> Grade:
    from acceptmoe.evals.tasks import math500
    return math500.score_against(gold, response)


GRADERS = {"exact": _exact, "numeric": _numeric, "math_verify": _math_verify, "code": None}
CODE_FIELDS = ("entry_point", "inputs")


def _fail(path: Path, message: str) -> TaskFileError:
    return TaskFileError(f"{path}: {message}")


def _split_records(path: Path, split: str, entry, fields: tuple[str, ...]) -> list[dict]:
    if not isinstance(entry, dict) or set(entry) != {"file", "sha256"}:
        raise _fail(path, f"splits.{split} must be {{file: <jsonl>, sha256: <hex>}}, got {entry!r}")
    data = (path.parent / str(entry["file"])).resolve()
    if not data.is_file():
        raise _fail(path, f"splits.{split}.file {data} does not exist")
    actual = sha256_of(data)
    if actual != entry["sha256"]:
        raise _fail(path, f"splits.{split}: {data.name} has sha256 {actual}, the file declares {entry['sha256']}: "
                          f"the data changed; restore it or update the checksum")
    records = parse_jsonl(read_text(data), str(data), fields)
    return [{"id": str(r.get("id", f"{split}-{n}")), **r} for n, r in enumerate(records)]


def load_file(path: str | Path) -> Task:
    """The task a YAML file declares (its data read and checked now)."""
    path = Path(path).resolve()
    spec = read_mapping(path, TaskFileError)
    unknown, missing = set(spec) - KEYS, {"name", "grader", "splits", "answer"} - set(spec)
    if unknown or missing:
        raise _fail(path, f"unknown keys {sorted(unknown)}" if unknown else f"missing keys {sorted(missing)}")
    if spec["grader"] not in GRADERS:
        raise _fail(path, f"grader {spec['grader']!r} is not one of {', '.join(GRADERS)}")
    template = str(spec.get("prompt", "{prompt}"))
    fields = tuple(dict.fromkeys([f for _, f, _, _ in string.Formatter().parse(template) if f] + [spec["answer"]]
                                 + (list(CODE_FIELDS) if spec["grader"] == "code" else [])))
    splits = spec["splits"]
    if not isinstance(splits, dict) or "test" not in splits or set(splits) - {"test", "train"}:
        raise _fail(path, "splits must hold test (and may hold train)")
    data = {split: _split_records(path, split, entry, fields) for split, entry in splits.items()}
    grade, answer = GRADERS[spec["grader"]], spec["answer"]
    name = str(spec["name"])

    def load(split: str = "test", limit: int | None = None) -> list[dict]:
        check_split(name, split, tuple(data))
        rows = [dict(r) for r in data[split]]
        return rows if limit is None else rows[:limit]

    common = dict(name=name, version=f"file-{spec.get('version', '1')}", splits=tuple(data), load=load,
                  messages=lambda ex: user_message(template.format(**ex)))
    if grade is None:
        return _code_task(common, answer)
    return Task(**common, extract=lambda ex, response: grade(str(ex[answer]), response).extracted,
                score=lambda ex, response: grade(str(ex[answer]), response))


def _code_task(common: dict, answer: str) -> Task:
    """A code task: the reply's `entry_point` against the reference program on the record's inputs."""
    from acceptmoe.evals.codecheck import CodeProblem, sanitize
    from acceptmoe.evals.extract import extract_code
    from acceptmoe.evals.tasks import grade_code

    def problem(ex: dict) -> CodeProblem:
        return CodeProblem(task_id=ex["id"], entry_point=ex["entry_point"], canonical=str(ex[answer]) + "\n",
                           test_sets=(("base", [list(args) for args in ex["inputs"]]),))

    def extract(ex: dict, response: str, reading: str = "evalplus") -> str:
        return sanitize(extract_code(response, ex["entry_point"]), ex["entry_point"])

    def score(ex: dict, response: str) -> Grade:
        return grade_code(common["name"], problem, [ex], [response])[0]

    return Task(**common, extract=extract, score=score, problem=problem, test_sets=("base",))


def file_of(name: str) -> str | None:
    """The file task `name` was registered from (None: a shipped task); a spawned process registers it again."""
    return TASK_FILES.get(name)


def read_file_reply(task_file: str, *args) -> str:
    """`read_reply` in a reader's fresh process, for a task declared in `task_file` (registered there first)."""
    register_file(task_file)
    return read_reply(*args)


def register_file(path: str | Path) -> str:
    """Register the task `path` declares (again for the same file: nothing to do); returns its name."""
    path = Path(path).resolve()
    task = load_file(path)
    if TASK_FILES.get(task.name) == str(path) and task.name in TASKS:
        return task.name
    if task.name in TASKS:
        raise _fail(path, f"a task named {task.name!r} exists already: rename it")
    TASKS.add(task.name, task)
    TASK_FILES[task.name] = str(path)
    return task.name
