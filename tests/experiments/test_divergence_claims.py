"""The claims rows a divergence run speaks to (`divergence-acceptmoe`, `divergence-vs-fixed`, `divergence-accuracy`):
on synthetic rows in a real run folder, each verdict follows its interval (yes, no, not resolved on too few
prompts), the paired records pair by prompt (Newcombe's score interval for accuracy, the bootstrap for TV), and
the committed reference run's rows carry its report's own numbers."""
from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from acceptmoe.cli import main
from acceptmoe.evals import stats
from acceptmoe.experiments.claims import table
from acceptmoe.experiments.claims.beyond import divergence_rows, fixed_baselines
from acceptmoe.experiments.divergence import report
from acceptmoe.experiments.divergence.config import load_divergence_config
from acceptmoe.experiments.spine.paper import TV_TOLERANCE, claim
from acceptmoe.experiments.spine.runs import REPO, SampleLog, open_run, unit_key

TASKS = ("tiny-gsm", "tiny-math", "tiny-humaneval", "tiny-mbpp")
METHODS = ("standard-sd", "count-b", "moe-spec", "acceptmoe")
IDS = ("divergence-acceptmoe", "divergence-vs-fixed", "divergence-accuracy")


def _run(tmp_path: Path, per_task: int, tv: dict[str, float], wrong: dict[str, int]) -> Path:
    """A divergence run folder of synthetic rows: `per_task` prompts per task, each method's TV around `tv[m]`
    (a prompt-dependent wiggle), its first `wrong[m]` prompts of each task graded wrong."""
    cfg = load_divergence_config("tiny", {"methods": list(METHODS[1:]), "prompts": per_task,
                                          "bootstrap_resamples": 500})
    run = open_run("divergence", "tiny", cfg, root=tmp_path)
    log = SampleLog(run.path / "samples.jsonl")
    for t in cfg.temperatures:
        for m in METHODS:
            for task in TASKS:
                for i in range(per_task):
                    ex = f"{task}/test/{i}"
                    div = None if m == "standard-sd" else tv[m] * (1 + 0.2 * ((i % 3) - 1))
                    log.append(unit_key("tiny", task, t, m, ex),
                               {"model": "tiny", "task": task, "temperature": t, "method": m, "example_id": ex,
                                "correct": i >= wrong.get(m, 0), "tokens": 20, "accepted": 16, "steps": 4,
                                "positions": 20, "kl": None if div is None else 2 * div, "tv": div})
    return run.path


def _verdicts(run: Path) -> dict[str, dict]:
    return {r["id"]: r for r in table.claim_rows(divergence_rows(run)) if r["id"] in IDS}


def test_verdicts_follow_the_intervals(tmp_path):
    rows = _verdicts(_run(tmp_path / "a", 6, {"count-b": 0.1, "moe-spec": 0.03, "acceptmoe": 0.004}, {}))
    assert set(rows) == set(IDS) and all(r["measured"] and r["unit (n)"] == "prompts (24)" for r in rows.values())
    assert rows["divergence-acceptmoe"]["direction holds"] == "yes (all 2 pairs)"
    assert rows["divergence-vs-fixed"]["direction holds"] == "yes (all 4 pairs)"
    assert rows["divergence-vs-fixed"]["ours"].startswith("Count-B T=0.6 -0.0960; Count-B T=1.0 -0.0960; MoE-Spec")
    # equal outcomes on 24 prompts: Newcombe's interval still has a width, wider than 1 pp: not resolved, never yes
    assert rows["divergence-accuracy"]["direction holds"].startswith("not resolved")
    assert rows["divergence-accuracy"]["ours"] == "T=0.6 +0.0 pp; T=1.0 +0.0 pp (paired over prompts)"
    for r in rows.values():
        assert r["claim"].startswith("[beyond the paper]") and r["paper"] == claim(r["id"]).paper


