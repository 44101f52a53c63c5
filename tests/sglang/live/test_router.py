"""Data parallelism through SGLang's own router (`sglang-router`) on a CPU: `open_engine(dp=2, router=...)` starts
two SGLang HTTP servers (EAGLE-3, the plugin, the CPU stand-ins) behind the router and sends every request through
it. Greedy tokens and the plugin's per-step records equal one server's (and the native engine's tokens), both
servers served requests (the records name their writer process, mapped to its server), and every process is
gone after `close`."""
import os

import psutil
import pytest

from acceptmoe.engine.backend import GenerationOptions
from acceptmoe.engine.tree import TreeShape
from acceptmoe.methods import Variant

from common import ROOT, task_prompts

NEW = 8
TREE = TreeShape(5, 10, 64)
PLANS = (("standard-sd", None), ("count-b", 8))     # one server serves both (the plugin re-reads its settings)


def run(prompts, **parallel):
    from acceptmoe.serving.sglang.engine import open_engine

    backend = open_engine(ROOT / "models" / "tiny" / "target", ROOT / "models" / "tiny" / "draft", device="cpu",
                          dtype="float32", tree=TREE, skip_tokenizer_init=True, max_running_requests=8,
                          max_total_tokens=4096, log_level="error", **parallel)
    try:
        gens = {m: backend.generate_many(prompts, Variant(m, budget=b).bind(backend.fit), NEW,
                                         GenerationOptions(ignore_eos=True, trace_layers=True)) for m, b in PLANS}
        groups = [p.pid for p in backend._engine.procs] if parallel.get("router") else []
        return gens, backend.describe(), dict(backend.served), backend.starts, groups
    finally:
        backend.close()


@pytest.fixture(scope="module")
def prompts():
    return task_prompts(4)


@pytest.fixture(scope="module")
def one(prompts):
    return run(prompts)


@pytest.fixture(scope="module")
def routed(prompts):
    return run(prompts, dp=2, router="round_robin")


def test_dp2_through_the_router_serves_like_one_server(one, routed, prompts):
    (single, _, _, _, _), (gens, described, served, starts, _) = one, routed
    for method, _ in PLANS:
        assert [g.tokens for g in gens[method]] == [g.tokens for g in single[method]], method
        for a, b in zip(single[method], gens[method], strict=True):
            assert len(b.trace.blocks) > 0 and sum(b.accept_lengths) == NEW - 1
            assert [(x.parents, x.path, x.accept_length) for x in b.trace.blocks] == \
                [(x.parents, x.path, x.accept_length) for x in a.trace.blocks]
            assert [x.layers for x in b.trace.blocks] == [x.layers for x in a.trace.blocks]
    assert starts == 1                                             # both plans on the same two servers
    assert sorted(served) == [0, 1] and sum(served.values()) == len(prompts) * len(PLANS), served
    assert described["dp"] == 2 and described["tp"] == 1 and "dp_size" not in described["server_args"]
    assert described["router"]["policy"] == "round_robin" and described["router"]["version"] == "0.3.2"


def test_standard_sd_through_the_router_equals_the_native_engine(routed, prompts):
    from acceptmoe.engine.engine import load_engine

    eng = load_engine(ROOT / "models" / "tiny", device="cpu", tree=TREE)
    plan = Variant("standard-sd").bind(eng.fit)
    native = [eng.generate(p, plan, NEW, GenerationOptions(ignore_eos=True)).tokens for p in prompts]
    assert [g.tokens for g in routed[0]["standard-sd"]] == native


def test_servers_and_router_are_stopped(routed):
    groups = routed[4]
    assert len(groups) == 3                                        # two servers and the router
    assert [p for p in psutil.process_iter() if _alive_in(p, groups)] == []


def _alive_in(proc, groups) -> bool:
    """A process of one of these groups that still runs (an exited child waiting to be reaped holds nothing)."""
    try:
        return os.getpgid(proc.pid) in groups and proc.status() != psutil.STATUS_ZOMBIE
    except (ProcessLookupError, PermissionError, psutil.Error):
        return False


def test_table1_with_dp2_runs_through_the_router_and_states_it(tmp_path):
    """`table1 --engine sglang` on a world with `serving.dp: 2`: the run's config.json states dp, tp and the router
    (policy; its version with the environment's packages), engines.jsonl the router the engine served through,
    and the rows come from SGLang."""
    import json

    import yaml

    from acceptmoe.experiments.table1.commands import main

    preset = yaml.safe_load((ROOT / "configs/presets/tiny.yaml").read_text())
    preset.update(tasks=["tiny-gsm"], generation={"max_new_tokens": 24}, serving={"dp": 2})
    preset["table1"] = {"limit": 2}
    (tmp_path / "dp2.yaml").write_text(yaml.safe_dump(preset))
    assert main(["--preset", str(tmp_path / "dp2.yaml"), "--engine", "sglang", "--methods", "standard-sd",
                 "--results", str(tmp_path / "r")]) == 0
    (folder,) = (tmp_path / "r/table1").glob("*/*")
    config = json.loads((folder / "config.json").read_text())
    serving = config["config"]["world"]["serving"]
    assert (serving["dp"], serving["tp"], serving["router"]) == (2, 1, "round_robin")
    assert config["environment"]["packages"]["sglang-router"] == "0.3.2"
    (engine,) = [json.loads(line) for line in (folder / "engines.jsonl").read_text().splitlines()]
    assert engine["dp"] == 2 and engine["router"] == {"package": "sglang-router", "version": "0.3.2",
                                                      "policy": "round_robin"}
    rows = [json.loads(line) for line in (folder / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and {r["method"] for r in rows} == {"standard-sd"}
