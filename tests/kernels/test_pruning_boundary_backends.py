"""The pruning budget at exactly rho through every verifier backend (torch, the compiled CPU library, the
Triton kernel under the interpreter), beside the readable reference: a block whose utilities are whole
numbers of tokens, so every backend's fixed-point sums land exactly on rho x the set's total, and the
budget includes equality (tests/methods/test_boundaries.py pins the rule on the reference and torch)."""
import pytest
import torch

from acceptmoe.kernels import BACKENDS, make_verifier
from acceptmoe.kernels.cpu_verifier import available
from acceptmoe.methods import BlockInfo, Fit, Router, SelectorConfig, Selection, Variant, prune, select

E = 8
PARENTS = [-1, 0, 0, 0, 0, 0, 0, 0]        # the root and seven children
CHOSEN = [0, 0, 0, 0, 1, 1, 2, 3]           # each token's top-1 expert: utilities 4, 2, 1, 1 of 8


def plan_for(rho: float):
    """AcceptMoE, top-1, every commitment weight exactly 1 (beta 0, level exponent 0), offloaded store."""
    selector = SelectorConfig(beta=0.0, level_exponent=0.0, prune_rho=rho, prune_min_set=0)
    return Variant("acceptmoe").bind(Fit(Router("softmax_topk", 1), E, 1, "offloaded"), commitment=(1.0, 1.0),
                                     selector=selector)


def logits() -> torch.Tensor:
    z = torch.zeros(1, len(PARENTS), E)
    z[0, torch.arange(len(PARENTS)), torch.tensor(CHOSEN)] = 4.0
    return z


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("rho, kept", [
    (0.25, [0, 1]),          # 1 + 1 == 0.25 of 8: both ones go (the budget includes equality)
    (0.2499, [0, 1, 2]),     # just under: one of them (ties: the higher index first)
    (0.125, [0, 1, 2]),      # exactly one
    (0.0, [0, 1, 2, 3]),     # no budget
])
def test_every_backend_prunes_at_exactly_rho_as_the_reference(backend, rho, kept):
    if backend == "cpu" and not available():
        pytest.skip("no C compiler for the CPU backend here")
    plan, block, z = plan_for(rho), BlockInfo.from_parents(PARENTS), logits()
    resident = torch.zeros(E, dtype=torch.bool)
    sel = select(plan, z[0], block)
    assert sel.utility[:4].tolist() == [4.0, 2.0, 1.0, 1.0] and sel.eligible[:4].all() and sel.anchor[0]
    want = prune(Selection(sel.eligible, sel.utility, sel.anchor), resident, plan)
    assert torch.nonzero(want).flatten().tolist() == kept
    verifier = make_verifier(backend, plan, "cpu")
    verifier.prepare(block)
    out = verifier(z, resident)
    assert torch.nonzero(out.eligible[0]).flatten().tolist() == kept, backend
