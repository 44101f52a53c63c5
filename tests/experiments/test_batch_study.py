"""The batch study: requests' recorded verify passes composed into batched passes (synthetic routes: the union per
layer, output tokens, drop-out, the store's counts equal to the union and to the full concatenated rows, the
X-slot pool's loads); its intervals over prompts (a pool of synthetic requests: the draws' counts checked against
the pool's recordings, wider than resampling draws, a batch-crediting twin's ratio, per-prompt accuracy); and
`batch-study --limit 1 --batch-sizes 1 4` end to end on the tiny world (a small draft shape, short replies): the
table printed, every speculating method of the registry batched (the batch-crediting one run batched on every
draw, each composed one checked against a real batched run), every interval's unit and n, the claims rows."""
from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import yaml

from acceptmoe.cli import main
from acceptmoe.engine.routes import FORMAT, KINDS, Routes
from acceptmoe.evals.stats import paired_bootstrap_speedup
from acceptmoe.experiments.batch import records
from acceptmoe.experiments.batch.compose import Request, StoreCounter, compact, compose, draw_requests
from acceptmoe.experiments.batch.config import composable, load_batch_config
from acceptmoe.experiments.batch.intervals import Cell, prompt_accuracy
from acceptmoe.experiments.batch.prompts import PoolPrompts, Recording
from acceptmoe.experiments.batch.records import load
from acceptmoe.experiments.batch.report import write_outputs
from acceptmoe.experiments.claims import table
from acceptmoe.experiments.spine.paper import BEYOND
from acceptmoe.experiments.spine.runs import REPO, SampleLog
from acceptmoe.methods import B0_METHOD, BASELINE, METHODS, Variant, alone_twin

E, L, K = 128, 4, 8


def _routes(gen: torch.Generator, verify: int, T: int = 6) -> Routes:
    """A prefill, then `verify` verify passes of T tokens, each routing every token to K random experts."""
    kinds = ["prefill"] + ["verify"] * verify
    ids = [torch.stack([torch.randperm(E, generator=gen)[:K] for _ in range(T * L)]).view(T, L, K) for _ in kinds]
    a = {"kind": np.array([KINDS.index(k) for k in kinds], np.uint8), "tokens": np.full(len(kinds), T, np.int32),
         "output": np.array([0] + [1 + p % 3 for p in range(verify)], np.int32),
         "expert_s": np.zeros(len(kinds)), "ids": torch.cat(ids).numpy().astype(np.uint8),
         "weights": np.full((T * len(kinds), L, K), 1 / K, np.float16)}
    return Routes({"format": FORMAT, "num_experts": E, "layers": list(range(L)), "top_k": K}, a)


def test_composition_is_the_union_the_store_reads_and_the_pool_loads():
    gen = torch.Generator().manual_seed(0)
    reqs = [Request.of(_routes(gen, n)) for n in (3, 1, 2)]
    assert [r.passes for r in reqs] == [3, 1, 2]                          # the prefill is not a verify pass
    passes = compose(reqs)
    assert [len(p.members) for p in passes] == [3, 2, 1]                  # a finished request drops out
    for p in passes:
        for layer in range(L):
            by_hand = set().union(*(set(r.ids[p.index][layer].reshape(-1).tolist()) for r in p.members))
            assert set(np.flatnonzero(p.union()[layer])) == by_hand
            assert torch.equal(p.rows_of(layer), torch.cat([r.ids[p.index][layer] for r in p.members]))
            assert set(compact(p.union()[layer], K).reshape(-1).tolist()) == by_hand
        assert p.output == sum(r.output[p.index] for r in p.members)
    counter = StoreCounter(L, E, K, slots=E)                              # X = E: nothing is ever evicted
    packed, full = counter.count(passes, resident=True), counter.count(passes, resident=True, full=True)
    assert packed == full                                                 # the union counts as the full rows do
    assert packed["reads"] == packed["store_reads"] == sum(int(p.union().sum()) for p in passes)
    assert packed["loads"] == int(np.logical_or.reduce([p.union() for p in passes]).sum())  # each expert once
    small = StoreCounter(L, E, K, slots=16).count(passes)                 # a small pool evicts and loads again
    assert small["reads"] == packed["reads"] and small["loads"] > packed["loads"]
    assert small["loads"] + small["pool_hits"] == small["reads"]


