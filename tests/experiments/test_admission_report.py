"""`./reproduce.sh admission` end to end on the tiny random world: a Table 1 of Standard SD, AcceptMoE and every
admitting method, its side-by-side report (pooled counts checked by hand from the rows), rebuilt byte for byte
by `tables --run`, the claims rows it speaks to (too few prompts for a verdict), and the refusal of a method
list without an admitting method."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from acceptmoe.costs.shapes import get_shape
from acceptmoe.experiments import tables
from acceptmoe.experiments.claims import table as claims_table
from acceptmoe.experiments.claims.beyond import admission_rows
from acceptmoe.experiments.spine.runs import SampleLog
from acceptmoe.experiments.table1 import admission
from acceptmoe.experiments.table1 import commands as table1_commands
from acceptmoe.experiments.table1.table import build_table1
from acceptmoe.methods import METHODS

import runner_world as world

IDS = ("admission-acceptmoe-reads", "admission-acceptmoe-accuracy", "admission-composition-reads",
       "admission-composition-accuracy")


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("admission")
    world.make_models(root)
    preset = world.write_preset(root, root)
    assert table1_commands.admission_main(["--preset", str(preset), "--limit", "2", "--results", str(root / "r")]) == 0
    (folder,) = (root / "r" / "admission" / "test").iterdir()
    return folder


def test_the_compared_methods_are_the_registrys_admitting_ones():
    assert admission.ADMITTING == tuple(m for m, s in METHODS.items() if s.admits)
    assert {admission.SURVIVAL, admission.PREFIX, admission.COSTED} <= set(admission.ADMITTING)
    assert all(m in admission.COMPARED and a in admission.COMPARED for m, a in admission.PAIRS)


def test_report_pools_the_rows_and_rebuilds(run, tmp_path):
    rows = list(SampleLog(run / "samples.jsonl"))
    assert {r["method"] for r in rows} == set(admission.COMPARED)
    t = build_table1(run)
    methods = {r["method"]: r for r in admission.method_records(t)}
    assert list(methods) == list(admission.COMPARED)
    expert = get_shape(t.cfg.world.models[0].target).stored_bytes()
    for m, rec in methods.items():
        mine = [r for r in rows if r["method"] == m]
        reads = sum(r["routed_union_sum"] * r["blocks"] / r["block_layers"] for r in mine)
        tokens = sum(r["tokens"] for r in mine)
        assert rec["n"] == len(mine) == 4
        assert rec["reads_per_token"] == pytest.approx(reads / tokens)
        assert rec["mb_per_token"] == pytest.approx(sum(r["routed_union_sum"] for r in mine) * expert / tokens / 1e6)
        assert rec["tau"] == pytest.approx(sum(r["accepted"] for r in mine) / sum(r["steps"] for r in mine))
        assert rec["reads_per_token_low"] <= rec["reads_per_token"] <= rec["reads_per_token_high"]
    paired = {(r["method"], r["against"]): r for r in admission.paired_records(t)}
    assert set(paired) == set(admission.PAIRS)
    for (m, against), rec in paired.items():
        assert rec["reads_ratio"] == pytest.approx(methods[m]["reads_per_token"] / methods[against]["reads_per_token"])
        assert rec["tau_ratio"] == pytest.approx(methods[m]["tau"] / methods[against]["tau"])
        acc = {x: np.mean([r["correct"] for r in rows if r["method"] == x]) for x in (m, against)}
        assert rec["accuracy_diff"] == pytest.approx(100 * (acc[m] - acc[against]))
    copy = tmp_path / run.name
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns("*.md", "*.csv", "*.tex", "traces"))
    assert tables.main(["--run", str(copy)]) == 0
    for name in (*admission.OUTPUTS, "table1.md"):
        assert (copy / name).read_bytes() == (run / name).read_bytes(), name


def test_claims_rows_need_enough_prompts(run):
    rows = {r["id"]: r for r in claims_table.claim_rows(admission_rows(run)) if r["id"] in IDS}
    assert set(rows) == set(IDS)
    for r in rows.values():
        assert r["measured"] and r["unit (n)"] == "prompts (4)"
        assert r["direction holds"].startswith("not resolved (2 of 2 pairs")        # 4 prompts: fewer than 20
    assert rows["admission-acceptmoe-reads"]["ours"].startswith("vs Standard SD (survival admission) ")


def test_a_method_list_without_admission_is_refused(capsys):
    with pytest.raises(SystemExit) as exc:
        table1_commands.admission_main(["--methods", "standard-sd", "acceptmoe"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "error: --methods standard-sd acceptmoe: none admits draft nodes" in err[-1]
