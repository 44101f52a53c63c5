"""The fused kernel against the torch verifier backend on the same device and logits: what is compared, and why
the tolerance is one fixed-point unit per term.

Where two backends can part. Each computes a block score's per-token terms (a gate weight, a softmax
probability, alpha times either) in fp32 and truncates each to a multiple of one unit, 2^-score_bits
(`methods.fixed.truncate`, 2^-22 by default). Everything after that is exact: the integer sums, the anchor and
the natural top-k (the logits' own order; the grouped router's is its sigmoids', which each backend computes:
the same order on distinct bf16 logits short of saturation, a premise a GPU run tests), the ranking,
effective-rank sizing, pruning, the constrained top-k.
The terms are not: on NVIDIA GPUs the kernel's `tl.exp` is `ex2.approx.f32` and its division `div.full.f32`,
torch's are the accurate ones, so a term differs by a few fp32 ulps, less than one unit (four ulps of a term
in [1/2, 1), more below). Two reals less than one unit apart truncate to integers at most one unit apart,
never two: the tolerance is exactly one unit per term. (That the terms part by less than a unit is what a GPU
run tests: where they part by more, the check fails and says by how many units.) A block score sums n_e terms for expert e (the tokens
whose natural top-k holds e; every token for router mass) and is held as fp32, so two scores may differ by n_e
units, plus the fp32 spacing of the larger where that exceeds one unit (`tolerance`).

Per case (one block, one layer; `compare`):
- anchor: equal;
- scores: |U_kernel - U_torch| within the tolerance for every expert (Count-B: its votes exactly, and the gate
  mass that breaks its ties, read from each backend's Standard SD launch with demand "gate" on the same
  logits, within the tolerance);
- the set: the torch backend's own sizing and pruning (`torch_verifier.SIZES`, `prune_batched`) applied to the
  kernel's scores give exactly the kernel's set;
- routing: ids exactly the constrained top-k inside the kernel's set (`route_in`), weights within 1e-6.
A set that differs from torch's is then a decision between scores within the tolerance: the case reports it
with its margin, the smallest gap in torch's scores (units) between an expert that changed sides and torch's
boundary (0: a tie torch broke by index). Anything else fails, and `describe` names the first such case with
the largest score difference against its tolerance.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

from acceptmoe.kernels import VerifierOutput
from acceptmoe.kernels.torch_verifier import SIZES, prune_batched
from acceptmoe.methods import Plan, Score, Selection, route_in

WEIGHT_TOL = 1e-6
VOTE_PLACE = 2.0 ** 40          # Count-B's ranking key in units: votes above the gate mass that breaks their ties

# per score: how many terms each expert's block score sums, from the natural top-k membership [T, E]
TERMS = {
    Score.GATE_MASS: lambda member: member.sum(0),
    Score.VOTES: lambda member: torch.zeros(member.shape[1], dtype=torch.long),    # counted, never truncated
    Score.ROUTER_MASS: lambda member: torch.full((member.shape[1],), member.shape[0], dtype=torch.long),
    Score.COMMITMENT: lambda member: member.sum(0),
    Score.SHARED_COMMITMENT: lambda member: member.sum(0),        # one block: no other roots
}


def units(score: Tensor, bits: int) -> Tensor:
    """float64 [...]: held fp32 scores in units of 2^-bits (exactly)."""
    return score.double() * 2.0 ** bits


def tolerance(terms: Tensor, a: Tensor, b: Tensor, bits: int) -> Tensor:
    """float64 [E] units: one per term, plus the fp32 spacing (in units) of the larger of two held scores a, b
    where it exceeds one unit (both are then rounded, each by at most half of it)."""
    m = torch.maximum(a.abs(), b.abs()).float()
    spacing = units(torch.nextafter(m, torch.full_like(m, math.inf)) - m, bits)
    return terms.double() + torch.where(spacing > 1, spacing, 0.0)


def _held(out: VerifierOutput) -> VerifierOutput:
    """Block 0 of a verifier's output, on the CPU."""
    return VerifierOutput(*(None if x is None else x[0].cpu() for x in out))


