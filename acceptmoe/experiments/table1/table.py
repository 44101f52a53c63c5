"""Table 1 from saved results only: accuracy per (model, task) and method, B0, tau, paired intervals.

`build_table1(run_dir)` reads `config.json`, `samples.jsonl` and `b0/`; nothing is recomputed from models.
tau is pooled (total accepted tokens / total target steps over the pair's prompts), never a mean of
per-prompt ratios; the mean set size is pooled over every block and layer the same way.
Per pair, only prompts finished by every configured method are used (a partial run says so). Reported:
- accuracy (%) per pair and method, the unweighted mean over pairs, and its relative change vs Vanilla AR;
- accuracy difference from Standard SD (pp) with a paired bootstrap interval over prompts per pair, and for
  the mean over pairs a stratified bootstrap (prompts resampled within each pair);
- tau (accepted tokens per target step, pooled over prompts) and the mean set size over blocks and layers.
Written as `table1.md`, `table1.csv` (one record per pair and method) and `table1.tex` into the run folder.

    >>> from acceptmoe.experiments.table1.table import build_table1
    >>> t = build_table1("results/reference/table1/tiny-20261201-170239-999833")    # write_table1 also writes
    >>> round(t.means["standard-sd"]["accuracy"], 1), [pair.task for pair in t.b0][:2], t.incomplete
    (85.7, ['tiny-gsm', 'tiny-math'], [])
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from acceptmoe.evals.stats import bootstrap_mean, clustered_mean_diff, mean_of_strata_diff, paired_bootstrap_diff
from acceptmoe.evals.tasks import get_task
from acceptmoe.methods import BASELINE, METHODS, REFERENCE

from ..spine import render
from ..spine.b0 import B0Decision
from ..spine.config import BootstrapConfig, Pair, from_saved
from ..spine.layout import RunPaths
from ..spine.runs import NothingToTabulate, SampleLog
from .config import Table1Config

OUTPUTS = ("table1.md", "table1.csv", "table1.tex")
PLUS = "+"        # the task suffix of a pair graded on EvalPlus's extra tests


@dataclass
class Table1:
    cfg: Table1Config
    records: list[dict]           # one per (model, task, method), in table order
    means: dict[str, dict]        # method -> mean accuracy, rel. change vs AR, mean diff vs SD and interval
    b0: dict[Pair, B0Decision]    # the saved B0 decisions
    incomplete: list[str]         # pairs with fewer finished prompts than evaluation prompts
    plus: list[dict]              # HumanEval+ / MBPP+ records (same replies graded on the plus tests)
    aligned: dict[Pair, dict[str, list[dict]]] = field(default_factory=dict)   # pair -> method -> rows, same prompts


def methods_of(cfg: Table1Config) -> list[str]:
    return [m for m in METHODS if m in cfg.methods]


def group_rows(rows) -> dict[Pair, dict[str, dict[str, dict]]]:
    """pair -> method -> example_id -> row."""
    out: dict = {}
    for r in rows:
        out.setdefault(Pair(r["model"], r["task"]), {}).setdefault(r["method"], {})[r["example_id"]] = r
    return out


def common_ids(by_method: dict[str, dict[str, dict]], methods: list[str]) -> list[str]:
    """Example ids finished by every method, in evaluation order."""
    sets = [set(by_method.get(m, {})) for m in methods]
    ids = set.intersection(*sets) if sets else set()
    first = by_method[methods[0]] if ids else {}
    return sorted(ids, key=lambda i: first[i]["index"])


def pooled(rows: list[dict], num: str, den: str) -> float | None:
    d = sum(r[den] for r in rows)
    return sum(r[num] for r in rows) / d if d else None


def pooled_tau(rows: list[dict]) -> float | None:
    """Accepted tokens per target step over a pair's prompts: total accepted / total steps (pooled)."""
    return pooled(rows, "accepted", "steps")


