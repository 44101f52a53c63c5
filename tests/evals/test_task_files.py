"""A task declared in a YAML file over JSONL data: its data checksummed, graded by the shipped graders; a
damaged file or a wrong checksum is one error naming the file and the key (Table 1 on a file task:
tests/experiments/test_quick_runs.py)."""
from __future__ import annotations

import pytest

from acceptmoe.evals.tasks.from_file import TaskFileError, load_file

from fixtures import write_task_file as _write_task


def test_a_file_task_grades_with_the_shipped_graders(tmp_path):
    task = load_file(_write_task(tmp_path))
    ex = task.load("test", 1)[0]
    assert task.messages(ex) == [{"role": "user", "content": ex["question"]}] and task.splits == ("test", "train")
    assert task.score(ex, f"so it is\n#### {ex['answer']}").correct and not task.score(ex, "#### -1").correct
    exact = load_file(_write_task(tmp_path / "e", name="my-exact", grader="exact"))
    assert exact.score(ex, f"  {ex['answer']} ").correct
    math = load_file(_write_task(tmp_path / "m", name="my-math", grader="math_verify"))
    assert math.score(ex, f"The answer is $\\boxed{{{ex['answer']}}}$.").correct


def test_bad_task_files_are_one_error_naming_the_key(tmp_path):
    path = _write_task(tmp_path)
    (tmp_path / "my-arith-test.jsonl").write_text('{"question": "changed", "answer": "1"}\n')
    with pytest.raises(TaskFileError, match=r"my-arith.yaml: splits.test: my-arith-test.jsonl has sha256 .* the data "
                                             r"changed"):
        load_file(path)
    with pytest.raises(TaskFileError, match="grader 'fuzzy' is not one of exact, numeric, math_verify"):
        load_file(_write_task(tmp_path / "g", name="g", grader="fuzzy"))
    with pytest.raises(TaskFileError, match=r"unknown keys \['colour'\]"):
        load_file(_write_task(tmp_path / "c", name="c", colour="red"))


def test_a_code_task_from_a_file_runs_replies_in_the_sandbox(tmp_path):
    """Graded as tiny-mbpp is: the reply's function on the record's inputs, against the reference program's
    return values; the reply is read in a worker process, which registers the file task again."""
    import hashlib
    import json

    import yaml

    from acceptmoe.evals.tasks import TASKS
    from acceptmoe.evals.tasks.from_file import register_file
    rows = [{"id": "add", "text": "Write add_two(a, b) returning a + b.", "entry_point": "add_two",
             "solution": "def add_two(a, b):\n    return a + b", "inputs": [[1, 2], [3, 4], [-5, 5]]}]
    data = tmp_path / "code-test.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = {"name": "my-code", "grader": "code", "prompt": "{text}", "answer": "solution",
            "splits": {"test": {"file": data.name, "sha256": hashlib.sha256(data.read_bytes()).hexdigest()}}}
    (tmp_path / "code.yaml").write_text(yaml.safe_dump(spec))
    name = register_file(tmp_path / "code.yaml")
    try:
        task = TASKS[name]
        ex = task.load("test")[0]
        good = "Here:\n```python\ndef add_two(a, b):\n    return b + a\n```"
        bad = "```python\ndef add_two(a, b):\n    return a - b\n```"
        grades = task.score_many([ex, ex], [good, bad], workers=1)
        assert [g.correct for g in grades] == [True, False] and task.executes_code and task.test_sets == ("base",)
        assert "input 0" in grades[1].details["base_reason"]
    finally:
        TASKS.remove(name)
