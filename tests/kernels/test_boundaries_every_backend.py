"""The selector's exact boundaries through every verifier backend (torch, the compiled CPU library, the
Triton kernel under the interpreter), beside the readable reference, on blocks whose utilities are whole
numbers of tokens, so every backend's fixed-point sums land exactly on them: the pruning budget at exactly
rho x the set's total (the budget includes equality), and the effective rank when exp(H) is exactly an
integer (that many experts, not one more). tests/methods/test_boundaries.py pins the rules on the reference
and torch."""
import pytest
import torch

from acceptmoe.kernels import VERIFIERS, make_verifier
from acceptmoe.kernels.cpu_verifier import available
from acceptmoe.methods import BlockInfo, Fit, Router, Selection, SelectorConfig, Variant, prune, select

E = 8
PARENTS = [-1, 0, 0, 0, 0, 0, 0, 0]        # the root and seven children
CHOSEN = [0, 0, 0, 0, 1, 1, 2, 3]           # each token's top-1 expert: utilities 4, 2, 1, 1 of 8


def plan_for(rho: float, store: str = "offloaded", **selector):
    """AcceptMoE, top-1, every commitment weight exactly 1 (beta 0, level exponent 0)."""
    config = SelectorConfig(beta=0.0, level_exponent=0.0, prune_rho=rho, prune_min_set=0, **selector)
    return Variant("acceptmoe").bind(Fit(Router.preset("softmax_topk", 1), E, 1, store), commitment=(1.0, 1.0),
                                     selector=config)


def logits(chosen: list[int] = CHOSEN) -> torch.Tensor:
    z = torch.zeros(1, len(chosen), E)
    z[0, torch.arange(len(chosen)), torch.tensor(chosen)] = 4.0
    return z


@pytest.mark.parametrize("backend", VERIFIERS.names())
def test_every_backend_sizes_an_exact_integer_rank_as_the_reference(backend):
    """The root's expert 7 is the anchor; the others' utilities are 4, 1, 1, 1, 1 of 8 (probabilities 1/2 and
    four 1/8): H = 2 bits, exp(H) = 4 exactly, so without a tolerance the anchor and 4 experts, not 5."""
    if backend == "cpu" and not available():
        pytest.skip("no C compiler for the CPU backend here")
    chosen = [7, 0, 0, 0, 0, 1, 2, 3, 4]
    block = BlockInfo.from_parents([-1] + [0] * 8)
    plan, z = plan_for(0.0, "resident", rank_tolerance=0.0), logits(chosen)
    sel = select(plan, z[0], block)
    assert sel.utility[:5].tolist() == [4.0, 1.0, 1.0, 1.0, 1.0] and sel.anchor[7]
    assert int(sel.eligible.sum()) == 5 and sel.eligible[7] and sel.eligible[0]
    verifier = make_verifier(backend, plan, "cpu")
    verifier.prepare(block)
    out = verifier(z)
    assert torch.equal(out.eligible[0], sel.eligible), (backend, out.eligible[0], sel.eligible)


@pytest.mark.parametrize("backend", VERIFIERS.names())
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
