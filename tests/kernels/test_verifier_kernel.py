"""The fused Triton verifier kernel against the torch reference, under the Triton interpreter (conftest).

Each case is one awkward shape (T in {1, 7, 64}, E in {8, 60, 64, 128}, k in {1, 2, 4, 8}), router kind,
demand score, logit dtype and residency mask; every case runs all five verifier methods on one or two
blocks (the second one padded) and compares with the per-block reference (`select`, `prune_nonresident`,
`route`) and the batched path (`BlockSelector`, `prune_batched`). Sets and routed ids must agree exactly,
utilities and weights to 1e-6.
"""
from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from acceptmoe.kernels import FusedVerifier, KernelInputError, fused_select_route
from acceptmoe.methods import (
    BlockInfo, BlockSelector, ConfigError, Router, SelectorConfig, commitment_weights, prune_batched,
    prune_nonresident, route, select,
)

METHODS = ("standard-sd", "count-b", "moe-spec", "acceptmoe-b", "acceptmoe")
ROUTERS = {
    "renorm": Router("softmax_topk", 1, renormalize=True),
    "raw": Router("softmax_topk", 1, renormalize=False),
    "gptoss": Router("topk_softmax", 1),
}


@dataclass(frozen=True)
class Case:
    T: int
    E: int
    k: int
    router: str           # key of ROUTERS
    demand: str           # gate | softmax
    dtype: torch.dtype
    resident: str         # none | shared ([E]) | per-block ([B, E])
    blocks: int           # 1, or 2 with the second block padded
    budget: str           # k | third | all: the fixed budget B for count-b, moe-spec, acceptmoe-b

    def __str__(self) -> str:
        return (f"T{self.T}-E{self.E}-k{self.k}-{self.router}-{self.demand}-{str(self.dtype)[6:]}-"
                f"{self.resident}-B{self.blocks}-{self.budget}")


CASES = [
    Case(1, 8, 1, "gptoss", "gate", torch.float32, "none", 1, "k"),
    Case(7, 60, 2, "renorm", "gate", torch.float32, "shared", 2, "third"),
    Case(64, 64, 4, "raw", "softmax", torch.float32, "per-block", 2, "third"),
    Case(64, 128, 8, "renorm", "gate", torch.bfloat16, "none", 1, "third"),
    Case(7, 128, 8, "gptoss", "softmax", torch.float16, "per-block", 2, "k"),
    Case(64, 8, 1, "renorm", "gate", torch.float32, "shared", 2, "third"),
    Case(7, 8, 8, "gptoss", "gate", torch.float32, "none", 2, "all"),
    Case(1, 60, 4, "raw", "gate", torch.float16, "shared", 1, "all"),
    Case(64, 60, 2, "gptoss", "gate", torch.float32, "per-block", 2, "k"),
    Case(7, 64, 1, "raw", "softmax", torch.bfloat16, "shared", 2, "all"),
    Case(64, 128, 2, "gptoss", "softmax", torch.float32, "shared", 1, "k"),
    Case(1, 128, 1, "renorm", "softmax", torch.float32, "per-block", 2, "third"),
]


def random_tree(T: int, gen: torch.Generator) -> BlockInfo:
    """A draft tree of T nodes, at most 5 levels deep, in topological order."""
    parents, depth = [-1], [0]
    for t in range(1, T):
        shallow = [p for p in range(t) if depth[p] < 5]
        p = shallow[int(torch.randint(len(shallow), (1,), generator=gen))]
        parents.append(p)
        depth.append(depth[p] + 1)
    return BlockInfo.from_parents(parents)


