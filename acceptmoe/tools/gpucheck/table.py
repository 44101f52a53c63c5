"""gpu-check's Markdown: one row per check (verdict and what decided it), the replay, the timing rows, then the
experts kernel's check and timing (`gpu_experts`)."""
from __future__ import annotations


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def _kernel(c: dict) -> str:
    text = (f"{len(c['cases'])} cases; largest score difference {c['max_diff_units']:.0f} units; "
            f"{c['sets_differing']} sets differ from torch's")
    if c["first_difference"]:
        text += f"; first: {c['first_difference']}"
    spec = c.get("specialisations")
    if spec:
        warps = ", ".join(f"{n} at {w} warps" for w, n in spec["warps"].items())
        text += f"; {spec['compiled']} specialisations compiled ({warps}), {spec['spilling']} spilling"
    return text


def _graphs(c: dict) -> str:
    s = c["steps"]
    falls = "; ".join(f"{k}: {why}" for k, why in s["fallbacks"].items()) or "none"
    errs = [r["rel_max_err"] for r in c["rows"] if "rel_max_err" in r]
    return (f"{s['captured']} captured, {s['replays']} replays, fallbacks: {falls}"
            + (f"; replay vs static max rel err {max(errs):.1e} (tolerance {c['tolerance']:.0e})" if errs else ""))


def _pinned(c: dict) -> str:
    ratio = c["pinned_bytes"] / c["host_expert_bytes"] if c["host_expert_bytes"] else float("inf")
    gbps = "n/a" if c["load_gb_per_s"] is None else f"{c['load_gb_per_s']:.1f} GB/s"
    return (f"pinned {_mb(c['pinned_bytes'])} for {_mb(c['host_expert_bytes'])} of experts ({ratio:.3f}x); "
            f"{c['loads']} loads, {gbps}")


DETAILS = {
    "kernel": _kernel,
    "kernel-reference": lambda c: f"{c['rows_differing']} of {c['rows']} rows differ (informational: the reference "
                                  "takes torch's exp on the CPU)",
    "experts": lambda c: f"max rel err {max(x['rel_max_err'] for x in c['cases']):.1e}",
    "parity": lambda c: f"max rel err {max(r['rel_max_err'] for r in c['rows']):.1e}",
    "graphs": _graphs,
    "layer-graphs": _graphs,
    "lossless": lambda c: f"{sum(r['equal'] for r in c['rows'])} of {len(c['rows'])} generations equal",
    "pinned": _pinned,
    "sglang-sampling": lambda c: (f"{c['samples']} samples, chi2 {c['chi2']} on {c['df']} df, p {c['p']:.3g} "
                                  f"(alpha {c['alpha']}; 80 % power at TV {c['min_detectable_tv']}); empirical TV "
                                  f"{c['empirical_tv']}" if "chi2" in c else
                                  f"sampled outside the target's support: {c['outside_support']}"),
    "replay": lambda c: ", ".join(f"{v}: {m}" for v, m in c["counters"].items()),
}


def detail(check: dict) -> str:
    """One line of what decided a check's verdict (a check not run, or skipped, gives its reason)."""
    if "reason" in check:
        return check["reason"]
    return DETAILS[check["check"]](check) if check["check"] in DETAILS else ""


def table(results: dict) -> str:
    from acceptmoe.tools.gpu_experts import check_table, timing_table
    lines = ["| check | verdict | detail |", "|---|---|---|"]
    lines += [f"| {c['check']} | {c['verdict']} | {detail(c)} |" for c in results["checks"]]
    if results.get("replay"):
        bounds = [k for k in results["replay"][0] if k.startswith("bound_ms_")]
        lines += ["", "| replay store | variant | experts/layer | hit rate | ms / target pass | "
                  + " | ".join(b.removeprefix("bound_ms_") + " bound ms" for b in bounds) + " |",
                  "|---|---|---:|---:|---:|" + "---:|" * len(bounds)]
        for r in results["replay"]:
            lines.append(f"| {r['store']} | {r['variant']} | {r['experts_per_layer']:.1f} | {r['hit_rate']:.3f} | "
                         f"{r['ms_per_pass']:.3f} | " + " | ".join(f"{r[b]:.3f}" for b in bounds) + " |")
    lines += ["", "| workload | step | ms | aten ops / step | tokens/s | tau |", "|---|---|---:|---:|---:|---:|"]
    for workload, rows in results["timing"].items():
        for r in rows:
            tps = f"{r['tokens_per_s']:.1f}" if "tokens_per_s" in r else ""
            tau = f"{r['tau']:.2f}" if "tau" in r else ""
            lines.append(f"| {workload} | {r['step']} | {r['ms']:.3f} | {r['aten_ops']:.0f} | {tps} | {tau} |")
    lines += [s for c in results["checks"] if c["check"] == "experts" and "cases" in c for s in ("", check_table(c))]
    lines += ["", timing_table(results["experts_timing"])] if results.get("experts_timing") else []
    return "\n".join(lines)
