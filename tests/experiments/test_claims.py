"""`./reproduce.sh claims` on the committed reference runs (with or without a committed replay) and on a small
real replay made here: same bytes twice, every claim present, numbers equal to the runs' own tables, claims
without their run name the command, bad input is one `error:` line."""
from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pytest

from acceptmoe.cli import main
from acceptmoe.errors import UserError
from acceptmoe.evals.stats import MIN_UNITS
from acceptmoe.experiments.claims import table
from acceptmoe.experiments.claims.measured import Measured
from acceptmoe.experiments.claims.verdict import CI, Evidence, judge, verdict
from acceptmoe.experiments.spine.paper import BEYOND, CLAIMS, Expect, docs_table, margins_table
from acceptmoe.experiments.spine.runs import REPO, SampleLog, open_run

REFERENCE = REPO / "results" / "reference"


def _records(out: Path) -> list[dict]:
    return list(csv.DictReader(io.StringIO((out / "claims.csv").read_text())))


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("claims")
    assert main(["claims", "--out", str(out)]) == 0
    return out, (out / "claims.md").read_text()


def test_the_committed_claims_table_rebuilds_byte_for_byte(reference):
    """results/reference/claims/ is `./reproduce.sh claims --out results/reference/claims` on the committed runs."""
    out, _ = reference
    for name in table.OUTPUTS:
        assert (REFERENCE / "claims" / name).read_bytes() == (out / name).read_bytes(), name


def test_docs_table_is_the_registry():
    text = (REPO / "docs" / "method.md").read_text()
    section = text.split("## The paper's claims (the reproduction targets)\n\n", 1)[1]
    assert section.startswith(docs_table())
    assert margins_table() in section                        # every margin the verdicts use, with its source
    assert [c.id for c in CLAIMS] == ["accuracy-vs-sd", "self-vs-fixed-b0", "matched-budget", "matched-budget-gap", "self-vs-best-fixed",
                                      "b0-range", "tau-parity", "tau-parity-moe-spec", "resident-throughput",
                                      "resident-all-pairs", "offload-throughput", "offload-vs-ar", "offload-sd-vs-ar",
                                      "stall-share", "h2d-traffic", "hit-rate", "sd-vs-ar-offload-traffic", "pruning",
                                      "small-budget-loss"]


def test_rebuilds_the_same_bytes_and_every_claim_appears(reference, tmp_path, capsys):
    out, md = reference
    again = tmp_path / "again"
    assert main(["claims", "--out", str(again)]) == 0
    assert md in capsys.readouterr().out                                  # printed
    for name in table.OUTPUTS:
        assert (again / name).read_bytes() == (out / name).read_bytes(), name
    recs = _records(out)
    assert len(recs) >= 10
    ids = {r["id"].split(" / ")[0] for r in recs}
    assert ids == {c.id for c in CLAIMS + BEYOND}
    beyond = [r for r in recs if r["id"] in {c.id for c in BEYOND}]         # marked, and named by their command
    assert beyond and all(r["claim"].startswith("[beyond the paper] ") for r in beyond)
    assert {r["id"] for r in recs} >= {"pruning / traffic", "pruning / hit rate", "pruning / throughput",
                                       "pruning / accuracy"}
    # the worlds study: every Table 1 claim has a row across its 3 worlds; other claims say it runs Table 1 only
    across = [r for r in recs if "(across 3 worlds)" in r["claim"]]
    assert {r["id"] for r in across} >= {"accuracy-vs-sd", "matched-budget", "matched-budget-gap", "tau-parity"}
    assert all(r["worlds"].startswith("3 worlds") for r in across)
    assert next(r for r in across if r["id"] == "accuracy-vs-sd")["worlds"].startswith("3 worlds: ")
    table1_claims = {r["id"] for r in across}
    assert all(r["worlds"] in (table.ACROSS_BELOW, "-") if r["id"] in table1_claims else
               r["worlds"] in (table.TABLE1_ONLY, "-") for r in recs if r not in across)
    assert "\\begin{tabular}" in (out / "claims.tex").read_text()