def random_logits(B: int, T: int, E: int, dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    """[B, T, E] logits without ties inside a row; half precision draws each row's values without
    replacement from a grid exact in fp16 and bf16 (multiples of 1/64 in [-4, 4))."""
    if dtype == torch.float32:
        return torch.randn(B, T, E, generator=gen) * 2.0
    grid = torch.arange(-256, 256, dtype=torch.float32) / 64.0                      # [512]
    picks = torch.argsort(torch.rand(B, T, grid.numel(), generator=gen), dim=-1)[..., :E]
    return grid[picks].to(dtype)


def make_inputs(case: Case, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    blocks = [random_tree(case.T, gen)] + [random_tree(max(1, case.T // 2), gen)] * (case.blocks - 1)
    depth = max(b.max_depth for b in blocks)
    p_hat = (1.0,) + tuple(sorted(torch.rand(depth, generator=gen).clamp_min(0.05).tolist(), reverse=True))
    logits = random_logits(case.blocks, case.T, case.E, case.dtype, gen)
    if case.blocks > 1:                                   # padding rows hold garbage the kernel must ignore
        logits[1, blocks[1].num_tokens:] = torch.linspace(30.0, -30.0, case.E).to(case.dtype)
    resident = {"none": None, "shared": torch.rand(case.E, generator=gen) < 0.5,
                "per-block": torch.rand(case.blocks, case.E, generator=gen) < 0.5}[case.resident]
    return blocks, p_hat, logits, resident


def config_for(method: str, case: Case, p_hat: tuple) -> SelectorConfig:
    budget = {"k": case.k, "third": max(case.k, case.E // 3), "all": case.E}[case.budget]
    fixed = method in ("count-b", "moe-spec", "acceptmoe-b")
    return SelectorConfig(budget=budget if fixed else None, p_hat=p_hat, demand_score=case.demand,
                          prune_rho=0.3, prune_min_set=case.k + 1)


def reference(method, case, blocks, cfg, router, logits, resident):
    """Per-block reference: eligible [B, E], utility [B, E], anchor [B, E], ids [B, T, k], weights [B, T, k]."""
    out = []
    for b, block in enumerate(blocks):
        sel = select(method, logits[b, : block.num_tokens], block, router, cfg)
        eligible = sel.eligible
        if resident is not None:
            eligible = prune_nonresident(sel, resident if resident.dim() == 1 else resident[b], cfg)
        ids, weights = route(logits[b], eligible, router)
        out.append((eligible, sel.utility, sel.anchor, ids, weights))
    return [torch.stack(x) for x in zip(*out)]


def assert_matches(got, want, what: str) -> None:
    for name, g, w in zip(("eligible", "utility", "anchor", "ids", "weights"), got, want):
        if g.dtype in (torch.bool, torch.int64):
            assert torch.equal(g, w), f"{what}: {name} differs\n got {g}\nwant {w}"
        else:
            torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-6, msg=lambda m: f"{what}: {name}: {m}")


@pytest.mark.parametrize("case", CASES, ids=str)
def test_kernel_matches_reference(case: Case):
    blocks, p_hat, logits, resident = make_inputs(case)
    router = Router(ROUTERS[case.router].kind, case.k, ROUTERS[case.router].renormalize)
    for method in METHODS:
        cfg = config_for(method, case, p_hat)
        verifier = FusedVerifier(method, router, cfg, case.E, device="cpu")
        alpha, num_tokens = verifier.block_inputs(blocks, pad_to=case.T)
        got = verifier(logits, alpha if verifier.needs_alpha else None, num_tokens, resident)
        assert_matches(got, reference(method, case, blocks, cfg, router, logits, resident), f"{method} {case}")

        batched = BlockSelector(method, blocks, router, cfg, case.E)(logits)
        eligible = batched.eligible if resident is None else prune_batched(batched, resident, cfg)
        assert torch.equal(got.eligible, eligible), f"{method} {case}: differs from BlockSelector"


def test_pruning_removes_nonresident_low_utility_experts():
    case = Case(7, 60, 2, "renorm", "gate", torch.float32, "shared", 1, "all")
    blocks, p_hat, logits, _ = make_inputs(case, seed=3)
    router = Router("softmax_topk", 2)
    cfg = SelectorConfig(budget=60, p_hat=p_hat, prune_rho=0.5, prune_min_set=10)
    resident = torch.zeros(60, dtype=torch.bool)
    alpha = commitment_weights(blocks[0], cfg)
    sel, ids, _ = fused_select_route("acceptmoe-b", logits[0], alpha, router, cfg, resident=resident)
    ref = select("acceptmoe-b", logits[0], blocks[0], router, cfg)
    assert torch.equal(sel.eligible, prune_nonresident(ref, resident, cfg))
    assert 10 <= int(sel.eligible.sum()) < 60 and bool((sel.eligible | ~sel.anchor).all())
    assert torch.equal(ids, route(logits[0], sel.eligible, router)[0])


def test_pruning_keeps_at_least_k_experts_without_an_anchor():
    """count-b has no anchor: with prune_min_set < k the kernel still leaves k experts (s_min raised to k)."""
    case = Case(7, 60, 4, "renorm", "gate", torch.float32, "shared", 1, "k")
    blocks, _, logits, _ = make_inputs(case, seed=4)
    router = Router("softmax_topk", 4)
    cfg = SelectorConfig(budget=8, prune_rho=1.0, prune_min_set=0)
    resident = torch.zeros(60, dtype=torch.bool)
    sel, ids, _ = fused_select_route("count-b", logits[0], None, router, cfg, resident=resident)
    ref = select("count-b", logits[0], blocks[0], router, cfg)
    want = prune_nonresident(ref, resident, SelectorConfig(budget=8, prune_rho=1.0, prune_min_set=4))
    assert int(sel.eligible.sum()) == 4 and torch.equal(sel.eligible, want)
    assert torch.equal(ids, route(logits[0], want, router)[0])


def test_all_eligible_routing_is_natural_routing():
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(7, 60, generator=gen)
    for router in (Router("softmax_topk", 4), Router("softmax_topk", 4, False), Router("topk_softmax", 4)):
        sel, ids, weights = fused_select_route("standard-sd", logits, None, router, SelectorConfig())
        want_ids, want_weights = router.natural(logits)
        assert bool(sel.eligible.all()) and torch.equal(ids, want_ids)
        torch.testing.assert_close(weights, want_weights, rtol=1e-6, atol=1e-6)


def test_block_inputs_pad_alpha_and_count_tokens():
    gen = torch.Generator().manual_seed(2)
    blocks = [random_tree(7, gen), random_tree(3, gen)]
    cfg = SelectorConfig(p_hat=(1.0, 0.8, 0.6, 0.4, 0.3, 0.2))
    alpha, num_tokens = FusedVerifier("acceptmoe", Router("topk_softmax", 2), cfg, 8, "cpu").block_inputs(blocks)
    assert num_tokens.tolist() == [7, 3] and alpha.shape == (2, 7)
    assert torch.equal(alpha[1, :3], commitment_weights(blocks[1], cfg)) and not alpha[1, 3:].any()


@pytest.fixture
def verifier():
    return FusedVerifier("acceptmoe", Router("softmax_topk", 2), SelectorConfig(p_hat=(1.0, 0.5)), 8, "cpu")


@pytest.mark.parametrize("logits_shape, alpha_shape, match", [
    ((7, 8), (1, 7), "must be \\[B, T, E\\]"),
    ((1, 7, 9), (1, 7), "E=8"),
    ((1, 0, 8), (1, 0), "B, T >= 1"),
    ((0, 7, 8), (0, 7), "B, T >= 1"),
    ((1, 7, 8), (7,), "alpha must have shape \\(1, 7\\)"),
    ((2, 7, 8), (1, 7), "alpha must have shape \\(2, 7\\)"),
])
def test_bad_shapes_are_named(verifier, logits_shape, alpha_shape, match):
    with pytest.raises(KernelInputError, match=match):
        verifier(torch.zeros(logits_shape), torch.ones(alpha_shape))


def test_bad_dtypes_and_missing_inputs_are_named(verifier):
    logits, alpha = torch.zeros(1, 7, 8), torch.ones(1, 7)
    with pytest.raises(KernelInputError, match="logits dtype torch.float64"):
        verifier(logits.double(), alpha)
    with pytest.raises(KernelInputError, match="alpha dtype"):
        verifier(logits, alpha.half())
    with pytest.raises(KernelInputError, match="alpha is required"):
        verifier(logits, None)
    with pytest.raises(KernelInputError, match="num_tokens dtype"):
        verifier(logits, alpha, num_tokens=torch.ones(1))
    with pytest.raises(KernelInputError, match="resident dtype"):
        verifier(logits, alpha, resident=torch.ones(8))
    with pytest.raises(KernelInputError, match="resident must have shape \\(1, 8\\)"):
        verifier(logits, alpha, resident=torch.ones(2, 8, dtype=torch.bool))


def test_bad_method_budget_and_router_are_named():
    with pytest.raises(ConfigError, match="budget B=2 is smaller than top_k=4"):
        FusedVerifier("count-b", Router("softmax_topk", 4), SelectorConfig(budget=2), 8, "cpu")
    with pytest.raises(ConfigError, match="needs a budget"):
        FusedVerifier("moe-spec", Router("softmax_topk", 4), SelectorConfig(), 8, "cpu")
    with pytest.raises(ConfigError, match="exceeds the number of experts"):
        FusedVerifier("standard-sd", Router("softmax_topk", 9), SelectorConfig(), 8, "cpu")
    with pytest.raises(KernelInputError, match="does not speculate"):
        FusedVerifier("vanilla-ar", Router("softmax_topk", 2), SelectorConfig(), 8, "cpu")
    with pytest.raises(ConfigError, match="p_hat has 2 entries"):
        verifier = FusedVerifier("acceptmoe", Router("softmax_topk", 2), SelectorConfig(p_hat=(1.0, 0.5)), 8, "cpu")
        verifier.block_inputs([BlockInfo.from_parents([-1, 0, 1])])


def test_ties_go_to_the_lower_expert_index():
    logits = torch.zeros(7, 60)                        # every expert and every score ties
    cfg = SelectorConfig(budget=12)
    for router in (Router("softmax_topk", 4), Router("topk_softmax", 4)):
        sel, ids, weights = fused_select_route("moe-spec", logits, None, router, cfg)
        assert torch.equal(sel.eligible, select("moe-spec", logits, BlockInfo.from_parents([-1] + [0] * 6),
                                                router, cfg).eligible)
        assert sel.eligible[:12].all() and not sel.eligible[12:].any()
        assert torch.equal(ids, torch.arange(4).expand(7, 4)) and torch.allclose(weights, torch.full((7, 4), 0.25))
