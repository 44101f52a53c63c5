"""`./reproduce.sh cross-engine`, small, over every speculating method of the registry (so a method cannot land
without its row): one prompt per tiny task, 8 tokens; every required agreement holds, the command's exit status
says so, one SGLang server serves every method, and both engines are closed when it ends. A batch-crediting
method has two rows: one request at a time (equal to its twin, token for token, in both engines) and every
prompt in flight (its sets recomputed over SGLang's own passes, the native engine's batched pass beside). A
method with token-side admission is held to the native engine's admitted subtrees, step by step."""
from acceptmoe.methods import CALIBRATION, METHODS, alone_twin
from acceptmoe.tools.crossengine.commands import cross_engine, main

from common import schedulers


def test_cross_engine_every_method(tmp_path, monkeypatch):
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
    run, rows, text = cross_engine("tiny", limit=1, tokens=8, methods=None, results=tmp_path)
    assert len(opened) == 1 and opened[0].model is None           # the native engine was closed
    assert len(servers) == 1 and schedulers() == 0                # one server for every method, shut down
    speculating = [m for m, s in METHODS.items() if s.speculates]        # the admitting ones among them
    assert rows[0].method == CALIBRATION and {r.method for r in rows} == set(speculating)
    for m in speculating:
        mine = [r for r in rows if r.method == m]
        assert len(mine) == (1 if alone_twin(m) is None else 2), (m, text)
    for r in rows:
        assert r.required_ok, text
        assert r.trees_recovered == r.requests_recorded > 0, text
        if r.restricts:
            assert r.sets_checked > 0 and r.sets_equal == r.sets_checked, text
        if r.twin is None and r.native_mode == "alone":               # per-request methods: the same tokens and trees
            assert r.tokens_equal == r.prompts == 4 and r.trees_equal == r.steps_paired > 0, text
    credited = [r for r in rows if r.twin is not None]
    assert credited and all(r.in_flight == 1 and r.twin_equal == r.prompts for r in credited), text
    assert any(r.native_mode == "batched" and max_batch(run.path, r.method) > 1 for r in rows), text
    for m in (m for m in speculating if METHODS[m].admits):                 # admission truncated SGLang's trees
        assert admitted_fewer(run.path, m), m
    assert (run.path / "report.md").read_text().count("| ok |") == len(rows)


def admitted_fewer(run_dir, method) -> bool:
    """Some request of SGLang's dumped passes of `method` had fewer admitted nodes than the pass's width."""
    import torch
    passes = [torch.load(f) for f in (run_dir / "dumps").glob(f"*/{method}/*.pt")]
    return any(len(keep) < p["width"] for p in passes for keep in p.get("admitted", []))


def max_batch(run_dir, method) -> int:
    """The most requests one of SGLang's dumped verify passes of `method` held with every prompt in flight (its
    pass files: dumps/<model>/<plan name>/)."""
    import torch
    passes = [torch.load(f) for f in (run_dir / "dumps").glob(f"*/{method}/*.pt")]
    return max((len(p["parents"]) for p in passes if "mask" in p), default=0)


def test_cross_engine_refuses_an_unknown_method(capsys):
    import pytest

    from acceptmoe.errors import UserError

    with pytest.raises(UserError, match="valid"):
        main(["--methods", "vanilla-ar", "--limit", "1"])
