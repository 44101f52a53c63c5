"""The replay's unit is the prompt: which recorded generations it replays (the first prompts of each task, one
generation per prompt), and the intervals over them, which are `evals.stats`'s own (paired bootstrap over
prompts, stratified by task where every task holds two or more prompts), say how many prompts they rest on
and mark fewer than `stats.MIN_UNITS` as too few for a verdict; a recorded placebo's interval is set against
every other one by `stats.beyond_placebo`."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from acceptmoe.evals import stats
from acceptmoe.experiments.replay import intervals
from acceptmoe.experiments.replay.source import GenKey, Recording, select

TASKS = ("tiny-gsm", "tiny-math", "tiny-humaneval", "tiny-mbpp")


def _recording(keys) -> Recording:
    return Recording(Path("/nowhere"), "offload-timed", "tiny", ("standard-sd", "acceptmoe"), tuple(sorted(keys)), {})


def test_selection_takes_the_first_prompts_of_each_task_one_generation_each():
    keys = [GenKey(rep, i, t) for rep in (0, 1) for i in range(6) for t in TASKS[:2]] + [GenKey(0, 0, TASKS[2])]
    rec = select(_recording(keys), None, 4)
    assert {k.rep for k in rec.keys} == {0}                             # a second repetition is not a second unit
    assert rec.per_task() == {"tiny-gsm": 4, "tiny-humaneval": 1, "tiny-math": 4}   # a task holds what it recorded
    assert [k.index for k in rec.keys if k.task == "tiny-math"] == [0, 1, 2, 3]
    assert list(rec.keys) == sorted(rec.keys)                            # the plan's order: rep, index, task
    assert select(_recording(keys), None, None).per_task()["tiny-gsm"] == 6


def _arrays(per_task: int, tasks=TASKS, seed: int = 1) -> tuple[dict, dict]:
    rng = np.random.default_rng(seed)
    labels = np.array([t for t in tasks for _ in range(per_task)])
    n = labels.size

    def one(scale):
        return {"seconds": rng.uniform(1, 2, n) * scale, "passes": rng.integers(5, 9, n).astype(float),
                "output": rng.integers(20, 31, n).astype(float), "names": np.array([f"p{i}" for i in range(n)]),
                "tasks": labels}
    return one(2.0), one(1.0)


@pytest.mark.parametrize("per_task,enough", [(5, True), (20, True), (4, False), (1, False)])
def test_intervals_are_the_stats_modules_over_prompts_by_task(per_task, enough):
    """4 tasks x 5 prompts = 20 = stats.MIN_UNITS: enough; 16 or 4 prompts: too few, and the record says so. The
    fields are stats.paired_bootstrap_speedup's, stratified by task (plain with one prompt per task)."""
    ref, other = _arrays(per_task)
    got = intervals.speedups(ref, other, 500, 0)
    strata = list(ref["tasks"]) if per_task >= 2 else None
    for unit, den in intervals.WHAT:
        want = stats.paired_bootstrap_speedup(ref["seconds"], ref[den], other["seconds"], other[den], 500, seed=0,
                                              strata=strata)
        assert (got[f"speedup_per_{unit}"], got[f"speedup_per_{unit}_low"], got[f"speedup_per_{unit}_high"]) == \
            (want.estimate, want.low, want.high)
    assert got["interval_unit"] == "prompts" and got["interval_n"] == 4 * per_task
    assert got["interval_strata"] == ("task" if per_task >= 2 else "none")
    assert got["interval_enough_units"] is enough
    assert (got["interval_note"] == "") is enough
    if not enough:
        assert f"rests on {4 * per_task} prompts, fewer than {stats.MIN_UNITS}" in got["interval_note"]
    assert f"n = {4 * per_task} prompts (tiny-gsm {per_task}, " in got["interval_per_task"]


def test_stratified_resamples_keep_each_tasks_share():
    """A stratified interval differs from the plain one on the same prompts (each resample keeps 5 per task)."""
    ref, other = _arrays(5)
    plain = stats.paired_bootstrap_speedup(ref["seconds"], ref["output"], other["seconds"], other["output"], 500)
    got = intervals.speedups(ref, other, 500, 0)
    assert got["speedup_per_token"] == plain.estimate
    assert (got["speedup_per_token_low"], got["speedup_per_token_high"]) != (plain.low, plain.high)


def test_pairing_keeps_the_prompts_both_variants_replayed_in_the_references_order():
    ref, other = _arrays(2)
    a, b = intervals.paired(ref, {k: v[::-1][1:] for k, v in other.items()})   # reversed, one prompt missing
    assert a["names"].tolist() == b["names"].tolist() == ref["names"][:-1].tolist()
    assert np.array_equal(b["seconds"], other["seconds"][:-1])


def _record(variant, est, low, high, store="offloaded-48"):
    return {"store": store, "variant": variant, "speedup_per_token": est, "speedup_per_token_low": low,
            "speedup_per_token_high": high, "interval_n": 80, "interval_method": "percentile-bootstrap"}


def test_placebo_interval_is_set_against_every_other_one():
    recs = [{"store": "offloaded-48", "variant": "standard-sd"}, _record("p", 1.0, 0.95, 1.05),
            _record("fast", 1.9, 1.7, 2.1), _record("near", 1.04, 1.0, 1.1), _record("slow", 0.5, 0.4, 0.9),
            _record("other-store", 1.9, 1.7, 2.1, store="resident")]
    intervals.add_placebo(recs, "p")
    got = {r["variant"]: r.get("beyond_placebo", "absent") for r in recs}
    assert got == {"standard-sd": "absent", "p": None, "fast": 1, "near": 0, "slow": -1, "other-store": "absent"}
    assert recs[2]["placebo_per_token_low"] == 0.95
