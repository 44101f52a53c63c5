"""Regrade saved sample rows with the current graders, offline: per (task, method), the pass rate recorded
in the rows beside the one the current grader gives (and the "plus" rate where the task has one).

    python -m acceptmoe.evals.regrade results/reference/table1/*/samples.jsonl [--tasks tiny-mbpp ...]

A row needs `task`, `method`, `index` (position in `task.load(split, limit)`), `example_id`, `response`
and `correct`. Responses are graded as stored (`--response-format harmony` for raw GPT-OSS outputs).
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

from acceptmoe.errors import UserError
from acceptmoe.evals.extract import RESPONSE_FORMATS
from acceptmoe.evals.tasks import TASKS, get_task

FIELDS = ("task", "method", "index", "example_id", "response", "correct")


def read_rows(paths: list[str]) -> list[dict]:
    rows = []
    for path in paths:
        try:
            lines = Path(path).read_text().splitlines()
        except OSError as exc:
            raise UserError(f"cannot read {path}: {exc.strerror}; pass samples.jsonl files of a run") from None
        for lineno, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                raise UserError(f"{path}, line {lineno}: not JSON; pass samples.jsonl files of a run") from None
            missing = [f for f in FIELDS if f not in row]
            if missing:
                raise UserError(f"{path}, line {lineno}: row lacks {missing}; pass samples.jsonl files of a run")
            rows.append(row)
    return rows


def regrade(rows: list[dict], split: str = "test", response_format: str = "plain", workers: int = 2) -> list[dict]:
    """One record per (task, method): n, recorded and current pass rates (%), rows whose verdict changed."""
    by_task: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        if row["task"] not in TASKS:
            raise UserError(f"the rows name a task this code lacks: {TASKS.unknown(row['task'])}")
        by_task[row["task"]].append(row)
    records = []
    for name, task_rows in by_task.items():
        task = get_task(name)
        examples = task.load(split, max(r["index"] for r in task_rows) + 1)
        for r in task_rows:
            if examples[r["index"]]["id"] != r["example_id"]:
                raise UserError(f"{name} row {r['index']} is {r['example_id']!r} but the {split} split holds "
                                f"{examples[r['index']]['id']!r} there: pass --split, or the task data changed")
        scores = task.score_many([examples[r["index"]] for r in task_rows], [r["response"] for r in task_rows],
                                 response_format=response_format, workers=workers)
        groups: dict[str, list] = defaultdict(list)
        for r, s in zip(task_rows, scores, strict=True):
            groups[r["method"]].append((bool(r["correct"]), s))
        for method, pairs in groups.items():
            n = len(pairs)
            rec = {"task": name, "method": method, "n": n,
                   "recorded": 100 * sum(old for old, _ in pairs) / n,
                   "current": 100 * sum(s.correct for _, s in pairs) / n,
                   "changed": sum(old != s.correct for old, s in pairs)}
            if all("plus" in s.details for _, s in pairs):
                rec["current_plus"] = 100 * sum(bool(s.details["plus"]) for _, s in pairs) / n
            records.append(rec)
    return records


def markdown(records: list[dict]) -> str:
    lines = ["| task | method | n | recorded pass@1 | current pass@1 | current plus | rows changed |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in records:
        plus = f"{r['current_plus']:.1f}" if "current_plus" in r else "-"
        lines.append(f"| {r['task']} | {r['method']} | {r['n']} | {r['recorded']:.1f} | {r['current']:.1f} | {plus} "
                     f"| {r['changed']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m acceptmoe.evals.regrade", description=__doc__.split("\n\n")[0])
    p.add_argument("samples", nargs="+", help="samples.jsonl files")
    p.add_argument("--tasks", nargs="*", help="only these tasks")
    p.add_argument("--split", default="test")
    p.add_argument("--response-format", default="plain", choices=RESPONSE_FORMATS)
    p.add_argument("--workers", type=int, default=2)
    args = p.parse_args(argv)
    try:
        rows = [r for r in read_rows(args.samples) if not args.tasks or r["task"] in args.tasks]
        if not rows:
            raise UserError("no rows to regrade; check the files and --tasks")
        print(markdown(regrade(rows, args.split, args.response_format, args.workers)))
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
