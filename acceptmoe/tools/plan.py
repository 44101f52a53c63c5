"""`./reproduce.sh plan`: before a long run, what each model of a preset needs for one experiment on each of the
paper's GPUs, and about how long the run takes, from config files alone (runs on a CPU, reads no weights).

    ./reproduce.sh plan --preset paper --experiment fig4 [--json] [--limit N] [--budgets-from TABLE1_RUN] [--gpus N]

One row per (model, GPU): device GB (the largest of the experiment's phases: expert store, other weights,
draft, KV cache), pinned host GB, expert GB (every expert's stored bytes), host peak GB while loading (all from
`costs.fit`, which sizes by `engine.memory`, the rules the stores allocate by), whether the device bytes plus
the runtime reserve fit the GPU's memory, generations and tokens (counted as the runners count them:
calibration, B0's prompts when budgets are not read from a Table 1 run, warm-ups, repetitions, methods,
variants), and estimated hours on the native engine and on SGLang. `--json` prints the rows as a JSON list.

`--gpus N`: a second table, the whole run's wall clock on one device and across N devices of each GPU, per
engine, with each device's busy hours and the speedup (`costs.schedule`: units scheduled greedily, longest
first, timed phases whole and alone on their device, a model's load once per device); `--json` then prints
`{"models": rows, "devices": those rows}`.

Cost model: `costs.hours` (its constants and `ASSUMPTIONS` are printed under the table). Which experiments it
knows and how each counts its work: the experiments' records (`plan=`, found by `spine.catalog`).
"""
from __future__ import annotations

import dataclasses
import json

from acceptmoe.commands import command, parser
from acceptmoe.costs import schedule as spread
from acceptmoe.costs.fit import GB, RUNTIME_RESERVE, Need, model_need, required_config
from acceptmoe.costs.hours import ASSUMPTIONS, Target, Work, generation_seconds, hours, weight_bytes
from acceptmoe.costs.shapes import GPUS
from acceptmoe.experiments.spine.catalog import planned
from acceptmoe.experiments.spine.options import positive_int
from acceptmoe.experiments.spine.render import markdown

GiB = 1 << 30


def experiment_work(experiment: str, preset, overrides: dict) -> tuple[object, dict[str, list[Work]]]:
    """(world, {model name: its work}) of `experiment` as its runner would do it (its record's counter)."""
    return planned()[experiment](experiment, preset, overrides)


# ----- rows and the command -----
def plan_rows(experiment: str, preset, overrides: dict) -> list[dict]:
    """One row per (model, GPU) for `experiment` (see the module docstring for the keys)."""
    world, work = experiment_work(experiment, preset, overrides)
    gpu_world = dataclasses.replace(world, device="cuda")
    rows = []
    for entry in world.models:
        items = work[entry.name]
        target = required_config(entry.target, "target")
        draft = required_config(entry.draft, "draft") if entry.draft is not None else {}
        needs = {store: model_need(entry, gpu_world, store, slots, target, draft)
                 for store, slots in dict.fromkeys((w.store, w.slots) for w in items)}
        need = Need(*(max(getattr(n, f) for n in needs.values()) for f in ("device", "pinned", "host_peak", "experts")))
        t = Target.of(world, target, draft)
        for gpu in GPUS:
            rows.append({"model": entry.name, "experiment": experiment, "gpu": gpu.name,
                         "gpu_memory_gb": round(gpu.memory_gib * GiB / GB, 1),
                         "device_gb": round(need.device / GB, 2), "pinned_host_gb": round(need.pinned / GB, 2),
                         "expert_gb": round(need.experts / GB, 2), "host_peak_gb": round(need.host_peak / GB, 2),
                         "fits": need.device + RUNTIME_RESERVE <= gpu.memory_gib * GiB,
                         "device_gb_by_store": {k: round(n.device / GB, 2) for k, n in needs.items()},
                         "generations": sum(w.generations for w in items),
                         "tokens": sum(w.generations * w.tokens for w in items),
                         "est_hours_native": round(hours(items, t, world, gpu, "native"), 2),
                         "est_hours_sglang": (round(hours(items, t, world, gpu, "sglang"), 2)
                                              if sglang_runs(items, needs) else None)})
    return rows


def sglang_runs(items: list[Work], needs: dict) -> bool:
    """Whether SGLang can run the work: a resident store (SGLang keeps every expert resident). A method with
    token-side admission runs there too, every drafted node in the pass (docs/sglang.md)."""
    return "resident" in needs


def targets(world) -> dict[str, Target]:
    """What the cost model reads of each model of `world`."""
    return {e.name: Target.of(world, required_config(e.target, "target"),
                              required_config(e.draft, "draft") if e.draft is not None else {}) for e in world.models}


def units(work: dict[str, list[Work]], ts: dict[str, Target], world, gpu, engine: str) -> list[spread.Unit]:
    """The run's units on `engine` (`costs.schedule`): shards of each untimed phase; a timed phase one unit per
    model and repetition, every task and variant in it."""
    out, timed = [], {}
    for model, items in work.items():
        for w in items:
            each = generation_seconds(w, ts[model], world, gpu, engine)
            if w.timed:
                s, _ = timed.get((model, w.phase), (0.0, w.repetitions))
                timed[(model, w.phase)] = (s + w.generations * each, w.repetitions)
            else:
                out += spread.split(model, w.phase, w.generations, each)
    return out + [u for (model, phase), (s, reps) in timed.items() for u in spread.timed(model, phase, s, reps)]


