"""The batch study's records, from its saved files only (the report and the claims table read these).

    cfg, rows = load(run_dir)    # the counted rows, with each draft shape's pool of prompts (`prompts`)
    work_records(cfg, rows)      # per (draft shape, batch size, method): unions, reads and loads per output
                                 #   token, paired ratios to Standard SD, bytes and bounds per shape
    quality_records(run_dir)     # per (draft shape, method): tau, accuracy, both vs Standard SD (paired)
    batched_quality(cfg, rows)   # per (draft shape, batch size, batch-crediting method): accuracy, tau and set
                                 #   size vs the method it is at B = 1, on the same draws

Every interval is over prompts, the units that are independent (`intervals`; docs/batch-study.md, "Intervals:
prompts are the unit"); each record names its unit (`unit`) and how many of them (`n`, or per interval
`<key>_n`). Bytes are counts (experts read or loaded x a shape's bytes per expert), never measured times; the
whole-pass bound adds what a batched step reads besides its experts (`costs.passbytes`: the non-expert target
weights and the draft's weights once per step, the target's and the draft's KV cache once per active request)
and divides by a GPU's published bandwidths (`costs.shapes.GPUS`).
"""
from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np

from acceptmoe.costs.passbytes import CONTEXT, pass_model, step_bound
from acceptmoe.costs.shapes import GPUS, get_shape
from acceptmoe.errors import UserError
from acceptmoe.evals.stats import bootstrap_mean, paired_bootstrap_speedup
from acceptmoe.methods import BASELINE, METHODS, Variant

from ..spine.config import from_saved
from ..spine.records import accuracy_fields, rate
from ..spine.runs import NothingToTabulate, SampleLog
from .batched import SERVER_BUDGET
from .config import PHASE, BatchStudyConfig, DraftShape, composable
from .intervals import Cell, prompt_accuracy, twin_of, variant_method
from .prompts import PoolPrompts

BASE = Variant(BASELINE).name
UNIT = "prompts"                 # what every interval of the study resamples


class Rows(list):
    """The run's counted rows (samples.jsonl); each draft shape's pool of prompts (`prompts.PoolPrompts`) is read
    from the run folder when a row's intervals first need it."""

    def __init__(self, rows: list[dict], cfg: BatchStudyConfig, run_dir: Path):
        super().__init__(rows)
        self.cfg, self.run_dir = cfg, Path(run_dir)
        self._pools: dict[str, PoolPrompts] = {}
        self._cells: dict[tuple[str, int], Cell] = {}

    def pool(self, tree: str) -> PoolPrompts:
        if tree not in self._pools:
            self._pools[tree] = PoolPrompts.read(self.cfg, DraftShape.parse(tree).folder_in(self.run_dir))
        return self._pools[tree]

    def cell(self, row: dict) -> Cell:
        """The row's draws over its shape's pool (`intervals.Cell`), made once per row."""
        key = (row["tree"], row["batch"])
        if key not in self._cells:
            self._cells[key] = Cell(self.cfg, row, self.pool(row["tree"]))
        return self._cells[key]


def load(run_dir: Path) -> tuple[BatchStudyConfig, Rows]:
    saved = json.loads((Path(run_dir) / "config.json").read_text())["config"]
    rows = list(SampleLog(Path(run_dir) / "samples.jsonl"))
    if not rows:
        raise NothingToTabulate(f"{run_dir} holds no counted batch yet: finish it with --resume")
    cfg = from_saved(BatchStudyConfig, saved)
    return cfg, Rows(rows, cfg, run_dir)


def _interval(key: str, iv) -> dict:
    """An interval's fields in a record: `key`, `key_low`, `key_high` (None where undefined)."""
    if iv is None:
        return {key: None, f"{key}_low": None, f"{key}_high": None}
    return {key: iv.estimate, f"{key}_low": iv.low, f"{key}_high": iv.high}


