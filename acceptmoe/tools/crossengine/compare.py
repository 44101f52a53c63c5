"""Comparisons of the native engine's and SGLang's generations of the same prompts under one plan.

Inputs are what the engines return (`Generation`s with their traces) and the passes the SGLang plugin
recorded (`ACCEPTMOE_DUMP`: per verify pass SGLang's tree mask and links, the trees the plugin recovered, per
MoE layer the router logits and eligible sets). A pass's sets are recomputed over the whole pass
(`select_pass`: every block with the pass's other roots), so a method whose sets depend on the batch is held to
its definition on SGLang's own batches, and a per-request method to its per-block sets; under token-side
admission each block is the request's admitted subtree (the pass file's `admitted` nodes, their logits' rows).
Nothing here runs an engine.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from acceptmoe.engine.admission import subtree_parents
from acceptmoe.engine.tree import ancestor_mask
from acceptmoe.methods import BlockInfo, Plan, select_pass


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
    in_flight: int = 0           # requests SGLang had in flight (0: all the prompts at once)
    native_mode: str = "alone"   # how the native engine ran them: "alone" (generate) or "batched" (generate_batch)
    twin: str | None = None      # the method this one must equal token for token in both engines (one request
    twin_equal: int = 0          # per pass: a batch-crediting method is its `alone_twin`); prompts where it does

    @property
    def required_ok(self) -> bool:
        tokens = not self.lossless or self.tokens_equal == self.prompts
        sets = not self.restricts or (self.sets_checked > 0 and self.sets_equal == self.sets_checked)
        twin = self.twin is None or self.twin_equal == self.prompts
        return tokens and sets and twin and self.trees_recovered == self.requests_recorded

    def row(self) -> dict:
        return {**asdict(self), "required_ok": self.required_ok}


def paired_steps(native, sglang) -> tuple[int, int, int]:
    """(paired, trees equal, paths equal) over the two engines' steps in order, up to the first step whose trees
    or accepted paths differ (after it the contexts may differ)."""
    paired = trees = paths = 0
    for a, b in zip(native, sglang, strict=False):
        paired, trees, paths = paired + 1, trees + (a.parents == b.parents), paths + (a.path == b.path)
        if a.parents != b.parents or a.path != b.path:
            break
    return paired, trees, paths


def agreement(method: str, plan: Plan, native: Sequence, sglang: Sequence, dumps: Path | None,
              **context) -> Agreement:
    """native, sglang: one `Generation` per prompt, in prompt order; dumps: the plugin's pass files, if any;
    context: how the engines ran them (`Agreement.in_flight`, `native_mode`, `twin`, `twin_equal`)."""
    paired = trees = paths = 0
    for a, b in zip(native, sglang, strict=False):
        p, t, q = paired_steps(a.trace.blocks, b.trace.blocks)
        paired, trees, paths = paired + p, trees + t, paths + q
    tau = lambda gens: sum(g.mean_accept_length for g in gens) / max(1, len(gens))   # noqa: E731
    passes = recovered = recorded = checked = equal = 0
    for path in sorted(dumps.glob("*.pt")) if dumps is not None and dumps.is_dir() else []:
        rec = torch.load(path)
        if "mask" not in rec:
            continue
        passes += 1
        n, trees_of_pass = rec["width"], rec["parents"]
        for b, parents in enumerate(trees_of_pass):
            recorded += 1
            recovered += bool(torch.equal(ancestor_mask(torch.tensor(parents)), rec["mask"][b]))
        if not plan.spec.restricts:
            continue
        keeps = rec.get("admitted") or [list(range(n))] * len(trees_of_pass)
        blocks = [BlockInfo.from_parents(subtree_parents(parents, keep))
                  for parents, keep in zip(trees_of_pass, keeps, strict=True)]
        for layer in rec["layers"].values():
            full = layer["logits"][: len(blocks) * n].view(len(blocks), n, -1)
            z = torch.zeros_like(full)
            for b, keep in enumerate(keeps):                   # each block's tokens first, as select_pass reads
                z[b, : len(keep)] = full[b, keep]
            for b, want in enumerate(select_pass(plan, z, blocks)):
                checked += 1
                equal += bool(torch.equal(layer["eligible"][b], want.eligible))
    return Agreement(method, len(native), sum(a.tokens == b.tokens for a, b in zip(native, sglang, strict=False)),
                     paired, trees, paths, tau(native), tau(sglang), passes, recorded, recovered, checked, equal,
                     lossless=not plan.spec.restricts, restricts=plan.spec.restricts, **context)


COLUMNS = ("method", "SGLang in flight", "native", "tokens equal", "trees equal", "paths equal",
           "sets equal (SGLang's passes)", "trees recovered", "= its twin at one request", "tau native", "tau SGLang",
           "required")


def table(rows: Sequence[Agreement]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in rows:
        sets = f"{r.sets_equal}/{r.sets_checked}" if r.restricts else "-"
        twin = f"{r.twin}: {r.twin_equal}/{r.prompts}" if r.twin is not None else "-"
        lines.append(f"| {r.method} | {r.in_flight or 'all'} | {r.native_mode} | {r.tokens_equal}/{r.prompts} | "
                     f"{r.trees_equal}/{r.steps_paired} | {r.paths_equal}/{r.steps_paired} | {sets} | "
                     f"{r.trees_recovered}/{r.requests_recorded} | {twin} | {r.tau_native:.3f} | "
                     f"{r.tau_sglang:.3f} | {'ok' if r.required_ok else 'FAILED'} |")
    return "\n".join(lines)
