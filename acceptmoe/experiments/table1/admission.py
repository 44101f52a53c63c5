"""`./reproduce.sh admission` (its command in `commands`): AcceptMoE, token-side adaptive verification and their composition side by side
(docs/method.md, "Token-side admission"; beyond the paper).

    ./reproduce.sh admission [--limit N] [--methods ...] [--resume RUN_DIR]

The run is one Table 1 (every rule of it: calibration, the method order, greedy generation, resume) over the
methods compared here: Standard SD, AcceptMoE and every registered method that admits draft nodes (`COMPARED`,
from the registry: `standard-sd-survival`, `standard-sd-prefix`, `acceptmoe-survival`, `acceptmoe-costed`).
Besides Table 1's files it writes `admission.md` and `admission.csv` from the saved rows only (`tables --run`
rebuilds them; a Table 1 run of these methods gets them the same way with `write_admission`):

- per method, pooled over every prompt of every pair: tau (accepted tokens per target step), experts read per
  output token (the verify passes' routed union per MoE layer, summed over passes, over the output tokens: the
  batch study's `reads_per_token`), the expert-union bytes behind them per output token at the target's own
  expert shape (`costs.shapes`: one expert as stored), accuracy (the unweighted mean over pairs) and its
  difference from Standard SD (Table 1's rule: Newcombe's paired interval);
- paired comparisons (`PAIRS`): the experts-read ratio and the tau ratio (each the ratio of pooled ratios,
  `stats.paired_bootstrap_speedup`, prompts resampled within their pair, both methods' rows of a prompt kept
  together) and the accuracy difference (`table.paired_mean_diff`, as Table 1's mean row).

Throughput is not timed here: Table 1 times nothing under a protocol (its decode seconds are unreplicated and
not interleaved); `fig3 --resident-methods ...` and `fig4 --offload-methods ...` time these methods with the
placebo rule. The claims table reads this run's `paired_records` (`claims.read.admission_rows`).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from acceptmoe.costs.shapes import get_shape
from acceptmoe.evals.stats import bootstrap_mean, bootstrap_ratio, paired_bootstrap_speedup
from acceptmoe.methods import B0_METHOD, BASELINE, METHODS, Admission, get_method

from ..spine import render
from ..spine.prompts import resolve_checkpoint
from ..spine.runs import NothingToTabulate
from .table import Table1, build_table1, paired_mean_diff, write_table1

EXPERIMENT = "admission"
OUTPUTS = ("admission.md", "admission.csv")
ADMITTING = tuple(m for m, s in METHODS.items() if s.admits)
COMPARED = (BASELINE, B0_METHOD, *ADMITTING)


def admitting(rule: Admission, restricts: bool) -> str:
    """The registered method with this admission rule that does (AcceptMoE's selector) or does not (Standard
    SD's) restrict experts."""
    return next(m for m, s in METHODS.items() if s.admission is rule and s.restricts == restricts)


SURVIVAL, PREFIX = admitting(Admission.SURVIVAL, False), admitting(Admission.PREFIX, False)   # adaptive verification
COSTED = admitting(Admission.COSTED, True)                                                    # the composition
# (method, against): AcceptMoE over adaptive verification, the composition over either side alone
PAIRS = ((B0_METHOD, SURVIVAL), (B0_METHOD, PREFIX), (COSTED, B0_METHOD), (COSTED, SURVIVAL), (COSTED, PREFIX),
         *((m, BASELINE) for m in (B0_METHOD, *ADMITTING)))
UNIT = "prompts"


def admits_any(methods) -> bool:
    return any(get_method(m).admits for m in methods)


def _columns(t: Table1, method: str) -> dict[str, np.ndarray]:
    """Per prompt of every pair (pairs in order, prompts aligned across methods): the counts the report pools."""
    cols: dict[str, list] = {k: [] for k in ("stratum", "tokens", "reads", "bytes", "accepted", "steps", "correct")}
    for s, (pair, rows) in enumerate(t.aligned.items()):
        expert = _expert_bytes(t, pair.model)
        for r in rows[method]:
            layers = r["block_layers"] / r["blocks"] if r["blocks"] else 1
            cols["stratum"].append(s)
            cols["tokens"].append(r["tokens"])
            cols["reads"].append(r["routed_union_sum"] / layers)
            cols["bytes"].append(r["routed_union_sum"] * expert if expert else np.nan)
            cols["accepted"].append(r["accepted"])
            cols["steps"].append(r["steps"])
            cols["correct"].append(float(r["correct"]))
    return {k: np.array(v, float) for k, v in cols.items()}


def _expert_bytes(t: Table1, model: str) -> int | None:
    """One expert of `model`'s target as stored (`costs.shapes`), None where its folder is not at hand."""
    entry = next(m for m in t.cfg.world.models if m.name == model)
    try:
        return get_shape(str(resolve_checkpoint(entry.target))).stored_bytes()
    except (FileNotFoundError, OSError, ValueError):
        return None


def method_records(t: Table1) -> list[dict]:
    """One record per compared method of the run, pooled over every pair's aligned prompts."""
    bs = t.cfg.world.bootstrap
    kw = dict(n_resamples=bs.resamples, confidence=bs.confidence, seed=bs.seed)
    out = []
    for m in [m for m in COMPARED if m in t.means]:
        c = _columns(t, m)
        strata = c["stratum"]
        rec = {"method": m, "label": METHODS[m].label, "unit": UNIT, "n": int(c["tokens"].size)}
        for key, num, den in (("tau", "accepted", "steps"), ("reads_per_token", "reads", "tokens"),
                              ("mb_per_token", "bytes", "tokens")):
            if np.isnan(c[num]).any():
                rec.update({key: None, f"{key}_low": None, f"{key}_high": None})
                continue
            scale = 1e-6 if key == "mb_per_token" else 1.0
            iv = bootstrap_ratio(c[num] * scale, c[den], strata=strata, **kw)
            rec.update({key: iv.estimate, f"{key}_low": iv.low, f"{key}_high": iv.high})
        acc = bootstrap_mean(c["correct"], strata=strata, **kw)
        rec.update(accuracy=100 * acc.estimate, accuracy_low=100 * acc.low, accuracy_high=100 * acc.high)
        if m != BASELINE and BASELINE in t.means:
            est, lo, hi = paired_mean_diff(t.aligned, m, BASELINE, bs)
            rec.update(accuracy_diff=est, accuracy_diff_low=lo, accuracy_diff_high=hi)
        out.append(rec)
    return out


def paired_records(t: Table1) -> list[dict]:
    """One record per comparison of `PAIRS` whose two methods the run holds: `method` over `against` on the same
    prompts (ratios of pooled ratios; accuracy in pp)."""
    bs = t.cfg.world.bootstrap
    kw = dict(n_resamples=bs.resamples, confidence=bs.confidence, seed=bs.seed)
    out = []
    for m, against in PAIRS:
        if m not in t.means or against not in t.means:
            continue
        a, b = _columns(t, m), _columns(t, against)
        rec = {"method": m, "against": against, "label": f"{METHODS[m].label} vs {METHODS[against].label}",
               "unit": UNIT, "n": int(a["tokens"].size)}
        for key, num, den in (("reads_ratio", "reads", "tokens"), ("tau_ratio", "accepted", "steps")):
            iv = paired_bootstrap_speedup(a[num], a[den], b[num], b[den], strata=a["stratum"], **kw)
            rec.update({key: iv.estimate, f"{key}_low": iv.low, f"{key}_high": iv.high})
        est, lo, hi = paired_mean_diff(t.aligned, m, against, bs)
        rec.update(accuracy_diff=est, accuracy_diff_low=lo, accuracy_diff_high=hi)
        out.append(rec)
    return out


def _iv(r: dict, key: str, fmt: str = "{:.2f}") -> str:
    if r.get(key) is None:
        return "-"
    return f"{fmt.format(r[key])} [{fmt.format(r[f'{key}_low'])}, {fmt.format(r[f'{key}_high'])}]"


def render_markdown(t: Table1, methods: list[dict], pairs: list[dict]) -> str:
    conf = f"{t.cfg.world.bootstrap.confidence:.0%}"
    n_pairs = len(t.aligned)
    h1 = ["method", f"tau [{conf}]", f"experts read per output token, per layer [{conf}]",
          f"expert-union MB per output token [{conf}]", f"accuracy %, pooled [{conf}]", f"vs Standard SD (pp) [{conf}]",
          "prompts"]
    r1 = [[r["label"], _iv(r, "tau"), _iv(r, "reads_per_token"), _iv(r, "mb_per_token", "{:.3f}"),
           _iv(r, "accuracy", "{:.1f}"), _iv(r, "accuracy_diff", "{:+.1f}"), str(r["n"])] for r in methods]
    h2 = ["comparison", f"experts read per output token, ratio [{conf}]", f"tau ratio [{conf}]",
          f"accuracy difference (pp) [{conf}]", "prompts"]
    r2 = [[r["label"], _iv(r, "reads_ratio", "{:.3f}"), _iv(r, "tau_ratio", "{:.3f}"),
           _iv(r, "accuracy_diff", "{:+.1f}"), str(r["n"])] for r in pairs]
    return "\n".join([
        f"# Token-side admission beside AcceptMoE ({t.cfg.world.preset} preset, {n_pairs} pairs)\n",
        render.markdown(h1, r1, f"Per method, pooled over every prompt of the {n_pairs} pairs "
                                f"({t.cfg.world.sampling.describe()}): ratios of sums with the bootstrap over prompts "
                                f"stratified by pair; expert-union bytes at each target's stored expert shape; "
                                f"accuracy pooled over the prompts, its difference from Standard SD Table 1's paired "
                                f"interval. Throughput: not timed here (fig3 / fig4 with --resident-methods / "
                                f"--offload-methods time these methods)"),
        render.markdown(h2, r2, "Paired over the same prompts: the first method's pooled experts read per output "
                                "token and tau over the second's (prompts resampled within their pair, both rows of a "
                                "prompt together), and the accuracy difference (Table 1's paired interval)")])


def write_admission(run_dir: str | Path) -> str:
    """Table 1 and the side-by-side report from a run folder's saved results; writes both there."""
    run_dir = Path(run_dir)
    table1 = write_table1(run_dir)
    t = build_table1(run_dir)
    if not admits_any(t.means):
        raise NothingToTabulate(f"{run_dir} holds no method that admits draft nodes: nothing to compare")
    methods, pairs = method_records(t), paired_records(t)
    md = render_markdown(t, methods, pairs)
    (run_dir / OUTPUTS[0]).write_text(md)
    (run_dir / OUTPUTS[1]).write_text(render.csv_text([{"table": "method", **r} for r in methods]
                                                      + [{"table": "paired", **r} for r in pairs]))
    return table1 + "\n\n" + md
