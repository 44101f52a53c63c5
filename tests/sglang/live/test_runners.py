"""`./reproduce.sh table1 --engine sglang` on this CPU, small: calibration on SGLang's own Standard SD records,
B0, Standard SD and AcceptMoE through SGLang's EAGLE-3 worker, a math-style and a code task graded in this
environment. Every saved grade equals a fresh grading of the saved reply: between engines SGLang's shutdown
kills its process's children, and the graders' kept workers must survive that without blaming a reply."""
import json
from pathlib import Path

import yaml

from acceptmoe.evals.tasks import get_task
from acceptmoe.experiments.table1.commands import main

ROOT = Path(__file__).resolve().parents[3]


def test_table1_runs_through_sglang_and_grades_like_a_fresh_grading(tmp_path):
    preset = yaml.safe_load((ROOT / "configs/presets/tiny.yaml").read_text())
    preset.update(tasks=["tiny-gsm", "tiny-humaneval"], calibration={"prompts": 2},
                  generation={"max_new_tokens": 48})
    preset["table1"] = {"limit": 2}
    (tmp_path / "small.yaml").write_text(yaml.safe_dump(preset))
    assert main(["--preset", str(tmp_path / "small.yaml"), "--engine", "sglang", "--methods", "standard-sd",
                 "acceptmoe", "--results", str(tmp_path / "r")]) == 0
    (run,) = (tmp_path / "r/table1").glob("*/*")
    engines = [json.loads(line) for line in (run / "engines.jsonl").read_text().splitlines()]
    assert engines and {e["engine"] for e in engines} == {"sglang"}
    rows = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert {(r["task"], r["method"]) for r in rows} == {(t, m) for t in preset["tasks"]
                                                         for m in ("standard-sd", "acceptmoe")}
    for r in rows:
        task = get_task(r["task"])
        fresh = task.score_many([task.load("test")[r["index"]]], [r["response"]])[0]
        assert (r["correct"], r["extracted"]) == (fresh.correct, fresh.extracted), r["score_details"]
        assert "error" not in r["score_details"] and r["score_details"].get("base_status") != "not run", r
    assert (run / "table1.md").is_file()
