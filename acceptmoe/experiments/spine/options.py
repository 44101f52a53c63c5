"""What every experiment command shares: its options, its run folder (new or resumed), running to completion.

    p = parser("fig3"); add_run_options(p); add_budgets_option(p)
    cfg, run = open_or_resume("fig3", p.parse_args(argv), load=..., from_saved=...)
    run_to_completion("fig3", run, lambda: run_experiment(cfg, run))   # Ctrl-C keeps every finished row
"""
from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path

from acceptmoe.engine.device import check_device
from acceptmoe.errors import UserError

from .cluster import check_pooled, use_cluster
from .engines import ENGINES, backend_class, require_admission, require_drafts
from .progress import record_error
from .prompts import resolve_checkpoint
from .runs import Run, SampleLog, code_state, discard_if_empty, lock_run, open_run, record_resume

# ----- command line -----
CONFIG_OPTIONS = {"limit": "limit", "methods": "methods", "budgets_from": "budgets_from",   # option -> config key
                  "engine": "world.engine", "record_routes": "world.generation.record_routes",
                  "calibration_limit": "world.calibration.prompts",
                  "resident_prompts": "resident.prompts", "offload_prompts": "offload.prompts",
                  "resident_methods": "resident.variants", "offload_methods": "offload.variants",
                  "temperature": "world.sampling.temperature", "top_p": "world.sampling.top_p",
                  "top_k": "world.sampling.top_k", "seed": "world.sampling.seed"}


def positive_int(text: str) -> int:
    """argparse type: a whole number >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def add_run_options(p: argparse.ArgumentParser, limit_help: str = "evaluation prompts per task (overrides the preset)") -> None:
    """--preset, --limit, --calibration-limit, --resume, --results, --engine, --record-routes, --cluster: the
    options every experiment command takes."""
    p.add_argument("--preset", default="tiny", help="configs/presets/<name>.yaml or a YAML path (default: tiny)")
    p.add_argument("--limit", type=positive_int, default=None, help=limit_help)
    p.add_argument("--calibration-limit", type=positive_int, default=None, metavar="N",
                   help="calibration prompts per source task, where a method needs p_hat (overrides the preset)")
    p.add_argument("--resume", type=Path, default=None, metavar="RUN_DIR",
                   help="continue this run folder with its own frozen config")
    p.add_argument("--results", type=Path, default=None, help="results root (default: results/)")
    p.add_argument("--engine", default=None, choices=ENGINES.names(),
                   help="the engine that runs the models (default: the preset's, native)")
    p.add_argument("--record-routes", action="store_true", default=None,
                   help="save what every target pass sent to the experts (routes/, for `replay`; native engine)")
    add_sampling_options(p)
    p.add_argument("--allow-code-change", action="store_true",
                   help="with --resume: continue although the code differs from the run's (commit or local changes)")
    add_cluster_option(p)


def add_cluster_option(p: argparse.ArgumentParser) -> None:
    """--cluster: where the run's untimed units run (`spine.cluster`); timed units stay in this process."""
    p.add_argument("--cluster", default=None, metavar="auto|local|ADDRESS",
                   help="run the units on Ray workers (the cluster extra; docs/cluster.md): local (this machine, a "
                        "worker per GPU or per world.threads cores), auto (the Ray cluster this machine joined), or "
                        "a Ray address; never part of the config, so a run resumes with or without it")


def add_sampling_options(p: argparse.ArgumentParser) -> None:
    """--temperature, --top-p, --top-k, --seed: how every generation of the run picks its tokens (the world's
    `sampling:`; its defaults are `GenerationOptions`': greedy)."""
    p.add_argument("--temperature", type=float, default=None,
                   help="sample at this temperature (default: the preset's, 0 = greedy decoding)")
    p.add_argument("--top-p", type=float, default=None, help="nucleus: keep the most likely tokens holding this "
                   "share of the mass (default: 1, all)")
    p.add_argument("--top-k", type=int, default=None, help="keep the k most likely tokens (default: 0, all)")
    p.add_argument("--seed", type=int, default=None, help="the run's sampling seed; each prompt draws from a stream "
                   "derived from it and its identity (default: 0)")


def add_methods_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--methods", nargs="+", default=None, help="methods to run (default: every registered method)")


def add_budgets_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--budgets-from", type=Path, default=None, metavar="TABLE1_RUN",
                   help="reuse p_hat and B0 from this Table 1 run folder (default: compute them in this run)")


def overrides_of(args: argparse.Namespace) -> dict:
    """The config overrides the command-line options give (dotted keys), for a new run."""
    out = {key: getattr(args, opt) for opt, key in CONFIG_OPTIONS.items() if getattr(args, opt, None) is not None}
    if "budgets_from" in out:
        out["budgets_from"] = str(out["budgets_from"])
    return out