class Bytes:
    """A shape's bytes per expert and whole-pass model, scaled from the recording's L MoE layers to its own."""

    def __init__(self, name: str, layers: int, num_steps: int):
        self.shape, self.steps = get_shape(name), num_steps
        self.scale = self.shape.num_layers / layers
        self.expert = self.shape.stored_bytes()            # what a GPU keeps and reads (MXFP4 stays packed)
        try:
            self.model = pass_model(name)
        except UserError:
            self.model = None                              # no shipped config.json pair: no whole-pass bound

    def experts(self, count: float) -> float:
        return count * self.scale * self.expert

    def whole(self, c: dict) -> float | None:
        """Bytes a draw's batched steps read (`PassModel.step_bytes` summed over its steps: experts, weights
        once per step, KV once per active request; linear in both, so the draw's totals give the sum)."""
        if self.model is None:
            return None
        return (self.model.step_bytes(self.experts(c["reads"]), CONTEXT, True, self.steps, c["active"])
                + (c["passes"] - 1) * self.model.step_bytes(0, CONTEXT, True, self.steps, 0))

    def seconds(self, c: dict, gpu, offloaded: bool) -> float | None:
        read = self.whole(c)
        if read is None:
            return None
        return step_bound(read, self.experts(c["loads"]) if offloaded else 0.0, gpu)


def work_records(cfg: BatchStudyConfig, rows: Rows) -> list[dict]:
    out = []
    for row in rows:
        shape, cell = DraftShape.parse(row["tree"]), rows.cell(row)
        draws, L = row["draws"], row["layers"]
        sizes = [Bytes(s, L, shape.tree.num_steps) for s in cfg.shapes_at]
        for v in draws[0]["methods"]:
            tot = defaultdict(float)
            for d in draws:
                for k, x in d["methods"][v].items():
                    if isinstance(x, (int, float)) and not isinstance(x, bool):
                        tot[k] += x
            method = variant_method(v) or v
            r = {"tree": row["tree"], "draft": shape.describe(), "batch": row["batch"], "variant": v,
                 "method": METHODS[method].label if method in METHODS else v, "draws": len(draws),
                 "pool": row["pool"], "unit": UNIT, "n": cell.prompts, "store_agrees": row["store_agrees"],
                 "batched_agrees": row.get("batched_agrees"),
                 "run": "composed" if method not in METHODS or composable(method) else "batched",
                 "mean_active": tot["active"] / tot["passes"], "union_per_layer": tot["reads"] / tot["passes"] / L,
                 "sharing": tot["own"] / tot["reads"], "reads_per_token": tot["reads"] / tot["output"] / L,
                 "loads_per_token": tot["loads"] / tot["output"] / L, "tokens_per_pass": tot["output"] / tot["passes"]}
            for key in ("reads", "loads"):
                r.update(_interval(f"{key}_ratio", cell.ratio(v, key, "output", BASE)))
            other = twin_of(v)
            if other is not None and other in draws[0]["methods"]:                  # vs the method it is at B = 1
                r.update(versus=other, **_interval("reads_vs_alone", cell.ratio(v, "reads", "output", other)))
            for b in sizes:
                n = b.shape.name
                r[f"read_mb_per_token_{n}"] = b.experts(tot["reads"]) / tot["output"] / 1e6
                r[f"moved_mb_per_token_{n}_x{cfg.slots}"] = b.experts(tot["loads"]) / tot["output"] / 1e6
                for gpu in GPUS:
                    for offloaded in (False, True):
                        s = b.seconds(tot, gpu, offloaded)
                        key = f"whole_ms_per_token_{n}_{gpu.name}" + (f"_x{cfg.slots}" if offloaded else "")
                        r[key] = None if s is None else s / tot["output"] * 1e3
                gpu = GPUS[0]
                if b.model is not None:
                    key = f"whole_ratio_{n}_{gpu.name}"
                    seconds = (key, lambda c, b=b, g=gpu: b.seconds(c, g, False))
                    r.update(_interval(key, cell.ratio(v, seconds, "output", BASE)))
            out.append(r)
    order = {t: i for i, t in enumerate(cfg.trees)}
    return sorted(out, key=lambda r: (order.get(r["tree"], 99), r["batch"]))


