"""What a batch study's or a divergence run says about the findings beyond the paper (`spine.paper.BEYOND`): one
`Measured` per finding, each (draft shape, batch size) cell, each draft shape, or each (baseline,) temperature,
judged on its own 95 % interval. Every number comes from the experiments' record builders (`batch.records`,
`divergence.report`, `table1.admission`), never recomputed here.

    batch_rows(run_dir) -> [Measured, ...]
    admission_rows(run_dir) -> [Measured, ...]
    divergence_rows(run_dir) -> [Measured, ...]
"""
from __future__ import annotations

from pathlib import Path

from acceptmoe.methods import B0_METHOD, BASELINE, METHODS, Variant, fixed_twin

from ..batch import records as batch_records
from ..divergence import report as divergence_report
from ..table1 import admission
from ..table1 import table as table1_table
from .measured import CI, Measured, engine_measures, meta, where, world_of
from .verdict import Evidence

SELF = Variant(B0_METHOD).name          # AcceptMoE (the self-sized method whose traces decide B0)
PROMPTS = "prompts"


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


def _temperature(t: float) -> str:
    return f"T={t}"            # as the divergence report writes it


def fixed_baselines(methods: tuple[str, ...]) -> list[str]:
    """The fixed-budget baselines among a run's methods: every fixed-budget method of the paper but AcceptMoE's
    own fixed twin (Count-B, MoE-Spec)."""
    return [m for m in methods if METHODS[m].needs_budget and not METHODS[m].beyond_paper
            and m != fixed_twin(B0_METHOD)]


def divergence_rows(run: Path) -> list[Measured]:
    """AcceptMoE's TV from natural routing per temperature (the report's own records), its TV minus each
    fixed-budget baseline's and its accuracy minus Standard SD's, paired over prompts (`divergence.report.paired`)."""
    cfg, rows = divergence_report.load(Path(run))
    world = meta(run)["world"]
    base = dict(measures=f"{engine_measures(world)}: sampled generations, each verify pass beside an all-experts "
                         f"pass of the same tree", run=where(run), world=world_of(world))
    own = [dict(r, unit=PROMPTS) for r in divergence_report.summarise(rows, cfg) if r["method"] == B0_METHOD]
    vs = [dict(r, unit=PROMPTS) for b in fixed_baselines(cfg.method_names())
          for r in divergence_report.paired(rows, cfg, B0_METHOD, b)]
    acc = [dict(r, unit=PROMPTS) for r in divergence_report.paired(rows, cfg, B0_METHOD, BASELINE)]
    by_temperature = lambda r: _temperature(r["temperature"])                                # noqa: E731
    by_baseline = lambda r: f"{METHODS[r['against']].label} {_temperature(r['temperature'])}"  # noqa: E731
    rows_of = (("divergence-acceptmoe", own, "tv", by_temperature, "{:.4f}", "", " (TV, mean over prompts)"),
               ("divergence-vs-fixed", vs, "tv_diff", by_baseline, "{:+.4f}", "", " (TV difference, paired over prompts)"),
               ("divergence-accuracy", acc, "accuracy_diff", by_temperature, "{:+.1f}", " pp", " (paired over prompts)"))
    out = []
    for claim_id, records, key, label, num, unit, what in rows_of:
        cells = _cells(records, key, label)
        if cells:
            ours = "; ".join(f"{c.label} {num.format(c.estimate)}{unit}" for c in cells) + what
            spread = (f"per cell {num.format(min(c.low for c in cells))} to {num.format(max(c.high for c in cells))}"
                      f"{unit} (95 %)")
            out.append(_measured(claim_id, ours, spread, cells, base))
    return out


# (claim, the comparisons it is judged on: (method, against), each one cell)
ADMISSION_CLAIMS = (("admission-acceptmoe", ((B0_METHOD, admission.SURVIVAL), (B0_METHOD, admission.PREFIX))),
                    ("admission-composition", ((admission.COSTED, B0_METHOD), (admission.COSTED, admission.SURVIVAL))))


def admission_rows(run: Path) -> list[Measured]:
    """AcceptMoE over token-side adaptive verification, and the composition over either side: the experts-read
    ratio and the accuracy difference per comparison, paired over prompts (`table1.admission.paired_records`)."""
    t = table1_table.build_table1(Path(run))
    records = {(r["method"], r["against"]): r for r in admission.paired_records(t)} if t.records else {}
    world = meta(run)["world"]
    base = dict(measures=f"{engine_measures(world)}: greedy generations, every verify pass's routed union counted",
                run=where(run), world=world_of(world))
    label = lambda r: f"vs {METHODS[r['against']].label}"                                     # noqa: E731
    out = []
    for claim, comparisons in ADMISSION_CLAIMS:
        recs = [records[c] for c in comparisons if c in records]
        for suffix, key, num, unit, what in (("reads", "reads_ratio", "{:.3f}", "", " (ratio of experts read per "
                                              "output token, paired over prompts)"),
                                             ("accuracy", "accuracy_diff", "{:+.1f}", " pp", " (paired over prompts)")):
            cells = _cells(recs, key, label)
            if cells:
                ours = "; ".join(f"{c.label} {num.format(c.estimate)}{unit}" for c in cells) + what
                spread = (f"per cell {num.format(min(c.low for c in cells))} to "
                          f"{num.format(max(c.high for c in cells))}{unit} (95 %)")
                out.append(_measured(f"{claim}-{suffix}", ours, spread, cells, base))
    return out