def test_the_opposite_reads_no_and_too_few_prompts_read_not_resolved(tmp_path):
    far = {"count-b": 0.1, "moe-spec": 0.005, "acceptmoe": 0.05}
    rows = _verdicts(_run(tmp_path / "b", 6, far, {"acceptmoe": 3}))
    assert rows["divergence-acceptmoe"]["direction holds"] == "no (2 of 2 pairs: T=0.6, T=1.0)"
    assert rows["divergence-vs-fixed"]["direction holds"] == ("no (2 of 4 pairs: MoE-Spec T=0.6, MoE-Spec T=1.0)")
    assert rows["divergence-accuracy"]["direction holds"] == "no (2 of 2 pairs: T=0.6, T=1.0)"   # -50 pp
    few = _verdicts(_run(tmp_path / "c", 4, {"count-b": 0.1, "moe-spec": 0.03, "acceptmoe": 0.004}, {}))
    assert {r["unit (n)"] for r in few.values()} == {"prompts (16)"}                      # 16 < MIN_UNITS
    assert all(r["direction holds"].startswith("not resolved") for r in few.values())


def test_paired_records_pair_by_prompt(tmp_path):
    run = _run(tmp_path / "d", 6, {"count-b": 0.1, "moe-spec": 0.03, "acceptmoe": 0.004}, {"count-b": 2})
    cfg, rows = report.load(run)
    assert fixed_baselines(cfg.method_names()) == ["count-b", "moe-spec"]
    dropped = [r for r in rows if not (r["method"] == "count-b" and r["example_id"] == "tiny-gsm/test/0")]
    recs = report.paired(dropped, cfg, "acceptmoe", "count-b")
    assert [(r["temperature"], r["prompts"]) for r in recs] == [(0.6, 23), (1.0, 23)]   # only prompts both ran
    rec = recs[0]
    mine = sorted((r for r in dropped if r["temperature"] == 0.6 and r["method"] in ("acceptmoe", "count-b")),
                  key=lambda r: (r["task"], r["example_id"]))
    a = [float(r["correct"]) for r in mine if r["method"] == "acceptmoe" and r["example_id"] != "tiny-gsm/test/0"]
    b = [float(r["correct"]) for r in mine if r["method"] == "count-b"]
    want = stats.paired_proportions(a, b)
    assert rec["accuracy_diff_rule"] == "newcombe-paired-score"
    assert (rec["accuracy_diff"], rec["accuracy_diff_low"]) == pytest.approx((100 * want.estimate, 100 * want.low))
    assert rec["tv_diff"] == pytest.approx(sum(x["tv"] for x in mine if x["method"] == "acceptmoe"
                                               and x["example_id"] != "tiny-gsm/test/0") / 23
                                           - sum(x["tv"] for x in mine if x["method"] == "count-b") / 23)
    sd = report.paired(rows, cfg, "acceptmoe", "standard-sd")
    assert all("tv_diff" not in r and r["prompts"] == 24 for r in sd)                  # natural routing: no TV


REFERENCE = sorted((REPO / "results" / "reference" / "divergence").glob("*/config.json"))


@pytest.mark.skipif(not REFERENCE, reason="no committed divergence reference run")
def test_the_reference_rows_are_the_reports_own_numbers(tmp_path):
    run = REFERENCE[-1].parent
    out = tmp_path / "claims"
    assert main(["claims", "--run", str(run), "--out", str(out)]) == 0
    recs = {r["id"]: r for r in csv.DictReader(io.StringIO((out / "claims.csv").read_text())) if r["id"] in IDS}
    assert set(recs) == set(IDS) and all(r["run"] == str(run.relative_to(REPO)) for r in recs.values())
    md = (run / "divergence.md").read_text()
    for t in ("0.6", "1.0"):
        line = next(x for x in md.splitlines() if x.startswith(f"| {t} | acceptmoe |"))
        tv = line.split(" | ")[4].split(" ")[0]
        assert f"T={t} {tv}" in recs["divergence-acceptmoe"]["ours"]
    assert claim("divergence-acceptmoe").expect.threshold == TV_TOLERANCE
