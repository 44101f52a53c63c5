"""The claims table: every claim of the paper (`spine.paper.CLAIMS`), then the findings beyond it (`spine.paper.BEYOND`,
marked "[beyond the paper]"), the paper's value, ours, whether the
paper's direction holds and what was measured, from saved run folders only.

    runs = default_runs()                        # the newest reference run of each experiment
    text = write_claims(runs, out_dir)           # claims.md, claims.csv, claims.tex; returns the Markdown

Rows follow the registry's order; a claim reported per part (pruning) has one row per part. A claim no given
run speaks to gets a row naming the command that produces it; the throughput claims also get one for the
replay at the paper's expert shape. The worlds column is the spread of a claim's estimate across
independently trained tiny worlds: a worlds run (`./reproduce.sh worlds`) adds one row per Table 1 claim
across its worlds (mean, worlds x prompts interval for a paired difference, each world's estimate). Whether
the direction holds is `claims.verdict` on the row's interval: yes, no, or not resolved.
"""
from __future__ import annotations

import re
from pathlib import Path

from acceptmoe.errors import UserError
from acceptmoe.evals.stats import MIN_UNITS

from ..spine import render
from ..spine.catalog import claimed
from ..spine.paper import BEYOND, CLAIMS, Claim, Expect, Part
from ..spine.runs import REPO, RunFolderError, recorded_experiment
from .measured import ENGINE, REPLAY, Measured, where
from .read import READERS, REPLAY_HINT, claims_with_replay
from .verdict import verdict

REFERENCE_RUNS = REPO / "results" / "reference"
OUTPUTS = ("claims.md", "claims.csv", "claims.tex")
HEADER = ["id", "claim", "paper", "ours", "95% interval / spread", "unit (n)", "direction holds",
          "the paper's direction", "measures", "worlds", "run"]
ONE_WORLD = "1 world (the worlds study is not run)"
ACROSS_BELOW = "1 world (across worlds: the claim's worlds row)"
TABLE1_ONLY = "1 world (the worlds study runs Table 1 only)"


# ----- which runs -----
def _stamp(run: Path) -> str:
    m = re.search(r"\d{8}-\d{6}", run.name)
    return m.group(0) if m else run.name


def default_runs(root: Path = REFERENCE_RUNS) -> list[Path]:
    """The newest run folder (by the time stamp in its name) of each experiment the claims read by default (the
    experiments' records say which: `claims=`, `spine.catalog.claimed`)."""
    out = []
    experiments = claimed()
    for experiment in experiments:
        runs = [p.parent for p in (root / experiment).glob("*/config.json")]
        if runs:
            out.append(max(runs, key=lambda r: (_stamp(r), r.name)))
    if not out:
        raise UserError(f"no run folders under {root} ({', '.join(experiments)}): run one of those "
                        f"commands first, or name run folders with --run RUN_DIR")
    return out


def experiment_with_claims(run: Path) -> str:
    if not Path(run).is_dir():
        raise RunFolderError(f"--run {run}: no such folder; pass a run folder an experiment command wrote, e.g. "
                             f"results/reference/table1/<run-id>")
    name = recorded_experiment(run)
    if name not in READERS:
        raise UserError(f"--run {run}: experiment {name!r} speaks to no claim of the paper; the claims table reads "
                        f"runs of {', '.join(READERS)}")
    return name


# ----- directions -----
def holds(expect: Expect, m: Measured) -> str:
    """The "direction holds" cell: `claims.verdict` on the measurement's interval (per pair or per step where it
    carries them)."""
    return verdict(expect, m.evidence, list(m.pairs), list(m.steps))


# ----- the rows -----
def measured(runs: list[Path]) -> list[Measured]:
    out = []
    for run in runs:
        out += READERS[experiment_with_claims(run)](Path(run))
    return out


def worlds_cell(group: list[Measured], across: bool = False, studied: bool = False) -> str:
    """The spread of the estimate across trained worlds: a worlds run's row gives each world's estimate;
    otherwise runs of distinct worlds measuring the same thing. across: a worlds row exists for the claim;
    studied: a worlds run was read at all."""
    spread = next((m.spread for m in group if m.spread), ())
    if spread:
        return f"{len(spread)} worlds: {min(spread):.3g} to {max(spread):.3g}"
    if any(m.note.startswith("across") for m in group):
        return f"{group[0].world.split(' (')[0]}"
    per_world: dict[str, float | None] = {}
    for m in group:
        per_world.setdefault(m.world, m.estimate)
    if len(per_world) <= 1:
        return ACROSS_BELOW if across else TABLE1_ONLY if studied else ONE_WORLD
    vals = [v for v in per_world.values() if v is not None]
    return f"{len(per_world)} worlds" + (f": {min(vals):.3g} to {max(vals):.3g}" if vals else "")


def _parts(c: Claim) -> list[Part | None]:
    return list(c.parts) if c.split else [None]


