"""The batch study's records, from its saved files only (the report and the claims table read these).

    cfg, rows = load(run_dir)
    work_records(cfg, rows)      # per (draft shape, batch size, method): unions, reads and loads per output
                                 #   token, paired ratios to Standard SD over draws, bytes and bounds per shape
    quality_records(run_dir)     # per (draft shape, method): tau, accuracy, both vs Standard SD (paired)
    batched_quality(cfg, rows)   # per (draft shape, batch size, batch-crediting method): accuracy, tau and set
                                 #   size vs the method it is at B = 1, paired over draws

Bytes are counts (experts read or loaded x a shape's bytes per expert), never measured times; the whole-pass
bound adds what a batched step reads besides its experts (`spine.passbytes`: the non-expert target weights and
the draft's weights once per step, the target's and the draft's KV cache once per active request) and divides
by a GPU's published bandwidths (`spine.shapes.GPUS`).
"""
from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np

from acceptmoe.errors import UserError
from acceptmoe.evals.stats import (Interval, bootstrap_mean, no_discordance_bound, paired_bootstrap_diff,
                                  paired_bootstrap_speedup)
from acceptmoe.methods import BASELINE, METHODS, Variant, alone_twin

from ..spine.config import from_saved
from ..spine.passbytes import CONTEXT, pass_model, step_bound
from ..spine.records import accuracy_fields, rate
from ..spine.runs import NothingToTabulate, SampleLog
from ..spine.shapes import GPUS, get_shape
from .batched import SERVER_BUDGET
from .config import PHASE, BatchStudyConfig, DraftShape, composable

BASE = Variant(BASELINE).name


def load(run_dir: Path) -> tuple[BatchStudyConfig, list[dict]]:
    saved = json.loads((Path(run_dir) / "config.json").read_text())["config"]
    rows = list(SampleLog(Path(run_dir) / "samples.jsonl"))
    if not rows:
        raise NothingToTabulate(f"{run_dir} holds no counted batch yet: finish it with --resume")
    return from_saved(BatchStudyConfig, saved), rows


def _paired(cfg: BatchStudyConfig, draws: list[dict], v: str, num: str, per_draw=None, versus: str = BASE) -> dict:
    """`v`'s num per output token over `versus`'s (Standard SD's), paired over draws: estimate, low, high (None if
    undefined)."""
    get = per_draw or (lambda c: c[num])
    mine = np.array([get(d["methods"][v]) for d in draws], float)
    base = np.array([get(d["methods"][versus]) for d in draws], float)
    out_m = np.array([d["methods"][v]["output"] for d in draws], float)
    out_b = np.array([d["methods"][versus]["output"] for d in draws], float)
    if min(mine.sum(), base.sum(), out_m.sum(), out_b.sum()) <= 0:
        return {"estimate": None, "low": None, "high": None}
    bs = cfg.world.bootstrap
    iv = paired_bootstrap_speedup(mine, out_m, base, out_b, cfg.bootstrap_resamples, bs.confidence, bs.seed)
    return {"estimate": iv.estimate, "low": iv.low, "high": iv.high}


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


def work_records(cfg: BatchStudyConfig, rows: list[dict]) -> list[dict]:
    out = []
    for row in rows:
        shape = DraftShape.parse(row["tree"])
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
                 "pool": row["pool"], "store_agrees": row["store_agrees"],
                 "batched_agrees": row.get("batched_agrees"),
                 "run": "composed" if method not in METHODS or composable(method) else "batched",
                 "mean_active": tot["active"] / tot["passes"], "union_per_layer": tot["reads"] / tot["passes"] / L,
                 "sharing": tot["own"] / tot["reads"], "reads_per_token": tot["reads"] / tot["output"] / L,
                 "loads_per_token": tot["loads"] / tot["output"] / L, "tokens_per_pass": tot["output"] / tot["passes"]}
            for key, num in (("reads", "reads"), ("loads", "loads")):
                iv = _paired(cfg, draws, v, num)
                r.update({f"{key}_ratio": iv["estimate"], f"{key}_ratio_low": iv["low"],
                          f"{key}_ratio_high": iv["high"]})
            other = alone_twin(method) if method in METHODS else None
            if other is not None and Variant(other).name in draws[0]["methods"]:     # vs the method it is at B = 1
                iv = _paired(cfg, draws, v, "reads", versus=Variant(other).name)
                r.update({"versus": Variant(other).name, "reads_vs_alone": iv["estimate"],
                          "reads_vs_alone_low": iv["low"], "reads_vs_alone_high": iv["high"]})
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
                    iv = _paired(cfg, draws, v, "", per_draw=lambda c, b=b, g=gpu: b.seconds(c, g, False))
                    r.update({f"whole_ratio_{n}_{gpu.name}": iv["estimate"],
                              f"whole_ratio_{n}_{gpu.name}_low": iv["low"],
                              f"whole_ratio_{n}_{gpu.name}_high": iv["high"]})
            out.append(r)
    order = {t: i for i, t in enumerate(cfg.trees)}
    return sorted(out, key=lambda r: (order.get(r["tree"], 99), r["batch"]))


