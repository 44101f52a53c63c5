"""`python -m acceptmoe.evals.regrade`: saved rows regraded with the current graders."""
import json

from acceptmoe.evals import regrade
from acceptmoe.evals.tasks import get_task


def test_regrade_reports_recorded_and_current_rates(tmp_path, capsys):
    examples = get_task("tiny-mbpp").load("test", limit=2)
    main = "\nif __name__ == '__main__':\n    print(input())\n"
    rows = [{"task": "tiny-mbpp", "method": "m", "index": i, "example_id": ex["id"], "response": ex["reference"] + main,
             "correct": False} for i, ex in enumerate(examples)]
    path = tmp_path / "samples.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert regrade.main([str(path)]) == 0
    assert "| tiny-mbpp | m | 2 | 0.0 | 100.0 | - | 2 |" in capsys.readouterr().out


def test_regrade_bad_input_is_one_error_line(tmp_path, capsys):
    path = tmp_path / "samples.jsonl"
    path.write_text('{"task": "tiny-mbpp"}\n')
    assert regrade.main([str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "lacks" in err and err.count("\n") == 1
    assert regrade.main([str(tmp_path / "missing.jsonl")]) == 2