def test_accuracy_vs_sd_is_table1s_own_number(reference):
    out, _ = reference
    (run,) = sorted((REFERENCE / "table1").glob("*/config.json"))[-1:]
    t1 = (run.parent / "table1.md").read_text()
    diff = t1.split("Accuracy difference from Standard SD")[1]
    mean_row = next(line for line in diff.splitlines() if line.startswith("| Mean (unweighted)"))
    acceptmoe = [c.strip() for c in mean_row.strip("|").split("|")][-1]           # "-0.5 [-2.0, +1.0]"
    est, iv = acceptmoe.split(" ", 1)
    row = next(r for r in _records(out) if r["id"] == "accuracy-vs-sd")
    assert row["ours"].startswith(f"{est} pp over 4 pairs") and row["95% interval / spread"] == iv
    low, high = (float(x) for x in iv.strip("[]").split(", "))
    want = "yes" if -1 <= low and high <= 1 else "no" if low > 1 or high < -1 else "not resolved"
    assert row["measures"] == "tiny engine on CPU" and row["direction holds"].split(" (")[0] == want
    b0 = next(r for r in _records(out) if r["id"] == "b0-range" and "calibration" not in r["run"])
    decided = [json.loads(p.read_text())["b0"] for p in sorted((run.parent / "b0").rglob("*.json"))]
    assert b0["ours"].startswith(f"{min(decided)} to {max(decided)} experts")


def test_throughput_rows_equal_the_runs_paper_comparison(reference):
    """The resident row is the fig3 run's own pooled ratio and interval (its paper comparison), judged beyond the
    placebo the run timed: "yes" only where the interval excludes 1 and clears the placebo's."""
    out, _ = reference
    recs = _records(out)
    (fig3,) = sorted((REFERENCE / "fig3").glob("*/paper-comparison.md"))[-1:]
    est, low, high = re.search(r"\| (\d\.\d{3})x \[(\d\.\d{3}), (\d\.\d{3})\]", fig3.read_text()).groups()
    res = next(r for r in recs if r["id"] == "resident-throughput" and r["measures"] == "tiny engine on CPU")
    assert res["ours"].startswith(f"{est}x pooled ratio") and res["95% interval / spread"] == f"[{low}, {high}]"
    placebo = [float(x) for x in re.search(r"placebo \[(\d\.\d{3}), (\d\.\d{3})\]", res["ours"]).groups()]
    lo, hi = float(low), float(high)
    want = ("yes" if lo > max(1, placebo[1]) else "no" if hi <= 1 and hi < placebo[0] else "not resolved")
    assert res["direction holds"].split(" (")[0] == want and res["unit (n)"].endswith("(80)")
    replay_rows = [r for r in recs if r["id"] == "resident-throughput" and "replay" in r["measures"]]
    assert len(replay_rows) == 1
    if not list((REFERENCE / "replay").glob("*/config.json")):
        assert replay_rows[0]["run"].startswith("needs ./reproduce.sh replay")
    else:
        assert re.match(r"\[\d\.\d{3}, \d\.\d{3}\]", replay_rows[0]["95% interval / spread"])


def test_the_resident_replay_row_replays_unpruned_routes(reference):
    """Resident AcceptMoE never prunes: its replay row is the recording's AcceptMoE with pruning off, and the
    replay runs no pruned routes on its resident store (they pruned against a pool it does not have)."""
    (run,) = sorted((REFERENCE / "replay").glob("*/config.json"))[-1:]
    from acceptmoe.experiments.replay import report
    recs = report.records(run.parent)
    unpruned = next(r for r in recs if r["store"] == "resident" and r["method"] == "acceptmoe" and not r["prune"])
    row = next(r for r in _records(reference[0]) if r["id"] == "resident-throughput" and "replay" in r["measures"])
    assert row["ours"].startswith(f"{unpruned['speedup_per_token']:.3f}x per output token, resident store")
    assert row["95% interval / spread"] == (f"[{unpruned['speedup_per_token_low']:.3f}, "
                                            f"{unpruned['speedup_per_token_high']:.3f}]")
    assert row["measures"].endswith("routes: AcceptMoE, pruning off")
    assert not [r for r in recs if r["store"] == "resident" and r["prune"]]
    off = next(r for r in _records(reference[0]) if r["id"] == "offload-throughput" and "replay" in r["measures"])
    assert off["measures"].endswith("routes: AcceptMoE, pruned against the recorded pool")


def test_a_claim_without_its_run_names_the_command(tmp_path):
    (run,) = [p.parent for p in sorted((REFERENCE / "table1").glob("*/config.json"))[-1:]]
    table.write_claims([run], tmp_path)
    recs = {r["id"]: r for r in _records(tmp_path) if "replay" not in r["measures"]}
    assert recs["resident-throughput"]["run"] == "needs ./reproduce.sh fig3"
    assert recs["resident-throughput"]["ours"].startswith("not measured")
    assert recs["h2d-traffic"]["run"] == "needs ./reproduce.sh fig5"
    assert recs["accuracy-vs-sd"]["run"].startswith("results/reference/table1/")