def compare(plan: Plan, logits: Tensor, torch_out: VerifierOutput, kernel_out: VerifierOutput,
            resident: Tensor | None, gate_mass: tuple[Tensor, Tensor] | None = None) -> dict:
    """One case: logits [T, E] of one block (every token valid), both backends' outputs for it (B = 1, any
    device), the resident mask if pruning, Count-B's gate mass (torch's [E], the kernel's [E]). -> a row: ok,
    what held, the worst score difference against its tolerance, the set against torch's and its margin."""
    bits, t, k = plan.selector.score_bits, _held(torch_out), _held(kernel_out)
    z = logits.float().cpu()                                                       # [T, E]
    member = torch.zeros(z.shape, dtype=torch.bool).scatter(-1, plan.router.natural(z)[0], True)   # K_t
    scores = [(t.utility, k.utility, TERMS[plan.spec.score](member))]
    if gate_mass is not None:
        scores.append((gate_mass[0].cpu(), gate_mass[1].cpu(), TERMS[Score.GATE_MASS](member)))
    diff = torch.stack([(units(b, bits) - units(a, bits)).abs() for a, b, _ in scores])           # [n, E]
    tol = torch.stack([tolerance(n, a, b, bits) for a, b, n in scores])                            # [n, E]
    which, expert = divmod(int((diff - tol).argmax()), diff.shape[1])
    ruled = SIZES[plan.spec.sizing](plan, k.utility[None], None if gate_mass is None else scores[1][1][None],
                                    k.anchor[None])                                                # [1, E]
    if resident is not None:
        ruled = prune_batched(plan, Selection(ruled, k.utility[None], k.anchor[None]), resident.cpu())
    row = {"anchor_equal": torch.equal(t.anchor, k.anchor), "scores_within": bool((diff <= tol).all()),
           "set_by_the_rules": torch.equal(ruled[0], k.eligible), "routed": _routed(plan, z, k),
           "score": "gate mass" if which else "score", "expert": expert, "diff_units": float(diff[which, expert]),
           "tolerance_units": float(tol[which, expert]), "max_diff_units": float(diff.max()),
           "same_set": torch.equal(t.eligible, k.eligible)}
    row["ok"] = row["anchor_equal"] and row["scores_within"] and row["set_by_the_rules"] and row["routed"]
    key = units(t.utility, bits) if gate_mass is None else t.utility.double() * VOTE_PLACE + units(scores[1][0], bits)
    row["margin_units"] = None if row["same_set"] else margin(key, t.eligible, k.eligible, t.anchor)
    return row


def _routed(plan: Plan, z: Tensor, k: VerifierOutput) -> bool:
    """The kernel's ids are the constrained top-k inside its own set, its weights within WEIGHT_TOL."""
    if k.ids is None:
        return True
    ids, weights = route_in(z, k.eligible, plan.router)                                            # [T, k]
    return torch.equal(k.ids, ids) and bool(((k.weights - weights).abs() <= WEIGHT_TOL).all())


def margin(key: Tensor, torch_set: Tensor, kernel_set: Tensor, anchor: Tensor) -> float:
    """The smallest gap of `key` [E] (torch's ranking key, units) between an expert in one set only and torch's
    boundary: for an expert torch kept and the kernel dropped, its lead over torch's best non-member; for one
    the kernel kept and torch dropped, its lag behind torch's weakest non-anchor member."""
    inside, outside = torch_set & ~anchor, ~torch_set
    weakest = key[inside].min() if inside.any() else torch.tensor(math.inf, dtype=key.dtype)
    best_out = key[outside].max() if outside.any() else torch.tensor(-math.inf, dtype=key.dtype)
    gaps = torch.cat([key[torch_set & ~kernel_set] - best_out, weakest - key[kernel_set & ~torch_set]])
    return float(gaps.min())


def describe(case: dict) -> str:
    """One line for a case that differs from torch: where, what failed, the worst score difference, the margin."""
    where = f"{case['method']} {case['router']}{' prune' if case['prune'] else ''}"
    failed = [name for name in ("anchor_equal", "scores_within", "set_by_the_rules", "routed") if not case[name]]
    text = (f"{where}: {case['score']} of expert {case['expert']} differs by {case['diff_units']:.0f} units "
            f"(tolerance {case['tolerance_units']:.0f})")
    if not case["same_set"]:
        text += f"; its set differs from torch's, margin {case['margin_units']:.0f} units"
    return text + (f"; failed: {', '.join(failed)}" if failed else "")
