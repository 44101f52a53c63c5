"""B0's rule on its boundaries, from synthetic AcceptMoE traces through `spine.b0.decide_b0`: which
prompts decide, and whether the decision records that the rule wanted more prompts than the pair has
(`limited`, keyed on the first interval's crossing: that one asks for the fallback prompts)."""
import random

from acceptmoe.engine.trace import Trace
from acceptmoe.experiments.spine import b0 as b0_rule
from acceptmoe.experiments.spine.config import B0Config


def _trace(index: int, set_sizes: list[list[int]]) -> Trace:
    """One trace: one block per entry of set_sizes, each with one set size per layer."""
    t = Trace(meta={"index": index})
    for step, sizes in enumerate(set_sizes):
        t.add_block(step, [-1, 0], [0], [[layer, s, 8, 10, s, 1.0] for layer, s in enumerate(sizes)])
    return t


def _crossing_then_clear(n: int) -> list[Trace]:
    """The first 50 prompts straddle 23.5 widely; the later ones hold many blocks at 23."""
    rng = random.Random(0)
    first = [_trace(i, [[rng.choice([20, 27])]]) for i in range(50)]
    return first + [_trace(50 + i, [[23]] * 40) for i in range(n - 50)]


def test_a_first_crossing_with_fewer_prompts_than_the_fallback_is_limited_even_when_they_decide_clearly():
    """80 prompts: the first 50 cross, so the rule wants 100; the 80 it has decide without crossing."""
    d = b0_rule.decide_b0(_crossing_then_clear(80), B0Config(resamples=500))
    assert d.first_crossed and not d.crosses_boundary and d.n_prompts == 80
    assert d.limited and d.available_prompts == 80


def test_enough_prompts_for_the_fallback_are_not_limited():
    d = b0_rule.decide_b0(_crossing_then_clear(100), B0Config(resamples=500))
    assert d.first_crossed and d.n_prompts == 100 and not d.limited


def test_a_clear_first_interval_with_fewer_prompts_than_the_fallback_is_not_limited():
    """60 prompts, the first 50 clear: the rule wants 50 and has them (crossing or not later)."""
    d = b0_rule.decide_b0([_trace(i, [[23]]) for i in range(60)], B0Config(resamples=200))
    assert not d.first_crossed and d.n_prompts == 50 and not d.limited
