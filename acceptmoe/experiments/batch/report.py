"""The batch study's tables (Markdown, CSV, LaTeX) and figure, from saved files only (`records`).

    text, written = write_outputs("results/batch-study/tiny/<run-id>")    # also behind ./reproduce.sh tables
"""
from __future__ import annotations

from pathlib import Path

from acceptmoe.costs.shapes import GPUS

from ..spine import render
from .records import BASE, batched_quality, load, quality_records, work_records

STEM = "batch-study"


def _f(x, d: int = 2) -> str:
    return "-" if x is None else f"{x:.{d}f}"


def _iv(r: dict, key: str) -> str:
    if r.get(key) is None:
        return "-"
    return f"{r[key]:.3f} [{r[key + '_low']:.3f}, {r[key + '_high']:.3f}]"


def _over(n: int, unit: str = "prompts", rule: str | None = None) -> str:
    """What an interval resampled: '128 prompts', with the rule where the row's intervals differ in it."""
    return f"{n} {unit}" + (f" ({RULES.get(rule, rule)})" if rule else "")


RULES = {"newcombe-paired-score": "Newcombe", "percentile-bootstrap": "bootstrap", "subset-bootstrap": "subset bootstrap"}


def work_table(recs: list[dict], slots: int, whole_key: str) -> tuple[list[str], list[list[str]]]:
    header = ["draft", "B", "method", "passes", "active / pass", "union / layer", "sharing", "experts read / token",
              "read vs SD [95%]", f"X={slots} loads vs SD [95%]", f"whole-pass bound vs SD [95%] ({whole_key})",
              "95% over"]
    rows = [[r["draft"], str(r["batch"]), r["method"], r["run"], _f(r["mean_active"], 1), _f(r["union_per_layer"], 1),
             _f(r["sharing"]), _f(r["reads_per_token"]), _iv(r, "reads_ratio"), _iv(r, "loads_ratio"),
             _iv(r, f"whole_ratio_{whole_key}"), _over(r["n"], r["unit"])] for r in recs]
    return header, rows


def bytes_table(recs: list[dict], shapes: tuple[str, ...], slots: int) -> tuple[list[str], list[list[str]]]:
    header = ["draft", "B", "method", "shape", "expert MB read / token (count)", f"MB moved / token, X={slots} (count)",
              *[f"{g.name} bound ms / token" for g in GPUS], f"{GPUS[-1].name} X={slots} bound ms / token"]
    rows = []
    for r in recs:
        for s in shapes:
            rows.append([r["draft"], str(r["batch"]), r["method"], s, _f(r[f"read_mb_per_token_{s}"], 1),
                         _f(r[f"moved_mb_per_token_{s}_x{slots}"], 1),
                         *[_f(r.get(f"whole_ms_per_token_{s}_{g.name}"), 3) for g in GPUS],
                         _f(r.get(f"whole_ms_per_token_{s}_{GPUS[-1].name}_x{slots}"), 3)])
    return header, rows


def quality_table(recs: list[dict]) -> tuple[list[str], list[list[str]]]:
    header = ["draft", "variant", "B0", "tau", "tau vs SD [95%]", "accuracy (%)", "vs SD (pp) [95%]", "95% over",
              "set size"]
    rows = [[r["draft"], r["variant"], r["b0"] or "-", _f(r["tau"]),
             _iv(r, "tau_ratio"), _f(r["accuracy"], 1),
             "-" if r.get("accuracy_diff") is None else
             f"{r['accuracy_diff']:+.1f} [{r['accuracy_diff_low']:+.1f}, {r['accuracy_diff_high']:+.1f}]",
             _over(r["n"], r["unit"]), _f(r["mean_set_size"], 1)] for r in recs]
    return header, rows


