"""The batch-shared selector (`acceptmoe-shared`, `Score.SHARED_COMMITMENT`, docs/method.md "Batch-shared
commitment") on every backend: a pass of one block is AcceptMoE bit for bit, and in a pass of several each
block's score is its AcceptMoE utility plus the other roots' gates, so the experts the other roots route to
join its set. The backends against the reference on multi-block passes: test_verifier_kernel's cases."""
import pytest
import torch

from acceptmoe.kernels import VERIFIERS, make_verifier
from acceptmoe.kernels.cpu_verifier import available
from acceptmoe.methods import BlockInfo, Fit, Router, Variant, select_pass

E, K = 16, 2
P_HAT = (1.0, 0.6, 0.3, 0.2)
TREE = BlockInfo.from_parents([-1, 0, 0, 1, 2, 3])


def plans(router: Router) -> tuple:
    fit = Fit(router, E, max_depth=3)
    return tuple(Variant(m).bind(fit, commitment=P_HAT) for m in ("acceptmoe", "acceptmoe-shared"))


@pytest.mark.parametrize("backend", VERIFIERS.names())
def test_one_block_is_acceptmoe_and_other_roots_are_credited(backend):
    if backend == "cpu" and not available():
        pytest.skip("no C compiler for the CPU backend here")
    gen = torch.Generator().manual_seed(5)
    router = Router.preset("softmax_topk", K)
    plain, shared = plans(router)
    z = torch.randn(4, TREE.num_tokens, E, generator=gen) * 2
    outs = {}
    for plan in (plain, shared):
        verifier = make_verifier(backend, plan, "cpu")
        verifier.prepare(TREE)
        alone = verifier(z[:1])
        verifier.prepare([TREE] * 4)
        outs[plan.spec.name] = alone, verifier(z)
    (plain_one, plain_four), (shared_one, shared_four) = outs["acceptmoe"], outs["acceptmoe-shared"]
    for a, b in zip(plain_one, shared_one, strict=True):                      # B = 1: AcceptMoE exactly, every field
        assert torch.equal(a, b)
    ids, gates = router.natural(z[:, 0])                          # the roots' K and gates, [4, k]
    roots = torch.zeros(4, E).scatter(-1, ids, gates)
    credit = roots.sum(0) - roots                                 # the other roots' demand per block
    torch.testing.assert_close(shared_four.utility, plain_four.utility + credit, rtol=0, atol=4 * 2.0 ** -22)
    other_roots = torch.zeros(4, E, dtype=torch.bool).scatter(-1, ids, True)
    other_roots = (other_roots.sum(0) - other_roots.int()) > 0     # experts some other root routes to
    assert torch.equal(shared_four.anchor, plain_four.anchor)     # the anchor stays the block's own root
    assert not torch.equal(shared_four.eligible, plain_four.eligible)
    gained = (shared_four.eligible & ~plain_four.eligible).sum()
    assert gained > 0 and (shared_four.eligible & ~plain_four.eligible & ~other_roots).sum() < gained
    assert torch.equal(shared_four.eligible, torch.stack([s.eligible for s in select_pass(shared, z, [TREE] * 4)]))


def test_padding_rows_credit_nothing():
    """Rows reserved but not used in a step (`prepare(..., rows=R)`) add no root terms: a pass of 2 blocks
    in 4 reserved rows gives the sets of a pass of exactly those 2."""
    plan = plans(Router.preset("topk_softmax", K))[1]
    z = torch.randn(4, TREE.num_tokens, E, generator=torch.Generator().manual_seed(6))
    for backend in ("torch", "cpu", "triton"):
        if backend == "cpu" and not available():
            continue
        exact, reserved = make_verifier(backend, plan, "cpu"), make_verifier(backend, plan, "cpu")
        exact.prepare([TREE] * 2)
        reserved.prepare([TREE] * 2, rows=4)
        assert torch.equal(exact(z[:2]).eligible, reserved(z).eligible[:2]), backend