def test_draws_are_distinct_seeded_and_independent_of_their_number():
    draws = draw_requests(10, 4, 5, seed=3)
    assert all(len(set(d.tolist())) == 4 for d in draws)
    assert all(np.array_equal(a, b) for a, b in zip(draws, draw_requests(10, 4, 2, seed=3), strict=False))
    assert not np.array_equal(draws[0], draw_requests(10, 4, 1, seed=4)[0])
    with pytest.raises(ValueError, match="distinct"):
        draw_requests(3, 4, 1, seed=0)


def _cell_of(n: int = 24, batch: int = 12, draws: int = 16, shuffle: bool = False):
    """A pool of n synthetic requests of two tasks per composed variant (Standard SD's sets larger than
    AcceptMoE's, the same lengths), `draws` draws of `batch` counted by `compose`, and a batch-crediting variant
    whose counts are AcceptMoE's; with `shuffle` the pool's recordings are not in the draws' order."""
    gen = torch.Generator().manual_seed(1)
    lengths = [1 + int(x) for x in torch.randint(0, 6, (n,), generator=gen)]
    reqs = {"standard-sd": [Request.of(_routes(gen, p, T=6)) for p in lengths],
            "acceptmoe": [Request.of(_routes(gen, p, T=2)) for p in lengths]}
    rows = []
    for chosen in draw_requests(n, batch, draws, seed=0):
        per = {}
        for v, rs in reqs.items():
            passes = compose([rs[i] for i in chosen])
            out = sum(p.output for p in passes)
            per[v] = {"reads": sum(int(p.union().sum()) for p in passes), "output": out, "passes": len(passes),
                      "active": sum(len(p.members) for p in passes),
                      "quality": {"accepted": out, "steps": sum(rs[i].passes for i in chosen),
                                  "correct_each": [int(i) % 3 > 0 for i in chosen]}}
            per[v]["loads"] = per[v]["reads"]
        per["acceptmoe-shared"] = json.loads(json.dumps(per["acceptmoe"]))
        rows.append({"prompts": [int(i) for i in chosen], "methods": per})
    order = np.random.default_rng(0).permutation(n) if shuffle else np.arange(n)
    recs = {v: Recording.of([(rs[i].masks, np.array(rs[i].output, float)) for i in order],
                            [{"accepted": sum(rs[i].output), "steps": rs[i].passes} for i in order])
            for v, rs in reqs.items()}
    pool = PoolPrompts([("tiny", "ab"[int(i) % 2], int(i)) for i in order], recs)
    cfg = SimpleNamespace(world=SimpleNamespace(bootstrap=SimpleNamespace(confidence=0.95, seed=0)),
                          bootstrap_resamples=2000)
    return Cell(cfg, {"batch": batch, "draws": rows}, pool)


def test_intervals_resample_the_pools_prompts_not_the_draws():
    """Draws of half the pool share prompts: the interval over prompts is wider than the draws' bootstrap, on the
    same estimate; a batch-crediting variant counted as its twin is 1 with no width; a pool whose recordings do
    not give the counted draws is refused."""
    cell = _cell_of()
    iv = cell.ratio("acceptmoe", "reads", "output", "standard-sd")
    counts = [cell.counts(v, k) for v, k in (("acceptmoe", "reads"), ("acceptmoe", "output"),
                                             ("standard-sd", "reads"), ("standard-sd", "output"))]
    old = paired_bootstrap_speedup(*counts, n_resamples=2000)
    assert iv.method == "subset-bootstrap" and iv.n == cell.prompts == 24
    assert iv.estimate == pytest.approx(old.estimate) and iv.low < iv.estimate < iv.high
    assert iv.high - iv.low > 1.5 * (old.high - old.low)
    twin = cell.ratio("acceptmoe-shared", "reads", "output", "acceptmoe")
    assert twin.low == twin.estimate == twin.high == pytest.approx(1.0)
    assert cell.ratio("acceptmoe-shared", "accepted", "steps", "standard-sd").n == 24
    with pytest.raises(ValueError, match="do not give its counted draws"):
        _cell_of(shuffle=True)