def pair_records(model: str, task: str, rows: dict[str, list[dict]], bs: BootstrapConfig,
                 b0: B0Decision | None) -> list[dict]:
    """One record per method for one pair; rows[method] are aligned on the same prompts."""
    kw = dict(n_resamples=bs.resamples, confidence=bs.confidence, seed=bs.seed)
    base = np.array([r["correct"] for r in rows[BASELINE]], float) if BASELINE in rows else None
    out = []
    for method, rs in rows.items():
        correct = np.array([r["correct"] for r in rs], float)
        acc = bootstrap_mean(correct, **kw)
        diff = paired_bootstrap_diff(correct, base, **kw) if base is not None else None
        spec = METHODS[method]
        out.append({
            "model": model, "task": task, "method": method, "n": len(rs),
            "accuracy": 100 * acc.estimate, "accuracy_low": 100 * acc.low, "accuracy_high": 100 * acc.high,
            "diff_vs_standard_sd": 100 * diff.estimate if diff else None,
            "diff_low": 100 * diff.low if diff else None, "diff_high": 100 * diff.high if diff else None,
            "tau": pooled_tau(rs) if spec.speculates else None,
            "mean_set_size": pooled(rs, "set_size_sum", "block_layers") if spec.speculates else None,
            "mean_routed_union": pooled(rs, "routed_union_sum", "block_layers") if spec.speculates else None,
            "budget": rs[0]["budget"] if spec.needs_budget else None,
            "b0": b0.b0 if b0 else None})
    return out


def strata_diff(a: list[np.ndarray], b: list[np.ndarray], bs: BootstrapConfig) -> tuple[float, float, float]:
    """The mean over pairs of a's accuracy minus b's (pp; a[p][i], b[p][i]: 0/1 outcomes on pair p's prompt i),
    with its interval (`stats.mean_of_strata_diff`: the paired proportions' score interval for equally large
    pairs, else prompts resampled within each pair)."""
    iv = mean_of_strata_diff(a, b, bs.resamples, bs.confidence, bs.seed)
    return 100 * iv.estimate, 100 * iv.low, 100 * iv.high


def paired_mean_diff(aligned: dict, method: str, against: str, bs: BootstrapConfig) -> tuple[float, float, float]:
    """Mean over pairs of `method`'s accuracy minus `against`'s (pp), with the stratified paired interval."""
    def outcomes(m):
        return [np.array([r["correct"] for r in rows[m]], float) for rows in aligned.values()]
    return strata_diff(outcomes(method), outcomes(against), bs)


def mean_diff(t: Table1, method: str, against: str) -> tuple[float, float, float]:
    """`paired_mean_diff` over a built table's pairs, e.g. AcceptMoE-B minus MoE-Spec at B0."""
    return paired_mean_diff(t.aligned, method, against, t.cfg.world.bootstrap)


def mean_records(records: list[dict], aligned: dict, methods: list[str], bs: BootstrapConfig) -> dict[str, dict]:
    means: dict[str, dict] = {}
    for m in methods:
        accs = [r["accuracy"] for r in records if r["method"] == m]
        means[m] = {"accuracy": float(np.mean(accs)) if accs else None, "pairs": len(accs)}
    ref = means.get(REFERENCE, {}).get("accuracy")
    for m in methods:
        acc = means[m]["accuracy"]
        means[m]["rel_change_vs_vanilla_ar"] = 100 * (acc - ref) / ref if ref and acc is not None else None
        if BASELINE in methods and aligned:
            est, lo, hi = paired_mean_diff(aligned, m, BASELINE, bs)
            means[m].update(diff_vs_standard_sd=est, diff_low=lo, diff_high=hi)
    return means


def worlds_interval(diffs: dict[str, list[np.ndarray]], bs: BootstrapConfig) -> tuple[float, float]:
    """The interval (pp) of the mean difference over worlds, resampling worlds, then prompts within each drawn
    world's pairs (`stats.clustered_mean_diff`). diffs: world -> per-pair arrays of paired differences of 0/1
    outcomes (-1, 0, 1)."""
    iv = clustered_mean_diff(diffs, bs.resamples, bs.confidence, bs.seed)
    return 100 * iv.low, 100 * iv.high


def for_model(t: Table1, model: str) -> Table1:
    """The built table's view of one model's pairs (one world of a worlds run), its means recomputed over
    them by the same rules."""
    records = [r for r in t.records if r["model"] == model]
    aligned = {p: rows for p, rows in t.aligned.items() if p.model == model}
    return Table1(t.cfg, records, mean_records(records, aligned, methods_of(t.cfg), t.cfg.world.bootstrap),
                  {p: d for p, d in t.b0.items() if p.model == model},
                  [i for i in t.incomplete if i.startswith(f"{model}|")],
                  [r for r in t.plus if r["model"] == model], aligned)