def batched_table(recs: list[dict]) -> tuple[list[str], list[list[str]]]:
    header = ["draft", "B", "variant", "vs", "draws", "disagreeing", "accuracy (%)", "vs (pp) [95%]", "95% over",
              "tau vs [95%]", "95% over", "set size", "set size (vs)"]
    rows = [[r["draft"], str(r["batch"]), r["variant"], r["versus"], str(r["draws"]), str(r["discordant"]),
             _f(r["accuracy"], 1),
             f"{r['accuracy_diff']:+.1f} [{r['accuracy_diff_low']:+.1f}, {r['accuracy_diff_high']:+.1f}]",
             _over(r["accuracy_diff_n"], r["unit"], r["accuracy_diff_rule"]), _iv(r, "tau_ratio"),
             _over(r["tau_ratio_n"], r["unit"]), _f(r["set_size"], 1), _f(r["set_size_versus"], 1)] for r in recs]
    return header, rows


NOTES = ("Requests: each draw is B distinct prompts of the pool, drawn without replacement; the draws are the same "
         "for every method (paired). Batched pass k holds the k-th verify pass of every request that has one "
         "(requests start together; a finished one drops out). Per layer the pass reads the union of its requests' "
         "expert sets ('union / layer'; 'sharing' = the requests' own set sizes summed over the union's size). "
         "'experts read / token': experts read (the union) per MoE layer per output token; 'X loads': the X-slot "
         "pool's loads, counted by the engine's offloaded store (the pool empty at each draw's start). Ratios are "
         "per output token vs Standard SD with 95 % intervals over prompts ('95% over': the pool's prompts, "
         "resampled within tasks): draws share prompts, so each resample adds a resample of the draws to a "
         "resample of the prompts, each prompt weighing by how the draws' expected counts move without it, from "
         "its batch-1 recordings (docs/batch-study.md, 'Intervals'). Bytes are counts (experts x a shape's "
         "bytes per expert, scaled to its MoE layers), not measured times; the whole-pass bound adds the non-expert "
         "weights and the draft once per step and the KV cache once per request (context 512), at each GPU's "
         "published bandwidth. 'passes': 'composed' from batch-1 recordings, or 'batched' (the method's sets depend "
         "on the pass, so every draw ran together through the engine's batched verify pass; its counts' dependence "
         "on prompts is read through the method it is alone, on the same draws). "
         "GPT-OSS-120B's rows apply its bytes per expert to the tiny world's top-8 unions: "
         "its own router picks 4 experts per token, so its unions would be smaller. No batched pass was timed.")


BATCHED = ("'disagreeing': drawn prompts whose grade differed between the two in some draw. Accuracy is over the "
           "prompts drawn, each once (its rate over the draws that held it); its difference has Newcombe's paired "
           "score interval where every prompt's rates are 0 or 1, else a bootstrap over those prompts within tasks. "
           "Tau's ratio is over the pool's prompts, as the work table's ratios are.\n")


def batched_check(rows: list[dict]) -> str:
    """'yes', or each (draft, batch size, method) whose batched run differed from its batch-1 recordings on the first
    draw: how many requests differed and whether the union it read still equalled the composed one."""
    misses = []
    for row in rows:
        for v, c in row["draws"][0]["methods"].items():
            if "batched_same" in c and (c["batched_same"] != row["batch"] or c["batched_reads"] != c["reads"]):
                misses.append(f"{v} at {row['tree']} B={row['batch']}: {row['batch'] - c['batched_same']} of "
                              f"{row['batch']} requests differed, union "
                              f"{'equal' if c['batched_reads'] == c['reads'] else 'different'}")
    return "yes" if not misses else "NO (" + "; ".join(misses) + ")"


def whole_key(cfg) -> str:
    """The whole-pass ratio the main table shows: the second configured shape (Qwen3-30B-A3B by default) at the
    first GPU (H200)."""
    return f"{cfg.shapes_at[min(1, len(cfg.shapes_at) - 1)]}_{GPUS[0].name}"


