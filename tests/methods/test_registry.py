"""A method is one registry entry: every backend serves any combination of the registry's scores and sizings,
or refuses a method it cannot serve by name when it loads (never at run time, never silently)."""
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from acceptmoe.kernels import make_verifier
from acceptmoe.methods import (
    B0_METHOD,
    BASELINE,
    METHODS,
    REFERENCE,
    BackendCoverageError,
    BlockInfo,
    Fit,
    MethodSpec,
    Role,
    Router,
    Score,
    Sizing,
    Variant,
    fixed_twin,
    register_backend,
    register_method,
    registry,
    route,
    select,
    unregister_method,
)
from acceptmoe.registry import Registry

ROOT = Path(__file__).resolve().parents[2]
# combinations no built-in method uses: router mass with the root anchor, sized by effective rank; votes
# sized by effective rank
TOYS = (MethodSpec("toy-rm-self", Sizing.SELF, Score.ROUTER_MASS, anchor=True, label="Toy RM-self"),
        MethodSpec("toy-votes-self", Sizing.SELF, Score.VOTES, label="Toy votes-self"),
        MethodSpec("toy-gate-fixed", Sizing.FIXED, Score.GATE_MASS, anchor=True, label="Toy gate-fixed"))


@pytest.fixture
def toys():
    for spec in TOYS:
        register_method(spec)
    yield TOYS
    for spec in TOYS:
        unregister_method(spec.name)


def test_backends_declare_what_they_map_when_they_load():
    import acceptmoe.kernels.cpu_verifier  # noqa: F401
    import acceptmoe.kernels.torch_verifier  # noqa: F401
    import acceptmoe.kernels.triton_verifier  # noqa: F401
    assert {"reference", "torch", "cpu", "triton"} <= set(registry.BACKENDS)
    for coverage in registry.BACKENDS.values():
        assert coverage.scores == frozenset(Score)                       # every member, exhaustively
        assert coverage.sizings >= {Sizing.ALL, Sizing.FIXED, Sizing.SELF}


@pytest.mark.parametrize("backend", ["torch", "cpu", "triton"])
def test_every_backend_serves_a_toy_method_exactly_like_the_reference(toys, backend):
    """A new combination is one registry entry: no backend needs a line for it, and each agrees with the
    readable reference on sets and ids (the kernel under the Triton interpreter)."""
    gen = torch.Generator().manual_seed(0)
    router = Router.preset("softmax_topk", 2)
    block = BlockInfo.from_parents([-1, 0, 0, 1, 1, 2, 3])
    for spec in toys:
        plan = Variant(spec.name).bind(Fit(router, 24, block.max_depth), b0=6)
        for trial in range(3):
            logits = torch.randn(block.num_tokens, 24, generator=gen) * (1 + trial)
            ref = select(plan, logits, block)
            verifier = make_verifier(backend, plan)
            verifier.prepare(block)
            out = verifier(logits[None])
            assert torch.equal(out.eligible[0], ref.eligible), (spec.name, backend)
            assert torch.equal(out.anchor[0], ref.anchor)
            assert torch.equal(out.ids[0], route(logits, ref.eligible, router)[0])
            if spec.anchor:
                assert int(ref.anchor.sum()) == 2 and bool((ref.eligible | ~ref.anchor).all())


def test_a_backend_that_lacks_a_member_is_refused_at_registration_naming_the_method():
    with pytest.raises(BackendCoverageError, match="backend 'partial' cannot serve method 'moe-spec': "
                                                   "it maps no score ROUTER_MASS"):
        register_backend("partial", scores=set(Score) - {Score.ROUTER_MASS}, sizings=set(Sizing),
                         routing=registry.ROUTING_AXES)
    assert "partial" not in registry.BACKENDS
    with pytest.raises(BackendCoverageError, match="cannot serve method 'acceptmoe': it maps no sizing SELF"):
        register_backend("no-self", scores=set(Score), sizings=set(Sizing) - {Sizing.SELF},
                         routing=registry.ROUTING_AXES)


def test_a_method_that_a_loaded_backend_cannot_serve_is_refused_when_registered(monkeypatch):
    narrow = Registry("verifier backend")      # unchecked: the built-in methods need the votes it lacks
    narrow.add("narrow", registry.Coverage(frozenset(Score) - {Score.VOTES}, frozenset(Sizing)))
    monkeypatch.setattr(registry, "BACKENDS", narrow)
    with pytest.raises(BackendCoverageError, match="backend 'narrow' cannot serve method 'toy-votes-self'"):
        register_method(TOYS[1])
    assert "toy-votes-self" not in METHODS


def test_a_toy_method_registered_before_the_backends_load_is_served_at_their_import():
    """In a fresh interpreter: the method first, then the backends' modules import without refusing it."""
    script = (
        "from acceptmoe.methods import MethodSpec, Score, Sizing, register_method\n"
        "register_method(MethodSpec('toy', Sizing.SELF, Score.ROUTER_MASS, anchor=True))\n"
        "import acceptmoe.kernels.torch_verifier, acceptmoe.kernels.triton_verifier\n"
        "from acceptmoe.methods import registry\n"
        "print(sorted(registry.BACKENDS))\n")
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={"TRITON_INTERPRET": "1", "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "['cpu', 'reference', 'torch', 'triton']"


def test_the_registry_entries_are_consistent():
    with pytest.raises(ValueError, match="a score goes with a verification pass"):
        MethodSpec("bad", Sizing.NONE, Score.VOTES)
    with pytest.raises(ValueError, match="an anchor only means something"):
        MethodSpec("bad", Sizing.ALL, Score.GATE_MASS, anchor=True)
    with pytest.raises(ValueError, match="registered already"):
        register_method(METHODS["acceptmoe"])
    with pytest.raises(ValueError, match="built-in"):
        unregister_method("acceptmoe")
    assert [s.name for s in METHODS.values() if Role.SETS_B0 in s.roles] == ["acceptmoe"]


def test_each_role_is_held_once_and_counterparts_are_checked():
    held = [r for s in METHODS.values() for r in s.roles]
    assert sorted(held, key=lambda r: r.value) == sorted(Role, key=lambda r: r.value)     # each exactly once
    assert (B0_METHOD, BASELINE, REFERENCE) == tuple(registry.holder(r) for r in (Role.SETS_B0, Role.BASELINE, Role.REFERENCE))
    assert fixed_twin(B0_METHOD) == METHODS[B0_METHOD].budget_twin and METHODS[fixed_twin(B0_METHOD)].needs_budget
    with pytest.raises(ValueError, match="claims role SETS_B0, which 'acceptmoe' holds"):
        register_method(MethodSpec("toy-b0", Sizing.SELF, Score.VOTES, roles=frozenset({Role.SETS_B0})))
    with pytest.raises(ValueError, match="budget_twin 'count-b' must be a registered fixed-budget method with the same"):
        register_method(MethodSpec("toy-twin", Sizing.SELF, Score.COMMITMENT, anchor=True, budget_twin="count-b"))
    with pytest.raises(ValueError, match="credits the batch names the method it is alone"):
        MethodSpec("toy-shared", Sizing.SELF, Score.SHARED_COMMITMENT, anchor=True)
    with pytest.raises(ValueError, match="alone method 'count-b' must be"):
        register_method(MethodSpec("toy-shared", Sizing.SELF, Score.SHARED_COMMITMENT, anchor=True, alone="count-b"))
    assert "toy-b0" not in METHODS and "toy-twin" not in METHODS and "toy-shared" not in METHODS
    with pytest.raises(ValueError, match="declares no fixed-budget counterpart"):
        fixed_twin(BASELINE)