def test_bad_input_is_one_error_line(tmp_path, capsys):
    assert main(["claims", "--run", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "is not a run folder" in err
    assert main(["claims", "--run", str(tmp_path / "nope"), "--out", str(tmp_path / "o")]) == 2
    assert "no such folder" in capsys.readouterr().err
    other = tmp_path / "bench"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"experiment": "bench-engine", "config": {}}))
    assert main(["claims", "--run", str(other), "--out", str(tmp_path / "o")]) == 2
    assert "'bench-engine' speaks to no claim of the paper" in capsys.readouterr().err
    with pytest.raises(UserError, match="no run folders under"):
        table.default_runs(tmp_path)
    assert not (tmp_path / "o").exists()


# ----- the verdict rules, each at its boundary -----
EPS = 1e-9


def _ev(low: float, high: float, n: int = 100, placebo=None, label: str = "") -> Evidence:
    return Evidence((low + high) / 2, low, high, CI, label, "prompts", n, placebo)


@pytest.mark.parametrize("low, high, want", [(1.0 + EPS, 1.5, "yes"), (1.0, 1.5, "not resolved"),
                                             (0.5, 1.0, "no"), (0.5, 1.0 + EPS, "not resolved")])
def test_above_reads_yes_only_when_the_interval_excludes_the_opposite(low, high, want):
    assert judge("above", 1.0, 0.0, _ev(low, high)) == want


@pytest.mark.parametrize("low, high, want", [(-1.0, -EPS, "yes"), (-1.0, 0.0, "not resolved"),
                                             (0.0, 1.0, "no"), (-EPS, 1.0, "not resolved")])
def test_below_reads_no_only_when_the_interval_excludes_the_papers_direction(low, high, want):
    assert judge("below", 0.0, 0.0, _ev(low, high)) == want


@pytest.mark.parametrize("low, high, want", [(-1.0, 1.0, "yes"), (-1.0 - EPS, 1.0, "not resolved"),
                                             (-0.2, 1.0 + EPS, "not resolved"), (1.0 + EPS, 2.0, "no"),
                                             (1.0, 2.0, "not resolved"), (-3.0, -1.0 - EPS, "no"),
                                             (-9.0, 9.0, "not resolved")])
def test_an_equality_is_judged_by_its_margin_so_a_wide_interval_is_never_yes(low, high, want):
    assert judge("equivalent", 0.0, 1.0, _ev(low, high)) == want


def test_verdict_cells_every_pair_steps_and_points():
    above = Expect("above", "", 1.0, every_pair=True)
    pairs = lambda *ends: [_ev(lo, hi, label=f"p{i}") for i, (lo, hi) in enumerate(ends)]   # noqa: E731
    assert verdict(above, None, pairs((1.1, 1.2), (1.2, 1.3))) == "yes (all 2 pairs)"
    assert verdict(above, None, pairs((1.1, 1.2), (0.8, 1.0))) == "no (1 of 2 pairs: p1)"
    assert verdict(above, None, pairs((1.1, 1.2), (0.9, 1.1))) == "not resolved (1 of 2 pairs: p1)"
    increasing = Expect("increasing", "")
    assert verdict(increasing, None, steps=[_ev(0.5, 2.0), _ev(0.1, 0.3)]) == "yes (all 2 steps)"
    assert verdict(increasing, None, steps=[_ev(0.5, 2.0), _ev(-0.3, 0.1)]).startswith("not resolved")
    assert verdict(Expect("none", "a size"), Evidence(3.0)) == "n/a (a size)"
    with pytest.raises(ValueError, match="positive margin"):
        Expect("equivalent", "", 0.0, 0.0)


def test_no_verdict_rests_on_a_spread_a_point_or_too_few_units():
    one = Expect("above", "", 1.0)
    assert verdict(one, Evidence(1.2)) == "not resolved (a point estimate, no interval)"
    assert verdict(one, Evidence(1.05, 1.01, 1.13, "spread over repetitions")) == \
        "not resolved (a spread over repetitions, not an interval)"
    assert verdict(one, _ev(1.1, 1.3, n=MIN_UNITS - 1)) == f"not resolved ({MIN_UNITS - 1} prompts, fewer than {MIN_UNITS})"
    assert verdict(one, _ev(1.1, 1.3, n=MIN_UNITS)) == "yes"


def test_an_every_pair_claim_on_small_pairs_is_judged_on_the_pooled_interval():
    above = Expect("above", "", 1.0, every_pair=True)
    small = [_ev(1.1, 1.2, n=5, label="a"), _ev(0.9, 1.3, n=5, label="b")]
    assert verdict(above, _ev(1.05, 1.2, n=40), small) == \
        "yes (pooled over 2 pairs: per pair 5 prompts, fewer than 20)"
    assert verdict(above, _ev(0.95, 1.2, n=40), small).startswith("not resolved (the 95 % interval holds 1)")