def quality_records(run_dir: Path, cfg: BatchStudyConfig) -> list[dict]:
    """Per (draft shape, variant): prompts, tau (pooled), its ratio to Standard SD's (paired over prompts),
    accuracy with its interval and the paired difference vs Standard SD, the mean set size, the server B0."""
    out = []
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
                                           col(base, "steps"), cfg.bootstrap_resamples)
            acc = bootstrap_mean(col(rs, "correct"), n_resamples=cfg.bootstrap_resamples)
            out.append({"tree": str(shape), "draft": shape.describe(), "variant": v, "prompts": len(rs),
                        "tau": rate(rs, "accepted", "steps"), "tau_ratio": tau.estimate, "tau_ratio_low": tau.low,
                        "tau_ratio_high": tau.high, "accuracy_pooled": 100 * acc.estimate,
                        "mean_set_size": rate(rs, "set_size_sum", "block_layers"),
                        "b0": "/".join(str(b0[m.name]) for m in cfg.world.models if m.name in b0),
                        **accuracy_fields(rs, None if v == BASE else base, cfg.bootstrap_resamples)})
    return out


def variant_method(v: str) -> str | None:
    return next((m for m in METHODS if Variant(m).name == v), None)


def _accuracy_diff(cfg: BatchStudyConfig, draws: list[dict], v: str, other: str, acc, acc_base):
    """(interval in pp, prompts where the two ever disagreed, distinct prompts drawn): paired over draws; when no
    request of any draw disagreed, the exact bound on a discordance rate none of the drawn prompts showed
    (`no_discordance_bound`), since resampling identical draws would give a zero-width interval."""
    pairs = [(d["methods"][v]["quality"]["correct_each"], d["methods"][other]["quality"]["correct_each"],
              d["prompts"]) for d in draws]
    discordant = {p for a, b, ps in pairs for x, y, p in zip(a, b, ps) if x != y}
    prompts = len({p for *_, ps in pairs for p in ps})
    if discordant:
        return paired_bootstrap_diff(acc, acc_base, cfg.bootstrap_resamples), len(discordant), prompts
    bound = 100 * no_discordance_bound(prompts, cfg.world.bootstrap.confidence)
    return Interval(0.0, -bound, bound, prompts, cfg.world.bootstrap.confidence, 0, 0,
                    "clopper-pearson-discordant"), 0, prompts


def batched_quality(cfg: BatchStudyConfig, rows: list[dict]) -> list[dict]:
    """Per (draft shape, batch size) and batch-crediting variant (run batched on every draw): accuracy, tau and
    mean set size against the composable method it is at B = 1 (`methods.alone_twin`), whose batch-1 replies the
    same draws hold; differences and ratios paired over draws (95 %)."""
    out = []
    for row in rows:
        draws = row["draws"]
        for v in draws[0]["methods"]:
            method = variant_method(v)
            other = alone_twin(method) if method is not None else None
            if other is None or Variant(other).name not in draws[0]["methods"]:
                continue
            q = [d["methods"][v]["quality"] for d in draws]
            base = [d["methods"][Variant(other).name]["quality"] for d in draws]
            n = row["batch"]
            acc = np.array([x["correct"] / n * 100 for x in q])
            acc_base = np.array([x["correct"] / n * 100 for x in base])
            diff, discordant, prompts = _accuracy_diff(cfg, draws, v, Variant(other).name, acc, acc_base)
            col = lambda xs, k: np.array([x[k] for x in xs], float)      # noqa: E731
            tau = paired_bootstrap_speedup(col(q, "accepted"), col(q, "steps"), col(base, "accepted"),
                                           col(base, "steps"), cfg.bootstrap_resamples)
            size = lambda xs: sum(x["set_size_sum"] for x in xs) / max(1, sum(x["block_layers"] for x in xs))  # noqa: E731
            shape = DraftShape.parse(row["tree"])
            out.append({"tree": row["tree"], "draft": shape.describe(), "batch": n, "variant": v,
                        "versus": Variant(other).name, "draws": len(draws), "prompts": prompts,
                        "discordant": discordant, "accuracy": float(acc.mean()),
                        "accuracy_versus": float(acc_base.mean()), "accuracy_diff": diff.estimate,
                        "accuracy_diff_low": diff.low, "accuracy_diff_high": diff.high, "tau_ratio": tau.estimate,
                        "tau_ratio_low": tau.low, "tau_ratio_high": tau.high, "set_size": size(q),
                        "set_size_versus": size(base)})
    order = {t: i for i, t in enumerate(cfg.trees)}
    return sorted(out, key=lambda r: (order.get(r["tree"], 99), r["batch"]))
