"""`./reproduce.sh cross-engine`, small: one prompt per tiny task, 8 tokens, Standard SD and AcceptMoE (and the
fixed-budget Count-B at AcceptMoE's mean set size): every required agreement holds, the command's exit status
says so, one SGLang server serves every method, and both engines are closed when it ends."""
from acceptmoe.experiments.crossengine.commands import cross_engine, main

from common import schedulers


def test_cross_engine_small(tmp_path, monkeypatch):
    from sglang.srt.entrypoints.engine import Engine as Server

    from acceptmoe.engine.engine import Engine

    def made(cls) -> list:
        made, real = [], cls.__init__

        def init(self, *args, **kwargs):
            made.append(self)
            real(self, *args, **kwargs)
        monkeypatch.setattr(cls, "__init__", init)
        return made
    opened, servers = made(Engine), made(Server)
    run, rows, text = cross_engine("tiny", limit=1, tokens=8, methods=["acceptmoe", "count-b"], results=tmp_path)
    assert len(opened) == 1 and opened[0].model is None           # the native engine was closed
    assert len(servers) == 1 and schedulers() == 0                # one server for the three methods, shut down
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