def test_accuracy_is_per_prompt_with_the_paired_rule():
    """Each drawn prompt once, its rate over the draws holding it: Newcombe's interval while every rate is 0 or 1
    (none disagreeing still has a width), the bootstrap over prompts once one prompt's grade varies by draw."""
    cell = _cell_of()
    same = prompt_accuracy(cell, "acceptmoe-shared", "acceptmoe")
    assert same.diff.method == "newcombe-paired-score" and same.discordant == 0
    assert same.diff.low < 0 < same.diff.high and same.prompts == same.diff.n <= 24
    first = cell.draws[0]["methods"]["acceptmoe-shared"]["quality"]["correct_each"]
    first[0] = 1 - first[0]                                  # one request's grade differs in one draw only
    varied = prompt_accuracy(cell, "acceptmoe-shared", "acceptmoe")
    assert varied.diff.method == "percentile-bootstrap" and varied.discordant == 1
    assert varied.accuracy != varied.versus == same.versus


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """`batch-study --limit 1 --batch-sizes 1 4` on the tiny world with a 2/2/3 draft and 16-token replies."""
    root = tmp_path_factory.mktemp("batch")
    preset = yaml.safe_load((REPO / "configs" / "presets" / "tiny.yaml").read_text())
    preset = {k: v for k, v in preset.items() if k not in ("table1", "throughput", "calibration-study")}
    preset.update(generation={"max_new_tokens": 16}, calibration={"prompts": 1}, b0={"resamples": 200},
                  bootstrap={"resamples": 200}, **{"batch-study": {"draws": 3, "bootstrap_resamples": 200}})
    (root / "tiny.yaml").write_text(yaml.safe_dump(preset))
    argv = ["batch-study", "--preset", str(root / "tiny.yaml"), "--limit", "1", "--batch-sizes", "1", "4",
            "--trees", "2/2/3", "--out", str(root / "results")]
    return root, argv


