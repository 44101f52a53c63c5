"""gpu-check's verifier-kernel checks: every speculating method, every router preset (and the grouped one with
four groups, two chosen), with and without residency pruning, on one block of bf16 router logits per case.

- `check_kernel_torch` (check `kernel`, the verdict): the kernel against the torch backend on the same device
  and the same logits, with deliberate ties at and inside the top-k boundary, under `agreement`'s rules (one
  fixed-point unit per score term where the two exps part; everything else exact). It also lists the
  specialisations the kernel compiled in this process with the warps chosen for each (`choose_warps`; on CUDA).
- `check_kernel` (check `kernel-reference`, informational): the kernel against the readable reference
  (`select`, `prune`, `route`, Python on the CPU) on tie-free logits, exactly: how many rows differ. The
  reference takes its exp from torch on the CPU, so near-ties may legitimately part; the row informs and never
  fails the run.

    check = check_kernel_torch("cuda")        # {"check": "kernel", "verdict": "PASS", "cases": [...], ...}
"""
from __future__ import annotations

import torch

from acceptmoe.methods import BASELINE, METHODS, Fit, Score, Variant

from .agreement import compare, describe
from .base import P_HAT, random_block, verdict


def tied_logits(T: int, E: int, k: int, gen: torch.Generator, ties: bool = True) -> torch.Tensor:
    """bf16 router logits [T, E] with ties: every second row ties its k-th and (k+1)-th largest (the top-k
    boundary), every third row its two largest (order inside the top-k). ties=False: distinct values."""
    if not ties:
        return (torch.randperm(T * E, generator=gen).view(T, E).float() / 64 - T * E / 128).to(torch.bfloat16)
    z = torch.randn(T, E, generator=gen) * 2
    order = z.argsort(-1, descending=True)                                   # [T, E]
    rows = torch.arange(T)
    b = rows[rows % 2 == 0]
    z[b, order[b, k]] = z[b, order[b, k - 1]]
    t = rows[rows % 3 == 0]
    z[t, order[t, 1]] = z[t, order[t, 0]]
    return z.to(torch.bfloat16)