def claim_rows(found: list[Measured]) -> list[dict]:
    """One record per (claim, part, measurement), every claim of the registry present, in its order."""
    out = []
    studied = any(m.worlds for m in found)
    for c in CLAIMS + BEYOND:
        for part in _parts(c):
            name = part.name if part else ""
            expect = part.expect if part else c.expect
            mine = [m for m in found if m.claim == c.id and m.part == name]
            text = f"[beyond the paper] {c.text}" if c.beyond else c.text
            base = {"id": c.id + (f" / {name}" if name else ""), "claim": (text.partition(":")[0] + f": {name}") if name else text,
                    "paper": part.paper if part else c.paper, "the paper's direction": expect.words}
            across = any(m.worlds for m in mine)
            for m in mine:
                group = [x for x in mine if x.kind == m.kind and x.note == m.note]
                out.append({**base, "claim": base["claim"] + (f" ({m.note})" if m.note else ""), "ours": m.ours,
                            "95% interval / spread": m.interval, "unit (n)": m.units,
                            "direction holds": holds(expect, m),
                            "measures": m.measures, "worlds": worlds_cell(group, across, studied), "run": m.run,
                            "estimate": m.estimate, "measured": True})
            kinds = {m.kind for m in mine if not m.note}
            wanted = [(ENGINE, f"needs ./reproduce.sh {c.command}")]
            if c in claims_with_replay():
                wanted.append((REPLAY, f"needs {REPLAY_HINT}"))
            for kind, how in wanted:
                if kind not in kinds:
                    what = "tiny engine" if kind == ENGINE else "expert-work replay at the paper's shape"
                    out.append({**base, "ours": "not measured (no given run speaks to it)",
                                "95% interval / spread": "-", "unit (n)": "-", "direction holds": "n/a (not measured)",
                                "measures": what, "worlds": "-", "run": how, "estimate": None,
                                "measured": False})
    return out


# ----- rendering -----
def render_markdown(records: list[dict], runs: list[Path]) -> str:
    rows = [[r[h] for h in HEADER] for r in records]
    measured_n = sum(1 for r in records if r["measured"])
    return "\n".join([
        "# The paper's claims beside this reproduction\n",
        "Runs: " + ", ".join(f"`{where(r)}`" for r in runs) + "\n",
        render.markdown(HEADER, rows, f"{len(CLAIMS)} claims (docs/method.md) and {len(BEYOND)} findings beyond the "
                                      f"paper, {len(records)} rows, {measured_n} measured"),
        f"Intervals: 95 %, each over the unit the row names with how many of them (`evals.stats`, one module for "
        f"every rule): paired 0/1 differences by Newcombe's paired score interval; other paired quantities by the "
        f"bootstrap over prompts, stratified by task where a row pools tasks; timed ratios by the two-way "
        f"bootstrap over prompts and repetitions (crossed), the paper's pooled ratio (total tokens over total "
        f"seconds) as the estimate, and judged only beyond the placebo timed in the same run (Standard SD timed "
        f"twice); a worlds row over worlds, then prompts within each. Direction: \"yes\" only when the interval "
        f"excludes the opposite of the paper's direction, \"no\" only when it excludes the paper's direction, "
        f"\"not resolved\" otherwise, and always for a spread, a point estimate or an interval over fewer than "
        f"{MIN_UNITS} units; an equality is judged against its stated margin (docs/method.md), so a wide interval "
        f"never reads \"yes\"; a claim the paper makes of every pair is judged pair by pair where each pair's "
        f"interval rests on enough units, else on the interval pooled over the pairs (the cell says so). \"tiny "
        f"engine on CPU\": the embedded tiny world on this project's engine; \"expert-work replay\": the tiny "
        f"world's recorded routes re-executed at the named model's expert shape, the routes named.\n"])


def csv_records(records: list[dict]) -> list[dict]:
    return [{k: r[k] for k in HEADER} | {"estimate": r["estimate"]} for r in records]


def render_latex(records: list[dict]) -> str:
    keep = ["id", "paper", "ours", "95% interval / spread", "unit (n)", "direction holds", "measures"]
    return render.latex(keep, [[r[h] for h in keep] for r in records],
                        "The paper's claims beside this reproduction.", "tab:claims")


def write_claims(runs: list[Path], out: Path) -> str:
    """Build the claims table from the runs' saved files; write claims.{md,csv,tex} into `out`."""
    if not runs:
        raise UserError("no run folders given: pass --run RUN_DIR (or none, for results/reference/)")
    records = claim_rows(measured(runs))
    md = render_markdown(records, runs)
    out.mkdir(parents=True, exist_ok=True)
    (out / "claims.md").write_text(md)
    (out / "claims.csv").write_text(render.csv_text(csv_records(records)))
    (out / "claims.tex").write_text(render_latex(records))
    return md
