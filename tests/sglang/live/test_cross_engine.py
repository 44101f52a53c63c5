"""`./reproduce.sh cross-engine`, small: one prompt per tiny task, 8 tokens, Standard SD and AcceptMoE (and the
fixed-budget Count-B at AcceptMoE's mean set size): every required agreement holds, and the command's exit
status says so."""
from acceptmoe.experiments.crossengine.commands import cross_engine, main


def test_cross_engine_small(tmp_path):
    run, rows, text = cross_engine("tiny", limit=1, tokens=8, methods=["acceptmoe", "count-b"], results=tmp_path)
    assert [r.method for r in rows] == ["standard-sd", "acceptmoe", "count-b"]
    for r in rows:
        assert r.required_ok, text
        assert r.tokens_equal == r.prompts == 4 and r.trees_equal == r.steps_paired > 0
    assert rows[1].sets_checked > 0 and rows[1].sets_equal == rows[1].sets_checked
    assert (run.path / "report.md").read_text().count("| ok |") == 3


def test_cross_engine_refuses_an_unknown_method(capsys):
    import pytest

    from acceptmoe.errors import UserError

    with pytest.raises(UserError, match="valid"):
        main(["--methods", "vanilla-ar", "--limit", "1"])
