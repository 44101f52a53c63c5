"""The committed replay (results/reference/replay/) reproduces from the committed routes: replaying the same
generations, passes, layers and pool over the committed fig4 recording gives, pass by pass, the committed
experts used, loads, hits and output tokens. Those counts decide every bytes and bound column (bytes =
counts x the shape's expert bytes), and they do not depend on the expert shape, so the check replays at the
tiny shape (seconds) what the committed run replayed at Qwen3-30B-A3B's."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from acceptmoe.experiments.replay.config import load_replay_config
from acceptmoe.experiments.replay.report import generation_rounds
from acceptmoe.experiments.replay.runner import run_replay
from acceptmoe.experiments.spine.runs import REPO, SampleLog, open_run

RUNS = sorted(p.parent for p in (REPO / "results" / "reference" / "replay").glob("*/config.json"))
COUNTS = ("kinds", "output", "used", "loads", "hits")


def test_one_replay_run_is_committed():
    assert RUNS, "results/reference/replay/ holds no replay run"


@pytest.mark.parametrize("committed", RUNS, ids=[p.name for p in RUNS])
def test_committed_replay_counts_reproduce_pass_by_pass(committed, tmp_path):
    saved = json.loads((committed / "config.json").read_text())["config"]
    keep = ("source", "offload", "phase", "model", "variants", "generations", "passes_per_generation", "layers")
    source = Path(saved["source"])                        # the committed recording, named from the repository
    assert not source.is_absolute() and (REPO / source / "routes").is_dir(), source
    cfg = load_replay_config(saved["world"]["preset"], {**{k: saved[k] for k in keep}, "source": str(REPO / source),
                                                        "shape": "tiny",
                                                        "repeats": 1, "weight_sets": 1, "world.threads": 1})
    run = open_run("replay", "tiny", cfg, root=tmp_path)
    run_replay(cfg, run, show_progress=False)
    mine, want = _sequences(run.path), _sequences(committed)      # one row per generation now, per variant then
    routes = json.loads((run.path / "replay.json").read_text())["routes"]
    # routes that pruned against the recorded pool are never replayed with the resident store
    assert not {("resident", v) for v in routes if routes[v]["prune"]} & set(mine)
    assert set(mine) == set(want)
    for key, gens in want.items():
        for a, b in zip(mine[key], gens, strict=True):
            assert (a["task"], a["index"]) == (b["task"], b["index"])
            assert {k: a[k] for k in COUNTS} == {k: b[k] for k in COUNTS}, key
            assert a["counters_match"] == b["counters_match"], key


def _sequences(run: Path) -> dict[tuple[str, str], list[dict]]:
    """(store, variant) -> its round-0 generations in the plan's order, whichever row layout the run has."""
    rows = [r for r in SampleLog(run / "samples.jsonl") if r["round"] == 0]
    return {(s, v): [g[0] for g in generation_rounds(rows, s, v)]
            for s, v in dict.fromkeys((r["store"], r["variant"]) for r in rows)}