def device_rows(experiment: str, preset, overrides: dict, gpus: int, fits: dict[str, bool]) -> list[dict]:
    """Per (GPU, engine): the whole run on one device and across `gpus` devices (`costs.schedule`); `fits`:
    GPU name -> whether every model fits it (`plan_rows`)."""
    world, work = experiment_work(experiment, preset, overrides)
    ts = targets(world)
    load = {m: spread.load_seconds(weight_bytes(t)) for m, t in ts.items()}
    resident = all(sglang_runs(items, {w.store for w in items}) for items in work.values())
    rows = []
    for gpu in GPUS:
        for engine in ("native", "sglang") if resident else ("native",):
            us = units(work, ts, world, gpu, engine)
            one, many = spread.schedule(us, load.__getitem__, 1), spread.schedule(us, load.__getitem__, gpus)
            rows.append({"experiment": experiment, "gpu": gpu.name, "engine": engine, "gpus": gpus,
                         "fits": fits[gpu.name], "units": len(us),
                         "timed_units": sum(u.timed for u in us), "est_hours_1": round(one.makespan_s / 3600, 2),
                         "est_hours_n": round(many.makespan_s / 3600, 2),
                         "per_device_hours": [round(s / 3600, 2) for s in many.per_device_s],
                         "speedup": round(one.makespan_s / many.makespan_s, 2) if many.makespan_s else None})
    return rows


def render_devices(rows: list[dict]) -> str:
    n = rows[0]["gpus"]
    header = ["GPU", "engine", "fits", "units (timed)", "1 GPU h", f"{n} GPUs h", "speedup", "per-GPU h"]
    body = [[r["gpu"], r["engine"], "yes" if r["fits"] else "NO", f"{r['units']} ({r['timed_units']})", f"{r['est_hours_1']:g}",
             f"{r['est_hours_n']:g}", f"{r['speedup']:g}x" if r["speedup"] else "-",
             " ".join(f"{h:g}" for h in r["per_device_hours"])] for r in rows]
    title = (f"plan: {rows[0]['experiment']} across {n} GPUs, the whole run (an estimate from the cost model, "
             f"not a measurement)")
    return markdown(header, body, title=title) + "\n"


def render(rows: list[dict], devices: list[dict] | None = None) -> str:
    header = ["model", "GPU", "fits", "device GB", "pinned host GB", "expert GB", "host peak GB", "generations",
              "tokens", "native h", "SGLang h"]
    body = [[r["model"], f"{r['gpu']} ({r['gpu_memory_gb']:g} GB)", "yes" if r["fits"] else "NO",
             f"{r['device_gb']:.1f}", f"{r['pinned_host_gb']:.1f}", f"{r['expert_gb']:.1f}", f"{r['host_peak_gb']:.1f}",
             f"{r['generations']:,}", f"{r['tokens']:,}", f"{r['est_hours_native']:g}",
             "-" if r["est_hours_sglang"] is None else f"{r['est_hours_sglang']:g}"] for r in rows]
    split = {r["model"]: r["device_gb_by_store"] for r in rows if len(r["device_gb_by_store"]) > 1}
    by_store = "".join(f"{m}: device GB by store: {', '.join(f'{k} {v:.1f}' for k, v in d.items())}\n"
                       for m, d in split.items())
    notes = "\n".join(f"- {a}" for a in ASSUMPTIONS + (spread.ASSUMPTIONS if devices else ()))
    title = f"plan: {rows[0]['experiment']}, one row per model and GPU" if rows else None
    spread_table = f"\n{render_devices(devices)}" if devices else ""
    return f"{markdown(header, body, title=title)}\n{by_store}{spread_table}\nAssumptions:\n{notes}\n"


@command("plan", "before a long run: device, pinned and host memory, generations, tokens and hours per model and GPU")
def main(argv: list[str] | None = None) -> int:
    p = parser("plan")
    p.add_argument("--preset", default="tiny", help="configs/presets/<name>.yaml or a YAML path (default: tiny)")
    p.add_argument("--experiment", required=True, choices=planned().names(), help="the experiment to plan")
    p.add_argument("--limit", type=positive_int, default=None, help="evaluation prompts per task, as the run's --limit")
    p.add_argument("--budgets-from", default=None, metavar="TABLE1_RUN",
                   help="the run will read p_hat and B0 from this Table 1 run (not read here)")
    p.add_argument("--gpus", type=positive_int, default=None, metavar="N",
                   help="also the whole run's wall clock across N devices of each GPU (greedy schedule)")
    p.add_argument("--json", action="store_true", help="print the rows as a JSON list")
    args = p.parse_args(argv)
    overrides = {k: v for k, v in (("limit", args.limit), ("budgets_from", args.budgets_from)) if v is not None}
    rows = plan_rows(args.experiment, args.preset, overrides)
    fits = {g.name: all(r["fits"] for r in rows if r["gpu"] == g.name) for g in GPUS}
    devices = device_rows(args.experiment, args.preset, overrides, args.gpus, fits) if args.gpus else None
    if args.json:
        print(json.dumps(rows if devices is None else {"models": rows, "devices": devices}, indent=1))
    else:
        print(render(rows, devices))
    return 0