def kernel_cases(T: int, E: int, k: int, seed: int, ties: bool):
    """(router, plan, block, logits, resident | None) for every speculating method, every router preset, with and
    without residency pruning (pruning only where the method restricts, under an offloaded store)."""
    from acceptmoe.methods import ROUTER_NAMES, Router, verifier_methods
    gen = torch.Generator().manual_seed(seed)
    routers = [Router.preset(name, k) for name in ROUTER_NAMES] + [
        Router.preset("sigmoid_grouped", k, groups=4, group_top=2, scale=2.5)]                # E / 2 experts hold k
    for router in routers:
        for method, spec in METHODS.items():
            for prune in ((False, True) if spec.restricts else (False,)):
                if method not in verifier_methods():      # no verify pass, or one its selector's verifier serves
                    continue
                block = random_block(T, gen)
                logits = tied_logits(T, E, k, gen, ties)
                resident = (torch.rand(E, generator=gen) < 0.5) if prune else None
                fit = Fit(router, E, max_depth=5, store="offloaded" if prune else "resident")
                plan = Variant(method, prune=prune if spec.restricts else None).bind(
                    fit, commitment=P_HAT, b0=max(k, E // 4))
                yield router, plan, block, logits, resident


def run_verifier(backend: str, plan, block, logits: torch.Tensor, resident: torch.Tensor | None, device):
    """One block's VerifierOutput (B = 1) from `backend` on `device`: logits [T, E], resident [E] | None."""
    from acceptmoe.kernels import make_verifier
    verifier = make_verifier(backend, plan, device)
    verifier.prepare([block])
    return verifier(logits[None].to(device), None if resident is None else resident.to(device))


def gate_mass_plan(plan):
    """Standard SD with demand "gate" on `plan`'s fit and score bits: its block score is the gate mass that
    breaks Count-B's vote ties (the same per-token gate terms, summed the same way, in every backend)."""
    return Variant(BASELINE, overrides=(("demand_score", "gate"), ("score_bits", plan.selector.score_bits))
                   ).bind(plan.fit, commitment=P_HAT)


def check_kernel_torch(device, T: int = 64, E: int = 128, k: int = 8, seed: int = 0, backend: str = "triton") -> dict:
    """The verifier `backend` (the fused kernel) against the torch backend on `device`, on tied bf16 logits:
    every case of `kernel_cases` through `agreement.compare`. PASS when every case holds; the first case that
    differs from torch (a failure, or another set at a near-tie) is reported with its margin."""
    device, cases = torch.device(device), []
    for router, plan, block, logits, resident in kernel_cases(T, E, k, seed, ties=True):
        outs = [run_verifier(b, plan, block, logits, resident, device) for b in ("torch", backend)]
        gate_mass = None
        if plan.spec.score is Score.VOTES:
            gplan = gate_mass_plan(plan)
            gate_mass = tuple(run_verifier(b, gplan, block, logits, None, device).utility[0]
                              for b in ("torch", backend))
        row = compare(plan, logits, *outs, resident, gate_mass)
        cases.append({"router": router.name + ("-grouped" if router.grouped else ""), "method": plan.spec.name, "prune": plan.prune, **row})
    first = next((c for c in cases if not c["ok"] or not c["same_set"]), None)
    return {"check": "kernel", "verdict": verdict(all(c["ok"] for c in cases)), "backend": backend,
            "against": "torch", "shape": [T, E, k], "cases": cases,
            "sets_differing": sum(not c["same_set"] for c in cases),
            "max_diff_units": max(c["max_diff_units"] for c in cases),
            "first_difference": describe(first) if first else None,
            "specialisations": _specialisations() if device.type == "cuda" else None}


def _specialisations() -> dict:
    """The kernel's specialisations launched in this process on the GPU: how many, warps chosen, still spilling."""
    from acceptmoe.kernels.triton_verifier import chosen
    made = chosen()
    warps = sorted({c.num_warps for c in made})
    return {"compiled": len(made), "warps": {w: sum(c.num_warps == w for c in made) for w in warps},
            "spilling": sum(c.spills for c in made)}


def check_kernel(device, T: int = 64, E: int = 128, k: int = 8, seed: int = 0, ties: bool = False,
                 backend: str = "triton") -> dict:
    """The verifier `backend` against the readable reference on tie-free bf16 logits (ties=True: tied ones),
    every case of `kernel_cases`: eligible sets and routed ids exactly (in order), weights to 1e-6. Reported as
    information (`verdict` INFO): rows differing, of rows compared."""
    from acceptmoe.methods import prune, route, select
    device = torch.device(device)
    cases, bad_rows, rows = [], 0, 0
    for router, plan, block, logits, resident in kernel_cases(T, E, k, seed, ties):
        sel = select(plan, logits, block)                                        # the readable reference
        eligible = prune(sel, resident, plan) if resident is not None else sel.eligible
        ids, weights = route(logits, eligible, router)
        out = run_verifier(backend, plan, block, logits, resident, device)
        row_bad = ((out.ids[0].cpu() != ids).any(-1)
                   | ~torch.isclose(out.weights[0].cpu(), weights, atol=1e-6).all(-1))
        same_set = bool(torch.equal(out.eligible[0].cpu(), eligible))
        cases.append({"router": router.name + ("-grouped" if router.grouped else ""), "method": plan.spec.name, "prune": plan.prune,
                      "same_eligible": same_set, "rows_differing": int(row_bad.sum())})
        bad_rows += int(row_bad.sum()) + (0 if same_set else T)
        rows += T
    return {"check": "kernel-reference", "verdict": "INFO", "backend": backend, "shape": [T, E, k], "ties": ties,
            "rows": rows, "rows_differing": bad_rows, "cases": cases}
