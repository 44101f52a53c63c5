"""bench-engine's aten-op counter (a decode step of the tiny world is a fixed operation sequence, so the
per-step count does not depend on the generation lengths it is measured between) and its profile components."""
from pathlib import Path

from acceptmoe.engine import TreeShape, load_engine
from acceptmoe.engine.backend import GenerationOptions
from acceptmoe.methods import Variant
from acceptmoe.tools.bench.engine_speed import (
    AtenCounter,
    aten_ops_per_step,
    profile_components,
    time_ours,
    time_pair,
)

TINY = Path(__file__).parents[2] / "models" / "tiny"


def test_aten_ops_per_decode_step_is_fixed():
    engine = load_engine(TINY)

    def run(n):
        plan = Variant("vanilla-ar").bind(engine.fit)
        return len(engine.generate([5, 17, 300], plan, n, GenerationOptions(ignore_eos=True)).accept_lengths)
    a, b = aten_ops_per_step(run, 4, 12), aten_ops_per_step(run, 6, 20)
    assert a == b and 100 < a < 2000
    with AtenCounter() as c:
        run(1)
    assert c.total > 0 and c.ops["aten.mm"] > 0


def test_profile_components_find_the_verifier_and_natural_routing():
    """The timers wrap the components' functions for one call and are removed after it; each component gets
    the wall time of its outermost calls, nested inside the target forward."""
    from acceptmoe.engine.model import MoEModel
    from acceptmoe.kernels.verifier import Verifier
    engine = load_engine(TINY, tree=TreeShape(2, 3, 6))
    sd, am = Variant("standard-sd").bind(engine.fit), Variant("acceptmoe").bind(engine.fit, commitment=(1.0, 0.8, 0.6))
    before = (Verifier.__call__, MoEModel.forward, type(engine.model.store).run)
    store = type(engine.model.store)
    total_sd, parts_sd, inside_sd = profile_components(lambda: time_ours(engine, [[5, 17, 300]], sd, 6), store)
    total_am, parts_am, inside_am = profile_components(lambda: time_ours(engine, [[5, 17, 300]], am, 6), store)
    assert (Verifier.__call__, MoEModel.forward, type(engine.model.store).run) == before      # unpatched again
    verifier, natural = "verifier: select + prune + route", "natural routing (kernels.natural)"
    forward, experts = "target forward (all of it)", "expert MLPs (ExpertStore.run)"
    assert parts_am[verifier] > 0 and parts_sd[natural] > 0
    assert parts_sd[verifier] == 0                   # Standard SD without a trace routes naturally, no verifier
    for total, parts in ((total_sd, parts_sd), (total_am, parts_am)):
        assert 0 < parts[experts] < parts[forward] <= total
    # nesting: every expert pass runs inside a target forward; the cpu verifier's natural top-k and gates
    # (engine.backend is cpu here) inside its call, and Standard SD's natural routing inside no verifier
    assert inside_am[forward, experts] == parts_am[experts]
    assert engine.backend != "cpu" or 0 < inside_am[verifier, natural] < parts_am[verifier]
    assert (verifier, natural) not in inside_sd


def test_time_pair_alternates_and_gives_a_ratio_per_prompt():
    engine = load_engine(TINY, tree=TreeShape(2, 3, 6))
    sd, am = Variant("standard-sd").bind(engine.fit), Variant("acceptmoe").bind(engine.fit, commitment=(1.0, 0.8, 0.6))
    totals, ratios = time_pair(engine, [[5, 17, 300], [7, 8]], (sd, am), 5, flip=True)
    assert len(ratios) == 2 and all(r > 0 for r in ratios)
    assert [tau >= 1.0 and tps > 0 for tps, tau in totals] == [True, True]


def test_bench_select_times_every_method_on_changing_logits():
    """bench-select cycles through distinct logits (one tensor timed again and again lets the CPU learn its
    sort); every speculative method gets a row with positive times and a set of at least top-k experts."""
    from acceptmoe.tools.bench import select_latency
    rows = select_latency.run(tokens=9, experts=16, top_k=2, blocks=2, repeats=4, threads=1)
    assert [r["method"] for r in rows] == list(select_latency.SPECULATING)
    assert all(r["verifier_ms"] > 0 and r["reference_ms"] > 0 and r["set_size"] >= 2 for r in rows)
    assert "| acceptmoe |" in select_latency.format_table(rows, 9, 16, 2, 2, 1)
