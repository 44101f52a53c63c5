"""The batch study: requests' recorded verify passes composed into batched passes (synthetic routes: the union per
layer, output tokens, drop-out, the store's counts equal to the union and to the full concatenated rows, the
X-slot pool's loads), and `batch-study --limit 1 --batch-sizes 1 4` end to end on the tiny world (a small draft
shape, short replies): the table printed, every speculating method of the registry batched (the batch-crediting
one run batched on every draw, each composed one checked against a real batched run), the claims rows."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import yaml

from acceptmoe.engine.routes import FORMAT, KINDS, Routes
from acceptmoe.experiments.batch.config import composable
from acceptmoe.experiments.batch.compose import Request, StoreCounter, compact, compose, draw_requests
from acceptmoe.experiments.batch.report import write_outputs
from acceptmoe.experiments.claims import table
from acceptmoe.experiments.cli import main
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
    assert all(np.array_equal(a, b) for a, b in zip(draws, draw_requests(10, 4, 2, seed=3)))
    assert not np.array_equal(draws[0], draw_requests(10, 4, 1, seed=4)[0])
    with pytest.raises(ValueError, match="distinct"):
        draw_requests(3, 4, 1, seed=0)


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
    every = {Variant(m).name for m, s in METHODS.items() if s.speculates}
    crediting = {Variant(m).name for m in METHODS if METHODS[m].speculates and not composable(m)}
    assert crediting and all(set(d["methods"]) == every for r in rows for d in r["draws"])
    for r in rows:                                                        # composition == a real batched pass
        first = r["draws"][0]["methods"]
        assert all("batched_same" in first[v] for v in every - crediting)
        for v in (Variant(BASELINE).name, Variant(B0_METHOD).name):       # exact scores: every request the same
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
    recs = table.claim_rows(table.measured([run]))
    for c in BEYOND:
        (row,) = [r for r in recs if r["id"] == c.id]
        assert row["measured"] and row["claim"].startswith("[beyond the paper]")
    summary = json.loads((run / "summary.json").read_text())
    assert summary["batch_sizes"] == [1, 4]


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
