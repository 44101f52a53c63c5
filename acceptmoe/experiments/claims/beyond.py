"""What a batch study's run says about the findings beyond the paper (`spine.paper.BEYOND`): one `Measured` per
finding, each (draft shape, batch size) cell, or each draft shape, judged on its own 95 % interval. Every number
comes from the batch study's record builders (`batch.records`), never recomputed here.

    batch_rows(run_dir) -> [Measured, ...]
"""
from __future__ import annotations

from pathlib import Path

from acceptmoe.methods import B0_METHOD, Variant

from ..batch import records as batch_records
from .measured import CI, Measured, engine_measures, meta, where, world_of
from .verdict import Evidence

SELF = Variant(B0_METHOD).name          # AcceptMoE (the self-sized method whose traces decide B0)


def _cells(recs: list[dict], key: str, label) -> tuple[Evidence, ...]:
    return tuple(Evidence(r[key], r[f"{key}_low"], r[f"{key}_high"], CI, label(r), r["unit"], r.get(f"{key}_n", r.get("n", r.get("prompts"))))
                 for r in recs if r.get(key) is not None)


def _measured(claim_id: str, ours: str, span: str, cells: tuple[Evidence, ...], base: dict) -> Measured:
    """A per-cell finding: every cell judged on its own interval, the row naming their unit and smallest n."""
    return Measured(claim_id, "", ours, span, None, None, None, pairs=cells, unit=cells[0].unit,
                    n=min(c.n for c in cells), **base)


def _ours(cells: tuple[Evidence, ...]) -> str:
    return "; ".join(f"{c.label} {c.estimate:.3f}" for c in cells)


def _span(cells: tuple[Evidence, ...]) -> str:
    return f"per cell {min(c.low for c in cells):.3f} to {max(c.high for c in cells):.3f} (95 %)"


def batch_rows(run: Path) -> list[Measured]:
    cfg, rows = batch_records.load(Path(run))
    work = [r for r in batch_records.work_records(cfg, rows) if r["variant"] == SELF]
    quality = [r for r in batch_records.quality_records(Path(run), cfg) if r["variant"] == SELF]
    world = meta(run)["world"]
    base = dict(measures=f"{engine_measures(world)}: recorded verify passes composed into batches, counted",
                run=where(run), world=world_of(world))
    out = []
    for claim_id, key in (("batch-reads", "reads_ratio"), ("batch-pool-loads", "loads_ratio")):
        cells = _cells(work, key, lambda r: f"{r['draft']} B={r['batch']}")
        if cells:
            out.append(_measured(claim_id, _ours(cells), _span(cells), cells, base))
    cells = _cells(quality, "tau_ratio", lambda r: r["draft"])
    if cells:
        out.append(_measured("batch-tau-parity", _ours(cells), _span(cells), cells, base))
    ran = dict(base, measures=f"{engine_measures(world)}: every draw verified together (Engine.generate_batch)")
    label = lambda r: f"{r['draft']} B={r['batch']}"                     # noqa: E731
    shared = [r for r in batch_records.work_records(cfg, rows) if r.get("reads_vs_alone") is not None
              and r["batch"] > 1]
    cells = _cells(shared, "reads_vs_alone", label)
    if cells:
        out.append(_measured("batch-shared-reads", _ours(cells), _span(cells), cells, ran))
    acc = [r for r in batch_records.batched_quality(cfg, rows) if r["batch"] > 1]
    cells = _cells(acc, "accuracy_diff", label)
    if cells:
        out.append(_measured("batch-shared-accuracy", "; ".join(f"{c.label} {c.estimate:+.1f} pp" for c in cells),
                             f"per cell {min(c.low for c in cells):+.1f} to {max(c.high for c in cells):+.1f} pp (95 %)",
                             cells, ran))
    return out
