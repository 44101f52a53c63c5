"""What a replay's measured expert time is checked against, per record (a store and a variant), beside the
expert bytes / bandwidth bound the report computes:

- the whole-pass bound (`costs.passbytes`): a step's expert bytes plus every other byte it reads (the target's
  non-expert weights and KV cache; with speculation the draft's passes), per output token, at each GPU with
  the host link at its published peak and at its measured-typical figure (`costs.shapes.GPUS`), and its
  ratio to the reference's;
- the expert FLOPs ratio: a pass multiplies each routed (token, expert) pair, top-k per token whatever the
  method, so expert FLOPs per output token follow routed tokens / output tokens; its ratio to the
  reference's is what a machine bound by arithmetic would show;
- the regime: where the measured ratio falls against the bytes and FLOPs ratios. A measured ratio between
  them is a machine neither purely bandwidth- nor compute-bound; above both (or below both) is not explained
  by either and is flagged.

    add_bounds(records, cfg, plan, routes)      # adds the fields below to each record, in place
"""
from __future__ import annotations

import dataclasses

from acceptmoe.costs.passbytes import CONTEXT, LINKS, pass_model, step_bound
from acceptmoe.costs.shapes import GPUS, DeviceBound
from acceptmoe.errors import UserError
from acceptmoe.methods import METHODS

GPU_BY_NAME = {g.name: g for g in GPUS}
BETWEEN, ABOVE, BELOW = "between the bytes and FLOPs ratios", "above both", "below both"


def devices(cfg: dict) -> list[DeviceBound]:
    """The run's bound devices; fields a run recorded before they existed come from `costs.shapes.GPUS`."""
    out = []
    for d in cfg["devices"]:
        known = dataclasses.asdict(GPU_BY_NAME[d["name"]]) if d["name"] in GPU_BY_NAME else {}
        out.append(DeviceBound(**{**known, **{k: v for k, v in d.items() if v is not None}}))
    return out


def model_for(plan: dict) -> tuple[object | None, str]:
    """The shape's whole-pass byte model, or None and why it is missing (a config file not shipped)."""
    try:
        return pass_model(plan["shape"]["name"]), ""
    except UserError as e:
        return None, str(e)


def regime(measured: float, bytes_ratio: float, flops_ratio: float) -> str:
    low, high = sorted((bytes_ratio, flops_ratio))
    return BETWEEN if low <= measured <= high else ABOVE if measured > high else BELOW


def add_bounds(records: list[dict], cfg: dict, plan: dict, routes: dict, reference: str) -> dict:
    """Whole-pass bounds, the FLOPs ratio and the regime on every record; returns what the model used."""
    model, missing = model_for(plan)
    steps = cfg["world"]["tree"]["num_steps"]
    shape = plan["shape"]
    for r in records:
        r["method"] = routes.get(r["variant"], {}).get("method")
        r["prune"] = routes.get(r["variant"], {}).get("prune")
        r["flops_per_token"] = r["routed_per_pass"] / r["tokens_per_pass"]
        if model is None or r["method"] is None:
            continue
        speculative = METHODS[r["method"]].speculates
        per_pass = model.step_bytes(r["read_mb"] * 1e6, CONTEXT, speculative, steps)
        r["nonexpert_mb_per_pass"] = (per_pass - r["read_mb"] * 1e6) / 1e6
        for gpu in devices(cfg):
            for link in LINKS if r["store"] != "resident" else LINKS[:1]:
                ms = step_bound(per_pass, r["moved_mb"] * 1e6, gpu, link) / r["tokens_per_pass"] * 1e3
                r[_key(gpu.name, link)] = ms
    for r in records:
        base = next(b for b in records if b["store"] == r["store"] and b["variant"] == reference)
        r["flops_speedup_per_token"] = base["flops_per_token"] / r["flops_per_token"]
        for key in [k for k in r if k.startswith("whole_ms_per_token_")]:
            if base.get(key):
                r[key.replace("whole_ms", "whole_speedup")] = base[key] / r[key]
        bytes_key = next((k for k in r if k.startswith("bound_speedup_per_token_")), None)
        if "speedup_per_token" in r and bytes_key:
            r["regime"] = regime(r["speedup_per_token"], r[bytes_key], r["flops_speedup_per_token"])
    return {"model": model.describe(steps) if model else None, "missing": missing, "context": CONTEXT,
            "num_steps": steps, "shape": shape["name"]}


def _key(gpu: str, link: str) -> str:
    return f"whole_ms_per_token_{gpu}" + ("" if link == "published" else "_typical_link")
