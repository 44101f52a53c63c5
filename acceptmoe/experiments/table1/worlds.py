"""`./reproduce.sh worlds`: Table 1 on independently trained tiny worlds, and the spread across them.

    ./reproduce.sh worlds [--seeds 1 2] [--limit N] [--methods ...] [--resume RUN_DIR]

A world is the tiny target and draft trained with the same data and tokenizer and another weights seed
(`train-tiny --seed S`, into `models/worlds/seed-S/`, trained here when missing: about 40 min each on one core;
not committed, they regenerate). The run is one Table 1 over a world whose models are the committed world
(`models/tiny`) plus one model per seed (`tiny-sS`), so every rule of Table 1 (calibration, B0, the method
order, resume) applies per world, and `table1.md` shows each world's pairs. `worlds.md` adds the spread:

- per world: each method's mean accuracy over the tasks and its difference from Standard SD (pp) with the
  paired interval over prompts (`table.strata_diff`, as Table 1's mean row);
- across worlds: the min and max of each difference, and an interval that resamples worlds and then prompts
  within each (world, task) pair together (`worlds_interval`): the model-to-model variance a single world's
  prompt-resampling interval leaves out.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np

from acceptmoe.commands import command, parser
from acceptmoe.errors import UserError
from acceptmoe.methods import BASELINE, METHODS

from ..spine import render
from ..spine.config import from_saved, load_experiment
from ..spine.options import add_methods_option, add_run_options, open_or_resume, run_to_completion
from ..spine.runs import REPO
from .config import Table1Config
from .runner import run_summary
from .table import build_table1, strata_diff, worlds_interval, write_table1

EXPERIMENT = "worlds"
SEEDS = (1, 2)
WORLDS = Path("models/worlds")
OUTPUT = "worlds.md"
TRAIN_STAGES = "data,tokenizer,target,draft"       # train-tiny without its model card (Table 1 measures the world)


def world_folder(seed: int, root: Path = WORLDS) -> Path:
    """Where world `seed` lives (relative paths: to the repository, as the presets' model folders)."""
    return Path(root) / f"seed-{seed}"


def world_models(base: dict, seeds, root: Path = WORLDS) -> list[dict]:
    """The committed world's model entry, then one per seed pointing at its trained folders."""
    return [base] + [{**base, "name": f"{base['name']}-s{s}", "target": str(world_folder(s, root) / "target"),
                      "draft": str(world_folder(s, root) / "draft")} for s in seeds]


def ensure_world(seed: int, root: Path = WORLDS) -> None:
    """Train world `seed` unless its target and draft are there (`train-tiny --seed S --out <root>/seed-S
    --stages data,tokenizer,target,draft`);
    a world whose training stopped at a time guard is refused (its weights depend on the machine's speed)."""
    folder = REPO / world_folder(seed, root)                 # an absolute root stays as it is
    if not ((folder / "target/config.json").is_file() and (folder / "draft/config.json").is_file()):
        from acceptmoe.tiny import train_tiny
        print(f"[worlds] training world {seed} into {folder} (about 40 min on one core)", flush=True)
        if train_tiny.main(["--seed", str(seed), "--out", str(folder), "--stages", TRAIN_STAGES]):
            raise UserError(f"training world {seed} failed; see {folder / 'train_tiny.log'}")
    check_complete(folder)


def check_complete(folder: Path) -> None:
    """A trained world's summaries say it reached its token budget and planned draft steps (worlds made some
    other way, without train_summary.json, are taken as they are)."""
    target, draft = folder / "target/train_summary.json", folder / "draft/train_summary.json"
    cut = []
    if target.is_file():
        t = json.loads(target.read_text())
        if t["tokens"] < t["config"]["train"]["max_tokens"]:
            cut.append(f"the target at {t['tokens']:,} of {t['config']['train']['max_tokens']:,} tokens")
    if draft.is_file() and json.loads(draft.read_text())["train"].get("stopped_early"):
        cut.append("the draft before its planned steps")
    if cut:
        raise UserError(f"world {folder} stopped at a time guard ({'; '.join(cut)}): its weights depend on how busy "
                        f"the machine was; delete the folder and rerun on a quieter machine (or raise max_minutes)")


def spread(run_dir: Path) -> tuple[list[list], list[list], str]:
    """(per-world rows, across-worlds rows, confidence) from a worlds run's saved results only."""
    t = build_table1(run_dir)
    bs, methods = t.cfg.world.bootstrap, [m for m in METHODS if m in t.cfg.methods]
    by_world: dict[str, dict] = {}
    for pair, rows in t.aligned.items():
        by_world.setdefault(pair.model, {})[pair.task] = rows
    per_world, across = [], []
    diffs: dict[str, dict[str, list[np.ndarray]]] = {m: {} for m in methods}
    for world, pairs in by_world.items():
        for m in methods:
            acc = 100 * np.mean([np.mean([r["correct"] for r in rows[m]]) for rows in pairs.values()])
            diff = "-"
            if BASELINE in methods and m != BASELINE:
                a = [np.array([r["correct"] for r in rows[m]], float) for rows in pairs.values()]
                b = [np.array([r["correct"] for r in rows[BASELINE]], float) for rows in pairs.values()]
                diffs[m][world] = [x - y for x, y in zip(a, b, strict=True)]
                est, lo, hi = strata_diff(a, b, bs)
                diff = f"{est:+.1f} [{lo:+.1f}, {hi:+.1f}]"
            per_world.append([world, m, len(pairs), f"{acc:.1f}", diff])
    for m in methods:
        if not diffs[m]:                       # Standard SD itself, or no Standard SD to compare with
            continue
        means = [100 * float(np.mean([d.mean() for d in ds])) for ds in diffs[m].values()]
        lo, hi = worlds_interval(diffs[m], bs) if len(means) > 1 else (float("nan"), float("nan"))
        across.append([m, len(means), f"{np.mean(means):+.1f}", f"{min(means):+.1f}", f"{max(means):+.1f}",
                       f"[{lo:+.1f}, {hi:+.1f}]" if len(means) > 1 else "- (one world)"])
    return per_world, across, f"{bs.confidence:.0%}"


def write_worlds(run_dir: str | Path) -> str:
    """Table 1 and the spread across worlds, from the run folder's saved results; writes both there."""
    run_dir = Path(run_dir)
    table1 = write_table1(run_dir)
    per_world, across, conf = spread(run_dir)
    md = "\n\n".join([
        render.markdown(["World", "Method", "Tasks", "Mean accuracy (%)", f"vs Standard SD (pp) [{conf}]"],
                        per_world, "Per world: mean accuracy over the tasks, difference from Standard SD with the "
                                   "paired interval over prompts"),
        render.markdown(["Method", "Worlds", "Mean diff (pp)", "Min", "Max", f"Worlds x prompts [{conf}]"], across,
                        "Across worlds: the difference from Standard SD per world, and an interval resampling "
                        "worlds and prompts together")])
    (run_dir / OUTPUT).write_text(md + "\n")
    return table1 + "\n\n" + md


@command("worlds", "Table 1 on independently trained tiny worlds (train-tiny --seed S) and the spread across them")
def main(argv: list[str] | None = None) -> int:
    p = parser(EXPERIMENT)
    add_run_options(p)
    add_methods_option(p)
    p.add_argument("--seeds", type=int, nargs="*", default=None,
                   help=f"weights seeds of the extra worlds (default: {' '.join(map(str, SEEDS))}); the committed "
                        f"world is always the first")
    p.add_argument("--worlds-dir", type=Path, default=WORLDS,
                   help=f"where world S lives, as seed-S/target and seed-S/draft (default: {WORLDS})")
    args = p.parse_args(argv)
    if args.resume is not None and args.seeds is not None:
        raise UserError("--resume continues a run with its frozen worlds: drop --seeds, or start a new run")
    seeds = list(SEEDS) if args.seeds is None else args.seeds
    if args.resume is None:
        base = dataclasses.asdict(load_experiment(Table1Config, args.preset).world.models[0])
        models = world_models(base, seeds, args.worlds_dir)
        for seed in seeds:
            ensure_world(seed, args.worlds_dir)
        load = lambda o: load_experiment(Table1Config, args.preset, {**o, "world.models": models})   # noqa: E731
    else:
        load = None
    cfg, run = open_or_resume(EXPERIMENT, args, load, lambda saved: from_saved(Table1Config, saved))
    if not run_to_completion(EXPERIMENT, run, lambda: run_summary(cfg, run)):
        return 130
    print(write_worlds(run.path))
    print(f"written: {run.path / OUTPUT} and Table 1's files")
    return 0
