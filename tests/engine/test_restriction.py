"""The restriction is a named policy: `route(layer, logits)` is the verifier's constrained top-k for a
restricting plan and natural routing otherwise, and a `LayerRecord` beside it only reads what it computed."""
import torch

from acceptmoe.engine.restriction import LayerRecord, Restriction
from acceptmoe.kernels import make_verifier, natural
from acceptmoe.methods import BlockInfo, Fit, Router, Variant, route, select

ROUTER = Router.preset("softmax_topk", 2)
BLOCK = BlockInfo.from_parents([-1, 0, 0, 1, 2])


def _verifier(method: str):
    plan = Variant(method).bind(Fit(ROUTER, 16, BLOCK.max_depth), commitment=(1.0, 0.8, 0.5), b0=5)
    verifier = make_verifier("torch", plan)
    verifier.prepare(BLOCK)
    return verifier, plan


def test_route_is_the_plan_and_recording_changes_nothing():
    gen = torch.Generator().manual_seed(0)
    for method in ("acceptmoe", "count-b", "standard-sd"):
        verifier, plan = _verifier(method)
        plain = Restriction(verifier, None, ROUTER)
        recorded = Restriction(verifier, None, ROUTER, record=LayerRecord(ROUTER))
        for layer in range(3):
            logits = torch.randn(BLOCK.num_tokens, 16, generator=gen)
            ids, weights = plain.route(layer, logits)
            again = recorded(layer, logits)
            assert torch.equal(ids, again[0]) and torch.equal(weights, again[1]), method
            if plan.spec.restricts:                                       # inside S, as the reference routes
                assert torch.equal(ids, route(logits, select(plan, logits, BLOCK).eligible, ROUTER)[0])
            else:
                assert torch.equal(ids, natural(ROUTER, logits)[0])
        stats = recorded.record.stacked()
        assert stats.shape == (3, 1, 6) and stats[:, 0, 0].tolist() == [0.0, 1.0, 2.0]
        assert plain.record is None