def test_a_timed_ratio_counts_only_beyond_its_placebo():
    faster = Expect("above", "", 1.0)
    assert verdict(faster, _ev(1.05, 1.2, placebo=(0.9, 1.1))) == \
        "not resolved (inside the placebo's interval [0.900, 1.100])"
    assert verdict(faster, _ev(1.12, 1.3, placebo=(0.9, 1.1))) == "yes"
    assert verdict(faster, _ev(0.5, 0.85, placebo=(0.9, 1.1))) == "no"
    assert verdict(faster, _ev(0.8, 0.95, placebo=(0.9, 1.1))).startswith("not resolved (inside the placebo")
    below = Expect("below", "", 0.0)
    assert verdict(below, _ev(-3.0, -1.0, placebo=(-1.5, 1.5))).startswith("not resolved (inside the placebo")
    assert verdict(below, _ev(-3.0, -2.0, placebo=(-1.5, 1.5))) == "yes"


def test_worlds_cell():
    m = lambda est: Measured("x", "", "", "", est, None, None)    # noqa: E731
    assert table.worlds_cell([m(1.0)]) == table.ONE_WORLD
    two = [Measured("x", "", "", "", v, None, None, world=w) for v, w in ((0.8, "a"), (1.2, "b"))]
    assert table.worlds_cell(two) == "2 worlds: 0.8 to 1.2"


def test_replay_rows_from_a_small_real_replay(tmp_path):
    """A two-prompt offloaded recording and its replay at Qwen3-30B-A3B's shape (one layer): both throughput
    claims get the replay's per-token speedup with its interval, the H200 expert bytes bound and the paper GPU's
    whole-pass bound, beside the engine's ratio; the resident row replays AcceptMoE's unpruned routes, and the
    pruned routes are not replayed with the resident store."""
    from acceptmoe.experiments.replay.config import load_replay_config
    from acceptmoe.experiments.replay.runner import run_replay
    from acceptmoe.experiments.throughput.config import load_throughput_config
    from acceptmoe.experiments.throughput.runner import run_experiment
    (t1,) = [p.parent for p in sorted((REFERENCE / "table1").glob("*/config.json"))[-1:]]
    cfg = load_throughput_config("tiny", ("offload-timed",), {
        "limit": 2, "budgets_from": str(t1), "world.tasks": ["tiny-gsm"], "world.generation.timed_tokens": 24,
        "prompt_set.order": "index",
        "world.generation.record_routes": True, "world.threads": 1,
        "offload.variants": ["standard-sd", "acceptmoe", {"method": "acceptmoe", "prune": False}],
        "offload.repetitions": 1, "offload.slots": 48})
    rec = open_run("fig4", "tiny", cfg, root=tmp_path / "rec")
    run_experiment(cfg, rec, show_progress=False)
    rcfg = load_replay_config("tiny", {"source": str(rec.path), "shape": "qwen3-30b-a3b", "layers": 1,
                                       "weight_sets": 1, "generations": 2, "passes_per_generation": 3,
                                       "repeats": 1, "world.threads": 1})
    rep = open_run("replay", "tiny", rcfg, root=tmp_path / "rep")
    run_replay(rcfg, rep, show_progress=False)
    out = tmp_path / "claims"
    assert main(["claims", "--run", str(rec.path), "--run", str(rep.path), "--out", str(out)]) == 0
    recs = _records(out)
    for claim_id, routes, gpu in (("resident-throughput", "AcceptMoE, pruning off", "RTX PRO 6000"),
                                  ("offload-throughput", "AcceptMoE, pruned against the recorded pool", "RTX 5090")):
        rows = [r for r in recs if r["id"] == claim_id and r["measures"].startswith("expert-work replay")]
        assert len(rows) == 1, claim_id
        row = rows[0]
        assert row["measures"] == f"expert-work replay at qwen3-30b-a3b's shape (CPU), routes: {routes}"
        assert "x per output token" in row["ours"] and "H200 expert bytes bound" in row["ours"]
        assert f"{gpu} whole-pass bound" in row["ours"]
        assert re.match(r"\[\d+\.\d{3}, \d+\.\d{3}\]", row["95% interval / spread"])
        assert row["direction holds"].split(" ")[0] in ("yes", "no", "not")
    replayed = {(r["store"], r["variant"]) for r in SampleLog(rep.path / "samples.jsonl")}
    assert ("resident", "acceptmoe") not in replayed and ("resident", "acceptmoe-noprune") in replayed
    assert ("offloaded-48", "acceptmoe") in replayed
    engine = [r for r in recs if r["id"] == "offload-throughput" and r["measures"] == "tiny engine on CPU"]
    assert len(engine) == 1 and engine[0]["run"] == str(rec.path)
    assert next(r for r in recs if r["id"] == "resident-throughput" and r["measures"] == "tiny engine")["run"] \
        == "needs ./reproduce.sh fig3"