def tables(run_dir: Path) -> tuple[str, dict[str, list[dict]]]:
    cfg, rows = load(run_dir)
    work, quality, batched = work_records(cfg, rows), quality_records(run_dir, cfg), batched_quality(cfg, rows)
    whole = whole_key(cfg)
    agree = all(r["store_agrees"] for r in work)
    ran = batched_check(rows)
    parts = [f"# Batch study ({cfg.preset} preset): expert work when B requests verify together\n",
             render.markdown(*work_table(work, cfg.slots, whole),
                             "Expert work per batched verify pass, per draft shape and batch size"),
             NOTES + "\n",
             f"Composition check (first draw of every cell): the resident store's count of experts used equals the "
             f"union of the requests' sets, and the full concatenated rows of its first pass count as the packed "
             f"union does: {'yes' if agree else 'NO'}. Batched check (the first draw of every cell, every composed "
             f"method run together through the engine's batched verify pass): every request sent the experts its "
             f"batch-1 recording sent in every pass, and the batched passes read the composed union: {ran}.\n",
             render.markdown(*quality_table(quality), "Tau and accuracy per draft shape (the same generations)"),
             *([render.markdown(*batched_table(batched), "Batch-crediting methods run batched, against the method "
                                "they are at one request per pass (the same draws; intervals over prompts)"), BATCHED]
               if batched else []),
             render.markdown(*bytes_table(work, cfg.shapes_at, cfg.slots),
                             "Bytes per output token at each expert shape (counts) and the whole-pass bound")]
    return "\n".join(parts), {"work": work, "quality": quality, "batched": batched}


def figure(work: list[dict], stem: Path) -> list[Path]:
    """Expert reads per output token vs Standard SD against batch size: one line per method and draft shape,
    95 % intervals over prompts as bars (Standard SD itself, always 1, left out)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    methods = list(dict.fromkeys(r["variant"] for r in work))
    drafts = list(dict.fromkeys(r["draft"] for r in work))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    styles, markers = ("-", "--", ":", "-."), ("s", "o", "^", "D")
    sizes = sorted({r["batch"] for r in work})
    for ax, key, title in ((axes[0], "reads_ratio", "experts read per output token vs Standard SD (resident)"),
                           (axes[1], "loads_ratio", "pool loads per output token vs Standard SD (X-slot pool)")):
        for i, draft in enumerate(drafts):
            for j, variant in enumerate(methods):
                mine = [r for r in work if r["draft"] == draft and r["variant"] == variant and r.get(key) is not None]
                if not mine or variant == BASE:
                    continue
                ys = [r[key] for r in mine]
                err = [[y - r[key + "_low"] for y, r in zip(ys, mine, strict=True)],
                       [r[key + "_high"] - y for y, r in zip(ys, mine, strict=True)]]
                ax.errorbar([r["batch"] for r in mine], ys, yerr=err, capsize=2, color=colours[j % len(colours)],
                            linestyle=styles[i % len(styles)], marker=markers[i % len(markers)],
                            label=f"{mine[0]['method']}, {draft}")
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [str(b) for b in sizes])
        ax.set_xlabel("requests per verify pass (B)")
        ax.set_title(title, fontsize=9)
    axes[0].legend(fontsize=6)
    out = [stem.with_suffix(".png"), stem.with_suffix(".pdf")]
    fig.tight_layout()
    for p in out:
        fig.savefig(p, dpi=150, metadata={"CreationDate": None} if p.suffix == ".pdf" else None)
    plt.close(fig)
    return out


def write_outputs(run_dir: str | Path) -> tuple[str, list[Path]]:
    run_dir = Path(run_dir)
    text, recs = tables(run_dir)
    cfg, _ = load(run_dir)
    written = [run_dir / f"{STEM}.md", run_dir / f"{STEM}.csv", run_dir / f"{STEM}-quality.csv", run_dir / f"{STEM}.tex"]
    written[0].write_text(text)
    written[1].write_text(render.csv_text(recs["work"]))
    written[2].write_text(render.csv_text(recs["quality"]))
    if recs["batched"]:
        written.append(run_dir / f"{STEM}-batched.csv")
        written[-1].write_text(render.csv_text(recs["batched"]))
    header, rows = work_table(recs["work"], cfg.slots, whole_key(cfg))
    written[3].write_text(render.latex(header, rows, "Expert work when B requests verify together (batch study).",
                                       "tab:batch-study"))
    return text, written + figure(recs["work"], run_dir / STEM)


def rebuild(run_dir: str | Path) -> str:
    """`./reproduce.sh tables` (this experiment's record names it): every output again from the saved files;
    returns the Markdown."""
    return write_outputs(Path(run_dir))[0]