def test_batch_study_end_to_end(study, capsys):
    root, argv = study
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "Expert work per batched verify pass" in out and "Composition check" in out
    (run,) = (root / "results" / "batch-study" / "tiny").iterdir()
    rows = list(SampleLog(run / "samples.jsonl"))
    assert [r["batch"] for r in rows] == [1, 4] and all(r["store_agrees"] for r in rows)
    every = {Variant(m).name for m, s in METHODS.items() if s.speculates}     # the YAML's: admitting ones too
    crediting = {Variant(m).name for m in METHODS if METHODS[m].speculates and not composable(m)}
    assert crediting and all(set(d["methods"]) == every for r in rows for d in r["draws"])
    for r in rows:                                                        # composition == a real batched pass
        first = r["draws"][0]["methods"]
        assert all("batched_same" in first[v] for v in every - crediting)
        admitting = [Variant(m).name for m, s in METHODS.items() if s.admits]
        for v in (Variant(BASELINE).name, Variant(B0_METHOD).name, *admitting):   # every request as it ran alone
            assert first[v]["batched_same"] == r["batch"] and first[v]["batched_reads"] == first[v]["reads"]
        for v in crediting:                                               # at B = 1 it is the method it extends
            (m,) = [m for m in METHODS if Variant(m).name == v]
            if r["batch"] == 1:
                assert all(d["methods"][v]["reads"] == d["methods"][Variant(alone_twin(m)).name]["reads"]
                           for d in r["draws"])
    text = (run / "batch-study.md").read_text()
    assert "union does: yes." in text and "read the composed union: " in text
    assert "Batch-crediting methods run batched" in text
    md = (run / "batch-study.md").read_bytes()
    assert write_outputs(run)[0].encode() == md                           # rebuilt from saved files alone
    csv = (run / "batch-study.csv").read_text()
    assert "reads_ratio_low" in csv and "whole_ratio_qwen3-30b-a3b_H200" in csv
    assert "| 95% over" in text and "4 prompts" in text                 # every interval names its unit and n
    cfg, loaded = load(run)
    work = records.work_records(cfg, loaded)
    assert {(r["unit"], r["n"]) for r in work} == {("prompts", 4)}
    for r in (x for x in work if x["run"] == "batched" and x["batch"] == 1):   # its own twin at B = 1
        (alone,) = [x for x in work if x["variant"] == r["versus"] and x["batch"] == 1 and x["tree"] == r["tree"]]
        assert (r["reads_ratio_low"], r["reads_ratio_high"]) == (alone["reads_ratio_low"], alone["reads_ratio_high"])
    for r in records.batched_quality(cfg, loaded):
        assert r["unit"] == "prompts" and r["tau_ratio_n"] == 4 and r["accuracy_diff_n"] == r["prompts"] <= 4
        assert r["accuracy_diff_rule"] in ("newcombe-paired-score", "percentile-bootstrap")
    recs = table.claim_rows(table.measured([run]))
    for c in (c for c in BEYOND if c.command == "batch-study"):      # the divergence report's are its own run's
        (row,) = [r for r in recs if r["id"] == c.id]
        assert row["measured"] and row["claim"].startswith("[beyond the paper]")
    summary = json.loads((run / "summary.json").read_text())
    assert summary["batch_sizes"] == [1, 4]


def test_the_default_methods_are_every_speculating_method_in_registry_order():
    """configs/experiments/batch-study.yaml names every speculating method of the registry, the token-side
    admitting ones included (composed from batch-1 routes: a request's admission never reads another's)."""
    cfg = load_batch_config("tiny")
    assert cfg.method_names() == tuple(m for m, s in METHODS.items() if s.speculates)
    assert all(composable(m) for m, s in METHODS.items() if s.admits)
    assert max(cfg.batch_sizes) == 256 and cfg.limit * len(cfg.world.tasks) >= 2 * max(cfg.batch_sizes)


def test_bad_options_are_one_error_line(study, capsys):
    root, argv = study
    assert main([*argv[:5], "--limit", "1", "--batch-sizes", "8"]) == 2
    assert "error: " in capsys.readouterr().err
    assert main([*argv[:5], "--limit", "1", "--batch-sizes", "1", "--trees", "2/2"]) == 2
    assert "num_steps/topk/num_draft_tokens" in capsys.readouterr().err
    assert main([*argv[:5], "--limit", "1", "--batch-sizes", "1", "--engine", "sglang"]) == 2
    assert "use --engine native" in capsys.readouterr().err
    assert main([*argv[:5], "--limit", "1", "--batch-sizes", "1", "--methods", "standard-sd", "acceptmoe-shared"]) == 2
    assert "add acceptmoe" in capsys.readouterr().err


def test_a_batch_crediting_method_is_paired_with_what_it_is_alone():
    crediting = [m for m in METHODS if METHODS[m].speculates and not composable(m)]
    assert crediting
    for m in crediting:
        other = alone_twin(m)
        assert other is not None and composable(other)
        assert METHODS[other].score is METHODS[m].score.alone and METHODS[other].sizing is METHODS[m].sizing
    assert all(alone_twin(m) is None for m in METHODS if METHODS[m].speculates and composable(m))