def build_table1(run_dir: str | Path) -> Table1:
    run_dir = Path(run_dir)
    cfg = from_saved(Table1Config, json.loads((run_dir / "config.json").read_text())["config"])
    methods, paths = methods_of(cfg), RunPaths(run_dir)
    grouped = group_rows(SampleLog(paths.samples))
    records, aligned, b0s, incomplete, plus = [], {}, {}, [], []
    for pair in cfg.world.pairs():
        by_method = grouped.get(pair, {})
        ids = common_ids(by_method, methods)
        b0 = B0Decision.load(paths.b0(pair)) if paths.b0(pair).is_file() else None
        if b0:
            b0s[pair] = b0
        expected = max([len(v) for v in by_method.values()] + [cfg.limit or 0])
        if len(ids) < expected or not ids:
            incomplete.append(f"{pair.model}|{pair.task}: {len(ids)} prompts finished by every method")
        if not ids:
            continue
        rows = {m: [by_method[m][i] for i in ids] for m in methods}
        aligned[pair] = rows
        records += pair_records(pair.model, pair.task, rows, cfg.world.bootstrap, b0)
        if "plus" in get_task(pair.task).test_sets:       # HumanEval+ / MBPP+: the same replies, more tests
            plus_rows = {m: [{**r, "correct": bool(r["score_details"]["plus"])} for r in rs] for m, rs in rows.items()}
            plus += pair_records(pair.model, pair.task + PLUS, plus_rows, cfg.world.bootstrap, b0)
    return Table1(cfg, records, mean_records(records, aligned, methods, cfg.world.bootstrap), b0s, incomplete, plus,
                  aligned)


