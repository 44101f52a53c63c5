"""Comparisons of the native engine's and SGLang's generations of the same prompts under one plan.

Inputs are what the engines return (`Generation`s with their traces) and the passes the SGLang plugin
recorded (`ACCEPTMOE_DUMP`: per verify pass SGLang's tree mask and links, the trees the plugin recovered, per
MoE layer the router logits and eligible sets). Nothing here runs an engine.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import torch

from acceptmoe.engine.tree import ancestor_mask
from acceptmoe.methods import BlockInfo, Plan, select


@dataclass(frozen=True)
class Agreement:
    """One method's agreement between the engines (counts, so a reader can see the sample sizes)."""
    method: str
    prompts: int
    tokens_equal: int            # prompts whose generated tokens are equal
    steps_paired: int            # verify steps compared (in order, while the accepted paths so far agree)
    trees_equal: int             # paired steps whose trees (parent lists) are equal
    paths_equal: int             # paired steps whose accepted paths are equal
    tau_native: float
    tau_sglang: float
    passes: int = 0              # SGLang verify passes recorded
    requests_recorded: int = 0   # (pass, request) pairs recorded
    trees_recovered: int = 0     # (pass, request) whose recovered tree is the tree SGLang's attention masked
    sets_checked: int = 0        # (pass, request, layer) sets recomputed on SGLang's trees and logits
    sets_equal: int = 0
    lossless: bool = True        # the method keeps greedy tokens (tokens must agree)
    restricts: bool = False      # the method restricts routing (sets must agree)

    @property
    def required_ok(self) -> bool:
        tokens = not self.lossless or self.tokens_equal == self.prompts
        sets = not self.restricts or (self.sets_checked > 0 and self.sets_equal == self.sets_checked)
        return tokens and sets and self.trees_recovered == self.requests_recorded

    def row(self) -> dict:
        return {**asdict(self), "required_ok": self.required_ok}


def paired_steps(native, sglang) -> tuple[int, int, int]:
    """(paired, trees equal, paths equal) over the two engines' steps in order, up to the first step whose trees
    or accepted paths differ (after it the contexts may differ)."""
    paired = trees = paths = 0
    for a, b in zip(native, sglang):
        paired, trees, paths = paired + 1, trees + (a.parents == b.parents), paths + (a.path == b.path)
        if a.parents != b.parents or a.path != b.path:
            break
    return paired, trees, paths


def agreement(method: str, plan: Plan, native: Sequence, sglang: Sequence, dumps: Path | None) -> Agreement:
    """native, sglang: one `Generation` per prompt, in prompt order; dumps: the plugin's pass files, if any."""
    paired = trees = paths = 0
    for a, b in zip(native, sglang):
        p, t, q = paired_steps(a.trace.blocks, b.trace.blocks)
        paired, trees, paths = paired + p, trees + t, paths + q
    tau = lambda gens: sum(g.mean_accept_length for g in gens) / max(1, len(gens))   # noqa: E731
    passes = recovered = recorded = checked = equal = 0
    for path in sorted(dumps.glob("*.pt")) if dumps is not None and dumps.is_dir() else []:
        rec = torch.load(path)
        if "mask" not in rec:
            continue
        passes += 1
        n = rec["width"]
        for b, parents in enumerate(rec["parents"]):
            recorded += 1
            recovered += bool(torch.equal(ancestor_mask(torch.tensor(parents)), rec["mask"][b]))
            if not plan.spec.restricts:
                continue
            block = BlockInfo.from_parents(parents)
            for layer in rec["layers"].values():
                want = select(plan, layer["logits"][b * n:(b + 1) * n], block).eligible
                checked += 1
                equal += bool(torch.equal(layer["eligible"][b], want))
    return Agreement(method, len(native), sum(a.tokens == b.tokens for a, b in zip(native, sglang)), paired,
                     trees, paths, tau(native), tau(sglang), passes, recorded, recovered, checked, equal,
                     lossless=not plan.spec.restricts, restricts=plan.spec.restricts)


COLUMNS = ("method", "tokens equal", "trees equal", "paths equal", "sets equal (SGLang's trees)",
           "trees recovered", "tau native", "tau SGLang", "required")


def table(rows: Sequence[Agreement]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in rows:
        sets = f"{r.sets_equal}/{r.sets_checked}" if r.restricts else "-"
        lines.append(f"| {r.method} | {r.tokens_equal}/{r.prompts} | {r.trees_equal}/{r.steps_paired} | "
                     f"{r.paths_equal}/{r.steps_paired} | {sets} | {r.trees_recovered}/{r.requests_recorded} | "
                     f"{r.tau_native:.3f} | {r.tau_sglang:.3f} | {'ok' if r.required_ok else 'FAILED'} |")
    return "\n".join(lines)