def quality_records(run_dir: Path, cfg: BatchStudyConfig) -> list[dict]:
    """Per (draft shape, variant): prompts, tau (pooled), its ratio to Standard SD's (paired over prompts, within
    tasks), accuracy with its interval and the paired difference vs Standard SD (Newcombe's score interval over
    prompts), the mean set size, the server B0."""
    out, bs = [], cfg.world.bootstrap
    for shape in cfg.shapes():
        root = shape.folder_in(run_dir)
        path = root / "samples.jsonl"
        if not path.is_file():
            continue
        per: dict[str, dict] = defaultdict(dict)
        for r in SampleLog(path):
            if r.get("phase") == PHASE:
                per[r["variant"]][(r["model"], r["task"], r["example_id"])] = r
        if BASE not in per:
            continue
        ids = sorted(set.intersection(*(set(x) for x in per.values())))
        server = root / SERVER_BUDGET              # the one B0 every plan of the shape was bound with
        b0 = {r["model"]: r["b0"] for r in json.loads(server.read_text())} if server.is_file() else {}
        base = [per[BASE][i] for i in ids]
        for v, got in per.items():
            rs = [got[i] for i in ids]
            col = lambda xs, k: np.array([x[k] for x in xs], float)      # noqa: E731
            tau = paired_bootstrap_speedup(col(rs, "accepted"), col(rs, "steps"), col(base, "accepted"),
                                           col(base, "steps"), cfg.bootstrap_resamples, bs.confidence, bs.seed,
                                           strata=[r["task"] for r in rs])
            acc = bootstrap_mean(col(rs, "correct"), n_resamples=cfg.bootstrap_resamples)
            out.append({"tree": str(shape), "draft": shape.describe(), "variant": v, "prompts": len(rs),
                        "unit": UNIT, "n": len(rs), "tau": rate(rs, "accepted", "steps"), **_interval("tau_ratio", tau),
                        "accuracy_pooled": 100 * acc.estimate,
                        "mean_set_size": rate(rs, "set_size_sum", "block_layers"),
                        "b0": "/".join(str(b0[m.name]) for m in cfg.world.models if m.name in b0),
                        **accuracy_fields(rs, None if v == BASE else base, cfg.bootstrap_resamples)})
    return out


def batched_quality(cfg: BatchStudyConfig, rows: Rows) -> list[dict]:
    """Per (draft shape, batch size) and batch-crediting variant (run batched on every draw): accuracy, tau and
    mean set size against the composable method it is at B = 1 (`methods.alone_twin`), whose batch-1 replies the
    same draws hold. Accuracy per drawn prompt (its rate over the draws holding it) with the paired rule over those
    prompts (`intervals.prompt_accuracy`); tau's ratio over the pool's prompts (`intervals.Cell.ratio`)."""
    out = []
    for row in rows:
        draws, cell = row["draws"], rows.cell(row)
        for v in draws[0]["methods"]:
            other = twin_of(v)
            if other is None or other not in draws[0]["methods"]:
                continue
            acc, tau = prompt_accuracy(cell, v, other), cell.ratio(v, "accepted", "steps", other)
            q = [d["methods"][v]["quality"] for d in draws]
            base = [d["methods"][other]["quality"] for d in draws]
            size = lambda xs: sum(x["set_size_sum"] for x in xs) / max(1, sum(x["block_layers"] for x in xs))  # noqa: E731
            out.append({"tree": row["tree"], "draft": DraftShape.parse(row["tree"]).describe(), "batch": row["batch"],
                        "variant": v, "versus": other, "draws": len(draws), "prompts": acc.prompts, "unit": UNIT,
                        "discordant": acc.discordant, "accuracy": acc.accuracy, "accuracy_versus": acc.versus,
                        **_interval("accuracy_diff", acc.diff), "accuracy_diff_n": acc.diff.n,
                        "accuracy_diff_rule": acc.diff.method, **_interval("tau_ratio", tau),
                        "tau_ratio_n": cell.prompts, "set_size": size(q), "set_size_versus": size(base)})
    order = {t: i for i, t in enumerate(cfg.trees)}
    return sorted(out, key=lambda r: (order.get(r["tree"], 99), r["batch"]))