# ----- rendering -----
def fmt(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def interval(est: float | None, low: float | None, high: float | None) -> str:
    return "-" if est is None else f"{est:+.1f} [{low:+.1f}, {high:+.1f}]"


def accuracy_rows(t: Table1) -> tuple[list[str], list[list[str]], int]:
    methods = methods_of(t.cfg)
    header = ["Model", "Task", "B0", "n"] + [METHODS[m].label for m in methods]
    rows = []
    for pair in _pairs(t):
        recs = {r["method"]: r for r in t.records if (r["model"], r["task"]) == pair}
        first = next(iter(recs.values()))
        rows.append([*pair, fmt(first["b0"], 0), str(first["n"])] + [fmt(recs[m]["accuracy"]) for m in methods])
    summary = len(rows)
    rows.append(["Mean (unweighted)", "", "", ""] + [fmt(t.means[m]["accuracy"]) for m in methods])
    rows.append(["Rel. change vs Vanilla AR (%)", "", "", ""]
                + [fmt(t.means[m]["rel_change_vs_vanilla_ar"]) for m in methods])
    return header, rows, summary


def difference_rows(t: Table1) -> tuple[list[str], list[list[str]], int]:
    methods = [m for m in methods_of(t.cfg) if m != BASELINE]
    header = ["Model", "Task"] + [METHODS[m].label for m in methods]
    rows = []
    for pair in _pairs(t):
        recs = {r["method"]: r for r in t.records if (r["model"], r["task"]) == pair}
        rows.append([*pair] + [interval(recs[m]["diff_vs_standard_sd"], recs[m]["diff_low"], recs[m]["diff_high"])
                               for m in methods])
    summary = len(rows)
    rows.append(["Mean (unweighted)", ""] + [interval(t.means[m].get("diff_vs_standard_sd"), t.means[m].get("diff_low"),
                                                      t.means[m].get("diff_high")) for m in methods])
    return header, rows, summary


def speed_rows(t: Table1) -> tuple[list[str], list[list[str]]]:
    methods = [m for m in methods_of(t.cfg) if METHODS[m].speculates]
    header = ["Model", "Task"] + [f"{METHODS[m].label} tau / set" for m in methods]
    rows = []
    for pair in _pairs(t):
        recs = {r["method"]: r for r in t.records if (r["model"], r["task"]) == pair}
        rows.append([*pair] + [f"{fmt(recs[m]['tau'], 2)} / {fmt(recs[m]['mean_set_size'])}" for m in methods])
    return header, rows


def b0_rows(t: Table1) -> tuple[list[str], list[list[str]]]:
    header = ["Model", "Task", "B0", "mean set size", "interval", "prompts", "rule"]
    rows = []
    for pair, d in t.b0.items():
        rule = ("fallback (first interval crossed x.5)" if d.first_crossed else "first prompts")
        rule += f"; only {d.available_prompts} evaluation prompts" if d.limited else ""
        rows.append([pair.model, pair.task, str(d.b0), fmt(d.mean_set_size, 2), f"[{d.low:.2f}, {d.high:.2f}]",
                     str(d.n_prompts), rule])
    return header, rows


def plus_rows(t: Table1) -> tuple[list[str], list[list[str]]]:
    methods = methods_of(t.cfg)
    header = ["Model", "Task"] + [METHODS[m].label for m in methods]
    rows = []
    for pair in dict.fromkeys((r["model"], r["task"]) for r in t.plus):
        recs = {r["method"]: r for r in t.plus if (r["model"], r["task"]) == pair}
        rows.append([*pair] + [fmt(recs[m]["accuracy"]) + ("" if m == BASELINE else f" ({recs[m]['diff_vs_standard_sd']:+.1f})")
                               for m in methods])
    return header, rows


def _pairs(t: Table1) -> list[tuple[str, str]]:
    return list(dict.fromkeys((r["model"], r["task"]) for r in t.records))


def render_markdown(t: Table1) -> str:
    conf = f"{t.cfg.world.bootstrap.confidence:.0%}"
    h1, r1, _ = accuracy_rows(t)
    h2, r2, _ = difference_rows(t)
    h3, r3 = speed_rows(t)
    parts = [f"# Table 1 ({t.cfg.world.preset} preset)\n",
             render.markdown(h1, r1, f"Accuracy (%), {t.cfg.world.sampling.describe()}; B0 = matched budget of "
                                     f"the fixed-budget methods"),
             render.markdown(h2, r2, f"Accuracy difference from Standard SD (pp) with paired {conf} intervals "
                                     f"over prompts: Newcombe's paired score interval (mean: over the pooled "
                                     f"prompts of equally large pairs, else the bootstrap stratified by pair)"),
             render.markdown(h3, r3, "Mean accepted length tau (tokens per target step) / mean set size "
                                     "(experts per layer, over every block and layer)")]
    if t.b0:
        h4, r4 = b0_rows(t)
        parts.append(render.markdown(h4, r4, f"B0: mean AcceptMoE set size with its {conf} bootstrap interval "
                                             f"over prompts, rounded half up (from traces only)"))
    if t.plus:
        h5, r5 = plus_rows(t)
        parts.append(render.markdown(h5, r5, "EvalPlus: the same replies graded on HumanEval+ / MBPP+ (base + plus "
                                             "tests), accuracy (%) and difference from Standard SD (pp). The paper's "
                                             "HumanEval and MBPP numbers compare with the base rows above"))
    if t.incomplete:
        parts.append("Incomplete pairs (table uses prompts finished by every method): " + "; ".join(t.incomplete) + "\n")
    return "\n".join(parts)


def render_latex(t: Table1) -> str:
    h1, r1, s1 = accuracy_rows(t)
    h2, r2, s2 = difference_rows(t)
    return (render.latex(h1, r1, f"Accuracy (%) per model and task ({t.cfg.world.preset} preset).", "tab:table1-accuracy", s1)
            + "\n" + render.latex(h2, r2, f"Accuracy difference from Standard SD (pp), paired bootstrap "
                                          f"{t.cfg.world.bootstrap.confidence:.0%} intervals.", "tab:table1-diff", s2))


def csv_records(t: Table1) -> list[dict]:
    keys = list(t.records[0]) + ["rel_change_vs_vanilla_ar"] if t.records else []
    out = [{k: r.get(k) for k in keys} for r in t.records + t.plus]
    for m, mean in t.means.items():
        out.append({k: None for k in keys} | {"model": "mean", "task": "all", "method": m, "n": mean["pairs"],
                                             **{k: v for k, v in mean.items() if k in keys}})
    return out


def write_table1(run_dir: str | Path) -> str:
    """Build Table 1 from the run folder's saved results, write md/csv/tex there; returns the Markdown."""
    run_dir = Path(run_dir)
    t = build_table1(run_dir)
    if not t.records:
        raise NothingToTabulate(f"{run_dir} holds no pair finished by every method: nothing to tabulate yet")
    md = render_markdown(t)
    (run_dir / "table1.md").write_text(md)
    (run_dir / "table1.csv").write_text(render.csv_text(csv_records(t)))
    (run_dir / "table1.tex").write_text(render_latex(t))
    return md