def open_or_resume(command: str, args: argparse.Namespace, load: Callable[[dict], object],
                   from_saved: Callable[[dict], object]) -> tuple[object, Run]:
    """The one way a command gets its config and run folder: `--resume RUN_DIR` reopens that folder with its
    frozen config; otherwise `load(overrides)` builds the config and a new (or matching unfinished) run opens."""
    given = overrides_of(args)
    use_cluster(getattr(args, "cluster", None))           # Ray missing or a bad address: before any work
    if args.resume is not None:
        meta = args.resume / "config.json"
        if not args.resume.is_dir() or not meta.is_file():
            raise UserError(f"--resume {args.resume}: not a run folder (no {meta.name}); give a folder written by "
                            f"`./reproduce.sh {command}`, e.g. results/{command}/<preset>/<run-id>")
        saved = read_saved(args.resume, command)
        check_resume_options(given, saved["config"])
        cfg = from_saved(saved["config"])
        check_pooled(cfg.world)
        backend_class(cfg.world.engine)                   # an SGLang run resumes where SGLang is installed
        lock_run(args.resume)
        now = check_same_code(saved.get("environment", {}), args.resume, args.allow_code_change)
        run = Run(args.resume, resumed=True)
        record_resume(run, now)
        return cfg, run
    cfg = load(given)
    check_pooled(cfg.world)                               # --cluster with an engine that serves its own batches
    backend_class(cfg.world.engine)                       # fail before creating a run folder
    if getattr(cfg, "budgets_from", None):
        from .budgets import check_source_sampling
        check_source_sampling(cfg.world, Path(cfg.budgets_from))
    check_device(cfg.world.device)
    methods = getattr(cfg, "method_names", None)
    if methods is not None:
        require_drafts(cfg.world, methods())           # a speculative method without a draft: before any work
        require_admission(cfg.world.engine, methods())   # token-side admission on an engine without it
    for model in cfg.world.models:
        resolve_checkpoint(model.target)
        if model.draft is not None:
            resolve_checkpoint(model.draft)
    return cfg, open_run(command, cfg.world.preset, cfg, root=args.results)


def check_resume_options(given: dict, frozen: dict) -> None:
    """A resumed run keeps its frozen config: an option may be repeated with the frozen value (`--engine sglang`,
    which ./reproduce.sh reads to pick SGLang's environment), never changed."""
    def frozen_value(key: str):
        node = frozen
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        return node
    changed = [k for k, v in given.items() if frozen_value(k) != (list(v) if isinstance(v, tuple) else v)]
    if changed:
        flags = ", ".join(f"--{k.split('.')[-1].replace('_', '-')} (frozen: {frozen_value(k)!r})" for k in changed)
        raise UserError(f"--resume continues a run with its frozen config: drop {flags}, or start a new run "
                        f"without --resume")


def read_saved(run_dir: Path, command: str) -> dict:
    """A run folder's `config.json`, checked: JSON text, a mapping with the frozen `config`."""
    meta = run_dir / "config.json"
    fresh = f"start a new run with `./reproduce.sh {command}` (without --resume)"
    try:
        saved = json.loads(meta.read_bytes().decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise UserError(f"--resume {run_dir}: {meta} is damaged ({type(exc).__name__}: {str(exc)[:120]}); "
                        f"this run cannot be resumed: {fresh}") from None
    except OSError as exc:
        raise UserError(f"--resume {run_dir}: cannot read {meta} ({exc.strerror}); make it readable") from None
    if not isinstance(saved, dict) or not isinstance(saved.get("config"), dict):
        raise UserError(f"--resume {run_dir}: {meta} has no 'config' mapping (it was not written by "
                        f"./reproduce.sh); this run cannot be resumed: {fresh}")
    return saved


def check_same_code(recorded: dict, run_dir: Path, allowed: bool) -> dict:
    """A resumed run continues only with the code that started it (same commit, no local changes), unless the
    user says otherwise: rows made by different code would be mixed silently. Returns today's code state."""
    now = code_state()
    changed = []
    if recorded.get("git_commit") != now["git_commit"]:
        changed.append(f"commit {str(recorded.get('git_commit'))[:12]} -> {now['git_commit'][:12]}")
    if recorded.get("git_dirty") or now["git_dirty"]:
        changed.append("uncommitted local changes" + (" when the run started" if recorded.get("git_dirty") else ""))
    if changed and not allowed:
        raise UserError(f"--resume {run_dir}: the code differs from the run's ({'; '.join(changed)}): commit or stash "
                        f"the changes, check out the run's commit, or pass --allow-code-change (recorded in "
                        f"{run_dir / 'resumes.jsonl'})")
    return now


def run_to_completion(command: str, run: Run, work: Callable[[], dict | None]) -> bool:
    """Run `work` into `run` and write its summary (`work`'s fields, rows, this session's seconds).
    Ctrl-C keeps every finished row, prints the resume command and returns False. A new run that ends
    (Ctrl-C or an error) before writing anything but its config leaves no folder; an error after that is
    recorded in the folder's `errors.jsonl` (`progress.record_error`, shown by `status`) and propagates."""
    print(f"run folder: {run.path}{' (resumed)' if run.resumed else ''}", flush=True)
    start = time.perf_counter()
    try:
        extra = work() or {}
    except KeyboardInterrupt:
        if discard_if_empty(run):
            print(f"\ninterrupted before any result; the run folder {run.path} is removed")
        else:
            print(f"\ninterrupted; finished rows are saved. Resume with: ./reproduce.sh {command} --resume {run.path}")
        return False
    except BaseException as exc:
        if not discard_if_empty(run) and isinstance(exc, Exception):  # no result yet: no folder left behind
            record_error(run.path, exc)
        raise
    run.finish({**extra, "rows": len(SampleLog(run.path / "samples.jsonl")),
                "seconds_this_session": round(time.perf_counter() - start, 1)})
    return True


def run_and_report(command: str, run: Run, work: Callable[[], dict | None],
                   write_outputs: Callable[[Path], tuple[str, list[Path]]]) -> int:
    """`run_to_completion`, then the run's tables and figures written and printed: the exit code (130 when
    interrupted)."""
    if not run_to_completion(command, run, work):
        return 130
    text, written = write_outputs(run.path)
    print(text)
    print("written: " + ", ".join(str(p) for p in written))
    return 0
