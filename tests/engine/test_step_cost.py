"""A one-sequence target pass pays nothing for the batched verify pass: `MoEModel.forward` (one `Segment` of
`forward_batch`) dispatches no more aten operations than the pass did before `forward_batch` existed.

Operation counts, not seconds: a count is the same on every host for the pinned torch and the committed tiny
world, and it is the quantity a GPU pays per kernel launch. The bounds are the counts the one-sequence pass
dispatched before the batched pass was added (measured on that code with this test's inputs); a copy per
segment (slicing the rows of one sequence out of themselves) shows up here as a higher count.
`./reproduce.sh bench-engine` prints the per-step counts of whole generations beside their timings.
"""
from __future__ import annotations

import pytest
import torch

from acceptmoe.engine.model import MoEModel, Segment
from acceptmoe.paths import TINY
from acceptmoe.tools.bench.engine_speed import AtenCounter

# (new tokens, tree-masked) -> aten ops of one pass with two aux layers, as dispatched before forward_batch
BEFORE_BATCHING = {(1, False): 297, (20, False): 303, (64, True): 303}


@pytest.fixture(scope="module")
def model():
    return MoEModel.from_pretrained(TINY / "target")


def pass_inputs(model, tokens: int, masked: bool):
    ids, positions = torch.arange(3, 3 + tokens), torch.arange(tokens)
    mask = torch.tril(torch.ones(tokens, tokens, dtype=torch.bool)) if masked else None
    return ids, positions, model.new_cache(128), mask


def ops(fn) -> tuple[int, dict[str, int]]:
    fn()                                          # warm-up: tables built on first use are not per-pass work
    with AtenCounter() as counter:
        fn()
    return counter.total, counter.ops


@pytest.mark.parametrize("tokens, masked", list(BEFORE_BATCHING))
def test_a_one_sequence_pass_dispatches_what_it_did_before_batching(model, tokens, masked):
    ids, positions, cache, mask = pass_inputs(model, tokens, masked)
    total, by_name = ops(lambda: model.forward(ids, positions, cache, 0, mask=mask, aux_layers=(0, 1)))
    assert total <= BEFORE_BATCHING[tokens, masked], by_name


def test_two_segments_give_each_its_one_sequence_pass(model):
    """The batched pass the one-sequence path shortcuts still gives each segment its own logits and aux."""
    a, b = pass_inputs(model, 20, False), pass_inputs(model, 64, True)
    alone = [model.forward(i, p, c, 0, mask=m, aux_layers=(0, 1)) for i, p, c, m in (a, b)]
    a, b = pass_inputs(model, 20, False), pass_inputs(model, 64, True)
    together = model.forward_batch([Segment(i, p, c, 0, m) for i, p, c, m in (a, b)], aux_layers=(0, 1))
    for (logits, aux), (want_logits, want_aux) in zip(together, alone, strict=True):
        torch.testing.assert_close(logits, want_logits, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(aux, want_aux, rtol=1e-5, atol=1e-5)
