"""bench-engine's aten-op counter: a decode step of the tiny world is a fixed operation sequence, so the
per-step count does not depend on the generation lengths it is measured between."""
from pathlib import Path

from acceptmoe.engine import load_engine
from acceptmoe.methods import Variant
from acceptmoe.experiments.bench.engine_speed import AtenCounter, aten_ops_per_step

TINY = Path(__file__).parents[2] / "models" / "tiny"


def test_aten_ops_per_decode_step_is_fixed():
    engine = load_engine(TINY)

    def run(n):
        return len(engine.generate([5, 17, 300], Variant("vanilla-ar"), n, ignore_eos=True).accept_lengths)
    a, b = aten_ops_per_step(run, 4, 12), aten_ops_per_step(run, 6, 20)
    assert a == b and 100 < a < 2000
    with AtenCounter() as c:
        run(1)
    assert c.total > 0 and c.ops["aten.mm"] > 0
