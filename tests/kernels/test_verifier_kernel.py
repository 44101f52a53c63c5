"""The batched verifier (both backends) against the per-block reference; the Triton backend runs under the
Triton interpreter (conftest).

Each case is one awkward shape (T in {1, 7, 64}, E in {8, 60, 64, 128}, k in {1, 2, 4, 8}), router
(presets and their settings; the grouped one with a random selection bias, none where logits tie), demand score,
logit dtype, residency mask and logit draw (tie-free, or bf16-rounded with deliberate ties at the top-k
boundary); every case runs every registered verifier method on one, two or five blocks (the later ones
padded; five: the batch-shared score's credit across blocks) and compares with the per-block reference
(`select_pass`, `prune`, `route`). Sets and routed ids
must agree exactly, utilities and weights to 1e-6. Every top_k from 1 to 8 (and k = E - 1, E) has its own
test at widths that are and are not powers of two.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import pytest
import torch

from acceptmoe.kernels import VerifierInputError, VerifierOutput, make_verifier
from acceptmoe.methods import (
    BlockInfo,
    Fit,
    Plan,
    Router,
    SelectorConfig,
    Variant,
    commitment_weight,
    prune,
    route,
    select,
    select_pass,
    verifier_methods,
)

SPECULATING = verifier_methods()     # an admitting method verifies with its selector's verifier
ROUTERS = {
    "renorm": Router.preset("softmax_topk", 1, renormalize=True),
    "raw": Router.preset("softmax_topk", 1, renormalize=False),
    "gptoss": Router.preset("topk_softmax", 1),
    "deepseek": Router.preset("sigmoid_grouped", 1, groups=4, group_top=2, scale=2.5),
}


def router_for(name: str, k: int, E: int) -> Router:
    """ROUTERS[name] with top_k = k, its chosen groups enough to hold k of the E experts."""
    router = ROUTERS[name]
    group_top = min(router.groups, max(router.group_top, math.ceil(k * router.groups / E)))
    return dataclasses.replace(router, top_k=k, group_top=group_top)


def bias_for(case: Case, seed: int = 0) -> torch.Tensor | None:
    """The layer's selection bias [E] of a biased router (none where the logits tie, so the scores tie too)."""
    if not ROUTERS[case.router].biased:
        return None
    gen = torch.Generator().manual_seed(seed + 1)
    return torch.zeros(case.E) if case.ties else torch.randn(case.E, generator=gen) * 0.3


@dataclass(frozen=True)
class Case:
    T: int
    E: int
    k: int
    router: str           # key of ROUTERS
    demand: str           # gate | softmax
    dtype: torch.dtype
    resident: str         # none | shared ([E]) | per-block ([B, E])
    blocks: int           # 1, or more with the later blocks padded
    budget: str           # k | third | all: the fixed budget B for count-b, moe-spec, acceptmoe-b
    ties: bool = False    # bf16-rounded logits on a coarse grid, each row tied at its top-k boundary

    def __str__(self) -> str:
        return (f"T{self.T}-E{self.E}-k{self.k}-{self.router}-{self.demand}-{str(self.dtype)[6:]}-"
                f"{self.resident}-B{self.blocks}-{self.budget}{'-ties' if self.ties else ''}")


CASES = [
    Case(1, 8, 1, "gptoss", "gate", torch.float32, "none", 1, "k"),
    Case(7, 60, 2, "renorm", "gate", torch.float32, "shared", 2, "third"),
    Case(64, 64, 4, "raw", "softmax", torch.float32, "per-block", 2, "third"),
    Case(7, 128, 8, "gptoss", "softmax", torch.float16, "per-block", 2, "k"),
    Case(64, 8, 1, "renorm", "gate", torch.float32, "shared", 2, "third"),
    Case(7, 8, 8, "gptoss", "gate", torch.float32, "none", 2, "all"),
    Case(1, 60, 4, "raw", "gate", torch.float16, "shared", 1, "all"),
    Case(7, 64, 1, "raw", "softmax", torch.bfloat16, "shared", 2, "all"),
    Case(1, 128, 1, "renorm", "softmax", torch.float32, "per-block", 2, "third"),
    Case(64, 128, 8, "renorm", "gate", torch.bfloat16, "none", 2, "third", ties=True),
    Case(16, 128, 4, "gptoss", "gate", torch.bfloat16, "shared", 1, "third", ties=True),
    Case(7, 60, 2, "raw", "softmax", torch.bfloat16, "per-block", 2, "k", ties=True),
    Case(16, 64, 8, "gptoss", "softmax", torch.float32, "none", 1, "k", ties=True),
    Case(7, 8, 4, "renorm", "gate", torch.float32, "shared", 2, "all", ties=True),
    Case(7, 64, 4, "deepseek", "gate", torch.float32, "shared", 2, "third"),
    Case(1, 60, 2, "deepseek", "softmax", torch.float16, "none", 1, "all"),
    Case(64, 8, 2, "deepseek", "gate", torch.float32, "per-block", 2, "k"),
    Case(16, 128, 8, "deepseek", "softmax", torch.bfloat16, "shared", 1, "third", ties=True),
    Case(7, 64, 4, "renorm", "gate", torch.float32, "per-block", 5, "third"),   # a pass of 5: batch credit
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


def tied_logits(B: int, T: int, E: int, k: int, dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    """[B, T, E] bf16-rounded logits on a coarse grid (many ties), and in every row the k-th largest value
    copied onto another expert, so the top-k boundary always ties (k < E)."""
    z = (torch.randint(-12, 12, (B, T, E), generator=gen).float() / 4).to(torch.bfloat16).float()
    order = torch.sort(z, dim=-1, descending=True, stable=True).indices                   # [B, T, E]
    kth = z.gather(-1, order[..., k - 1: k])                                              # [B, T, 1]
    other = order.gather(-1, torch.randint(k, E, (B, T, 1), generator=gen)) if k < E else order[..., :1]
    return z.scatter(-1, other, kth).to(dtype)


def make_inputs(case: Case, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    blocks = [random_tree(case.T, gen)] + [random_tree(max(1, case.T // 2), gen)] * (case.blocks - 1)
    depth = max(b.max_depth for b in blocks)
    p_hat = (1.0,) + tuple(sorted(torch.rand(depth, generator=gen).clamp_min(0.05).tolist(), reverse=True))
    logits = (tied_logits(case.blocks, case.T, case.E, case.k, case.dtype, gen) if case.ties
              else random_logits(case.blocks, case.T, case.E, case.dtype, gen))
    if case.blocks > 1:                                   # padding rows hold garbage the kernel must ignore
        logits[1:, blocks[1].num_tokens:] = torch.linspace(30.0, -30.0, case.E).to(case.dtype)
    resident = {"none": None, "shared": torch.rand(case.E, generator=gen) < 0.5,
                "per-block": torch.rand(case.blocks, case.E, generator=gen) < 0.5}[case.resident]
    return blocks, p_hat, logits, resident


def plan_for(method: str, case: Case, p_hat: tuple, router: Router, depth: int) -> Plan:
    budget = {"k": case.k, "third": max(case.k, case.E // 3), "all": case.E}[case.budget]
    fit = Fit(router, case.E, depth, "resident" if case.resident == "none" else "offloaded")
    base = SelectorConfig(demand_score=case.demand, prune_rho=0.3, prune_min_set=case.k + 1)
    return Variant(method).bind(fit, commitment=p_hat, b0=budget, selector=base)


def simple_plan(method: str, router: Router, E: int, depth: int = 5, store: str = "resident",
                p_hat=(1.0, 0.8, 0.6, 0.4, 0.3, 0.2), budget: int | None = None, **selector) -> Plan:
    return Variant(method, budget=budget).bind(Fit(router, E, depth, store), commitment=p_hat,
                                               selector=SelectorConfig(**selector))


def reference(plan, blocks, logits, resident, bias=None):
    """Per-block reference (each block beside the pass's other roots, `select_pass`): ids [B, T, k], weights
    [B, T, k], eligible [B, E], utility [B, E], anchor [B, E]."""
    out = []
    for b, sel in enumerate(select_pass(plan, logits, blocks, bias)):             # one selection per block
        eligible = sel.eligible
        if resident is not None:
            eligible = prune(sel, resident if resident.dim() == 1 else resident[b], plan)
        ids, weights = route(logits[b], eligible, plan.router, bias)
        out.append((ids, weights, eligible, sel.utility, sel.anchor))
    return [torch.stack(x) for x in zip(*out, strict=True)]


def assert_matches(got, want, what: str) -> None:
    for name, g, w in zip(("ids", "weights", "eligible", "utility", "anchor"), got, want, strict=True):
        if g.dtype in (torch.bool, torch.int64):
            assert torch.equal(g, w), f"{what}: {name} differs\n got {g}\nwant {w}"
        else:
            torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-6, msg=lambda m: f"{what}: {name}: {m}")  # noqa: B023 (called in this iteration)


@pytest.mark.parametrize("backend", ["triton", "torch", "cpu"])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_verifier_matches_reference(case: Case, backend: str):
    blocks, p_hat, logits, resident = make_inputs(case)
    router, bias = router_for(case.router, case.k, case.E), bias_for(case)
    depth = max(b.max_depth for b in blocks)
    for method in SPECULATING:
        plan = plan_for(method, case, p_hat, router, depth)
        verifier = make_verifier(backend, plan, device="cpu")
        verifier.prepare(blocks, pad_to=case.T)
        got = verifier(logits, resident, bias=bias)
        assert_matches(got, reference(plan, blocks, logits, resident, bias), f"{backend} {method} {case}")


@pytest.mark.parametrize("E, k", [(E, k) for E in (60, 128) for k in range(1, 9)] + [(12, 11), (12, 12)],
                         ids=lambda x: str(x))
def test_kernel_serves_every_top_k_and_a_width_not_a_power_of_two(E, k):
    """top_k from 1 to 8 (3, 5, 6, 7 leave unused places in the kernel's power-of-two slots) at E = 60 (not a
    power of two) and E = 128, and k = E - 1, E at E = 12: every verifier method, both backends against the
    reference. The routers take turns over the methods, so each (E, k) meets every router and each method
    meets every router over k. A padded second block rides along, except at E = 128 (one block, for the
    interpreter's time), where a shared resident mask prunes S, so Standard SD also routes in the kernel's
    second pass."""
    case = Case(4, E, k, "renorm", "gate", torch.float32, *(("shared", 1) if E == 128 else ("none", 2)), "third")
    blocks, p_hat, logits, resident = make_inputs(case, seed=k)
    for i, method in enumerate(SPECULATING):
        kind = tuple(ROUTERS)[(i + k) % len(ROUTERS)]
        plan = plan_for(method, case, p_hat, router_for(kind, k, E), max(b.max_depth for b in blocks))
        want = reference(plan, blocks, logits, resident)
        for backend in ("triton", "torch", "cpu"):
            verifier = make_verifier(backend, plan, device="cpu")
            verifier.prepare(blocks, pad_to=case.T)
            got = verifier(logits, resident)
            assert not got.weights.isnan().any(), (backend, method, kind)
            assert_matches(got, want, f"{backend} {method} {kind} k={k} E={E}")


def one_block(plan, logits, resident=None, backend="triton"):
    """The verifier's output for one block (all T tokens of logits [T, E]) with the first dim dropped."""
    verifier = make_verifier(backend, plan, "cpu")
    verifier.prepare(BlockInfo.from_parents([-1] + [0] * (logits.shape[0] - 1)))
    return VerifierOutput(*(x[0] for x in verifier(logits[None], resident)))


def test_pruning_removes_nonresident_low_utility_experts():
    case = Case(7, 60, 2, "renorm", "gate", torch.float32, "shared", 1, "all")
    blocks, p_hat, logits, _ = make_inputs(case, seed=3)
    router = Router.preset("softmax_topk", 2)
    plan = simple_plan("acceptmoe-b", router, 60, depth=blocks[0].max_depth, store="offloaded", p_hat=p_hat,
                       budget=60, prune_rho=0.5, prune_min_set=10)
    resident = torch.zeros(60, dtype=torch.bool)
    verifier = make_verifier("triton", plan, "cpu")
    verifier.prepare(blocks)
    out = verifier(logits[:1], resident)
    sel, ids = out.selection, out.ids[0]
    ref = select(plan, logits[0], blocks[0])
    assert torch.equal(sel.eligible[0], prune(ref, resident, plan))
    assert 10 <= int(sel.eligible.sum()) < 60 and bool((sel.eligible | ~sel.anchor).all())
    assert torch.equal(ids, route(logits[0], sel.eligible[0], router)[0])


def test_pruning_keeps_at_least_k_experts_without_an_anchor():
    """count-b has no anchor: with prune_min_set < k the verifier still leaves k experts (s_min raised to k)."""
    case = Case(7, 60, 4, "renorm", "gate", torch.float32, "shared", 1, "k")
    blocks, _, logits, _ = make_inputs(case, seed=4)
    router = Router.preset("softmax_topk", 4)
    plan = simple_plan("count-b", router, 60, store="offloaded", budget=8, prune_rho=1.0, prune_min_set=0)
    resident = torch.zeros(60, dtype=torch.bool)
    star = BlockInfo.from_parents([-1] + [0] * (logits.shape[1] - 1))
    want = prune(select(plan, logits[0], star), resident, plan)
    assert plan.min_set == 4
    for backend in ("triton", "torch"):
        out = one_block(plan, logits[0], resident, backend)
        assert int(out.eligible.sum()) == 4 and torch.equal(out.eligible, want)
        assert torch.equal(out.ids, route(logits[0], want, router)[0])


@pytest.mark.parametrize("kind, renorm", [("softmax_topk", True), ("softmax_topk", False), ("topk_softmax", True)])
def test_standard_sd_routes_as_natural_routing_with_ties(kind, renorm):
    """Standard SD through the verifier: the ids of natural routing on tied bf16 logits (both backends);
    the torch backend's weights are natural routing's bit for bit, the kernel's agree to 1e-6."""
    router = Router.preset(kind, 4, renormalize=renorm)
    logits = tied_logits(1, 16, 64, 4, torch.bfloat16, torch.Generator().manual_seed(7))[0]   # [T, E]
    want_ids, want_weights = router.natural(logits)
    for backend in ("torch", "triton"):
        out = one_block(simple_plan("standard-sd", router, 64), logits, backend=backend)
        assert bool(out.eligible.all()) and torch.equal(out.ids, want_ids), backend
        if backend == "torch":
            assert torch.equal(out.weights, want_weights)
        torch.testing.assert_close(out.weights, want_weights, rtol=1e-6, atol=1e-6)


def test_prepare_pads_alpha_and_counts_tokens():
    gen = torch.Generator().manual_seed(2)
    blocks = [random_tree(7, gen), random_tree(3, gen)]
    plan = simple_plan("acceptmoe", Router.preset("topk_softmax", 2), 8)
    verifier = make_verifier("torch", plan, "cpu")
    verifier.prepare(blocks, rows=3)
    alpha, num_tokens = verifier.step.alpha, verifier.step.num_tokens
    assert num_tokens.tolist() == [7, 3, 0] and alpha.shape == (3, 7)
    want = [commitment_weight(plan.selector.p_hat[d], n, plan.selector)
            for d, n in zip(blocks[1].depth.tolist(), blocks[1].level_sizes[blocks[1].depth].tolist(), strict=True)]
    assert alpha[1, :3].tolist() == want and not alpha[1, 3:].any() and not alpha[2].any()


@pytest.mark.parametrize("backend", ["torch", "triton", "cpu"])
@pytest.mark.parametrize("method", ["count-b", "acceptmoe"])
def test_steps_of_one_shape_reuse_buffers_and_match_a_fresh_verifier(backend, method):
    """prepare keeps the buffers of a padded shape and rewrites only what changed (token counts, alpha):
    every step of a reused verifier equals a fresh verifier on the same blocks."""
    gen = torch.Generator().manual_seed(4)
    router, E, T = Router.preset("softmax_topk", 2), 16, 9
    plan = simple_plan(method, router, E, budget=5 if method == "count-b" else None)
    reused = make_verifier(backend, plan, "cpu")
    first = None
    for sizes in ((9, 4), (9, 4), (3, 9), (9, 9), (5,), (9, 4)):
        blocks = [random_tree(n, gen) for n in sizes]
        logits = random_logits(len(sizes), T, E, torch.float32, gen)
        reused.prepare(blocks, pad_to=T)
        if len(sizes) == 2:
            first = first or (reused.step.alpha, reused.step.num_tokens)
            assert reused.step.alpha is first[0] and reused.step.num_tokens is first[1]   # the shape's buffers
        fresh = make_verifier(backend, plan, "cpu")
        fresh.prepare(blocks, pad_to=T)
        for got, want in zip(reused(logits), fresh(logits), strict=True):
            assert torch.equal(got, want), sizes
        assert reused.step.num_tokens.tolist() == list(sizes)
    assert set(reused.buffers) == {(2, T), (1, T)}                         # one buffer set per shape, kept


@pytest.fixture(params=["triton", "torch"])
def verifier(request):
    v = make_verifier(request.param, simple_plan("acceptmoe", Router.preset("softmax_topk", 2), 8, depth=2,
                                                 p_hat=(1.0, 0.5, 0.25)), "cpu")
    v.prepare([BlockInfo.from_parents([-1, 0, 0, 0, 1, 1, 2])])                 # B = 1, T = 7, depth 2
    return v


@pytest.mark.parametrize("logits_shape", [(7, 8), (1, 7, 9), (1, 6, 8), (2, 7, 8)])
def test_bad_shapes_are_named(verifier, logits_shape):
    with pytest.raises(VerifierInputError, match="logits must be \\[B, T, E\\] with B <= 1 and \\(T, E\\) = \\(7, 8\\)"):
        verifier(torch.zeros(logits_shape))


def test_bad_dtypes_and_missing_inputs_are_named(verifier):
    logits = torch.zeros(1, 7, 8)
    with pytest.raises(VerifierInputError, match="logits dtype torch.float64"):
        verifier(logits.double())
    with pytest.raises(VerifierInputError, match="resident dtype"):
        verifier(logits, resident=torch.ones(8))
    with pytest.raises(VerifierInputError, match="resident must have shape \\(8,\\) or \\(1, 8\\)"):
        verifier(logits, resident=torch.ones(2, 8, dtype=torch.bool))
    count_b = simple_plan("count-b", Router.preset("softmax_topk", 2), 8, budget=4)
    fresh = make_verifier("torch", count_b, "cpu")
    with pytest.raises(VerifierInputError, match="call verifier.prepare"):
        fresh(logits)
    with pytest.raises(VerifierInputError, match="unknown verifier backend 'cuda-magic'"):
        make_verifier("cuda-magic", count_b, "cpu")
    with pytest.raises(TypeError, match="takes a Plan"):
        make_verifier("torch", "count-b", "cpu")
    with pytest.raises(VerifierInputError, match="deeper than the plan's 2"):
        verifier.prepare([BlockInfo.from_parents([-1, 0, 1, 2])])
    with pytest.raises(VerifierInputError, match="2 blocks exceed the 1 reserved rows"):
        verifier.prepare([BlockInfo.from_parents([-1])] * 2, rows=1)


@pytest.mark.parametrize("backend", ["triton", "torch", "cpu"])
def test_a_plan_that_does_not_speculate_has_no_verifier(backend):
    with pytest.raises(VerifierInputError, match="does not speculate"):
        make_verifier(backend, simple_plan("vanilla-ar", Router.preset("softmax_topk", 2), 8), "cpu")


def test_ties_go_to_the_lower_expert_index():
    logits = torch.zeros(7, 60)                        # every expert and every score ties
    for router in (Router.preset("softmax_topk", 4), Router.preset("topk_softmax", 4), Router.preset("sigmoid_grouped", 4, groups=4,
                                                                                group_top=2)):
        plan = simple_plan("moe-spec", router, 60, budget=12)
        for backend in ("triton", "torch", "cpu"):
            out = one_block(plan, logits, backend=backend)
            assert torch.equal(out.eligible, select(plan, logits, BlockInfo.from_parents([-1] + [0] * 6)).eligible)
            assert out.eligible[:12].all() and not out.eligible[12:].any()
            assert torch.equal(out.ids, torch.arange(4).expand(7, 4))
            assert torch.allclose(out.weights, torch.full((7, 4), 0.25))


# --- the kernel's integer sizing and pruning on adversarial inputs -------------------------------------

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from acceptmoe.kernels.triton_verifier import _effective_rank, _prune  # noqa: E402
from acceptmoe.methods import Selection, effective_rank  # noqa: E402
from acceptmoe.methods.fixed import log2_fixed, rank_guard, rho_fixed, to_fixed  # noqa: E402


@triton.jit
def _sizing_probe(u_ptr, cand_ptr, elig_ptr, anchor_ptr, res_ptr, log2_ptr, n_ptr, kept_ptr,
                  E, guard, scale, rho_q, min_set, BE: tl.constexpr):
    offs = tl.arange(0, BE)
    e_in = offs < E
    u = tl.load(u_ptr + offs, mask=e_in, other=0.0)
    cand = e_in & (tl.load(cand_ptr + offs, mask=e_in, other=0) != 0)
    log2_n = tl.load(log2_ptr + offs, mask=e_in, other=0)
    tl.store(n_ptr, _effective_rank((u * scale).to(tl.int64), cand, log2_n, e_in, guard))
    eligible = e_in & (tl.load(elig_ptr + offs, mask=e_in, other=0) != 0)
    anchor = tl.load(anchor_ptr + offs, mask=e_in, other=0) != 0
    resident = tl.load(res_ptr + offs, mask=e_in, other=1)
    kept = _prune(eligible, u, anchor, resident, offs, scale, rho_q, min_set)
    tl.store(kept_ptr + offs, kept.to(tl.int8), mask=e_in)


def kernel_sizing(u, eligible, anchor, resident, cfg, min_set):
    """(n_er over u > 0, pruned set) from the kernel's own `_effective_rank` and `_prune`."""
    E = u.numel()
    n, kept = torch.zeros(1, dtype=torch.int32), torch.zeros(E, dtype=torch.int8)
    as_u8 = lambda m: m.to(torch.uint8)
    _sizing_probe[(1,)](u, as_u8(u > 0), as_u8(eligible), as_u8(anchor), as_u8(resident),
                        log2_fixed(torch.arange(1, E + 1)), n, kept, E, rank_guard(cfg.rank_tolerance),
                        float(2 ** cfg.score_bits), rho_fixed(cfg.prune_rho), min_set,
                        BE=triton.next_power_of_2(E))
    return int(n), kept.bool()


def on_grid(x: list[float]) -> torch.Tensor:
    """Block scores are multiples of 2^-22 (`block_sum`)."""
    return torch.tensor([round(v * 2**22) / 2**22 for v in x], dtype=torch.float32)


def boundary_demands() -> list[torch.Tensor]:
    """Demand whose effective rank sits at the guarded ceiling's boundary (exp(H) = n * 2^(guard / 2^16),
    the fixed-point form of n / (1 - tol)), just below, at and just above it, plus demand at the largest
    total the fixed point holds (just below 2^(31 - 22) = 512: a block of 511 tokens), single and tied."""
    out = []
    for n in (2, 3, 7):
        for rel in (-1e-5, -1e-6, -1e-8, 0.0, 1e-8, 1e-6, 1e-5):
            target = n * 2 ** (rank_guard(1e-4) / 2**16) * (1 + rel)
            lo, hi = 0.0, 1.0 / (n + 1)
            for _ in range(100):                                # small (n+1)-th expert's share
                mid = (lo + hi) / 2
                q = [(1 - mid) / n] * n + [mid]
                rank = math.exp(-sum(x * math.log(x) for x in q if x > 0))
                lo, hi = (mid, hi) if rank < target else (lo, mid)
            out.append(on_grid([(1 - lo) / n * 37.0] * n + [lo * 37.0]))
    out += [on_grid([300.0, 150.0, 50.0, 11.9]), on_grid([2.0**-22]), on_grid([0.25] * 9 + [0.0] * 3)]
    return out


@pytest.mark.parametrize("i", range(len(boundary_demands())))
def test_kernel_effective_rank_is_the_reference_at_boundaries(i):
    u = boundary_demands()[i]
    cfg = SelectorConfig()
    everything = torch.ones(u.numel(), dtype=torch.bool)
    n, _ = kernel_sizing(u, everything, ~everything, everything, cfg, 0)
    assert n == effective_rank([x for x in to_fixed(u, cfg.score_bits).tolist() if x > 0], rank_guard(cfg.rank_tolerance))


@pytest.mark.parametrize("rho, min_set", [(0.25, 0), (0.5, 3), (0.1, 0), (1.0, 2), (0.0, 0)])
def test_kernel_pruning_is_the_reference_at_the_budget(rho, min_set):
    """Utilities whose prefix sums hit rho * total exactly (rho in 2^-16 units), ties, anchors, residents."""
    u = on_grid([1.0, 1.0, 2.0, 4.0, 8.0, 0.5, 0.5, 3.0, 0.0, 16.0])
    eligible = torch.tensor([1, 1, 1, 1, 1, 1, 1, 1, 1, 0], dtype=torch.bool)
    anchor = torch.tensor([0, 0, 0, 0, 1, 0, 0, 0, 0, 0], dtype=torch.bool)
    resident = torch.tensor([0, 0, 0, 0, 0, 0, 0, 1, 0, 0], dtype=torch.bool)
    plan = simple_plan("acceptmoe", Router.preset("softmax_topk", 1), 10, store="offloaded", prune_rho=rho,
                       prune_min_set=min_set)
    _, kept = kernel_sizing(u, eligible, anchor, resident, plan.selector, plan.min_set)
    want = prune(Selection(eligible, u, anchor), resident, plan)
    assert torch.equal(kept, want), (kept, want)


def test_each_router_runs_its_own_variant_and_an_unknown_axis_code_is_refused():
    """Under the interpreter: the same logits through every preset (and the non-renormalising softmax, the
    group-limited sigmoid) route as the reference routes under that router, each launch carrying its own routing
    axis codes (the renormalising softmax presets to the same weights, the others each to their own), and an axis
    code no branch handles stops the launch (`tl.static_assert`), never a default."""
    from acceptmoe.kernels.triton_router import router_meta
    from acceptmoe.methods import ROUTER_NAMES
    logits = torch.randn(1, 4, 16, generator=torch.Generator().manual_seed(3))
    routers = {name: Router.preset(name, 4) for name in ROUTER_NAMES}
    routers.update(raw=Router.preset("softmax_topk", 4, renormalize=False),
                   grouped=Router.preset("sigmoid_grouped", 4, groups=4, group_top=2, scale=2.5))
    weights, codes = {}, set()
    for name, router in routers.items():
        verifier = make_verifier("triton", simple_plan("standard-sd", router, 16), "cpu")
        assert all(verifier.meta[key] == value for key, value in router_meta(router).items())
        codes.add(tuple(sorted(router_meta(router).items())))
        verifier.prepare(BlockInfo.from_parents([-1, 0, 0, 1]))
        out = verifier(logits)
        ids, weights[name] = route(logits[0], None, router)
        assert torch.equal(out.ids[0], ids), name
        torch.testing.assert_close(out.weights[0], weights[name], rtol=1e-6, atol=1e-6)
    assert len(codes) == len(routers)
    distinct = [w for name, w in weights.items() if name != "topk_softmax"]
    assert all(not torch.allclose(a, b) for i, a in enumerate(distinct) for b in distinct[i + 1:])
    for axis, what in (("SCORING", "scoring"), ("ORDER", "order"), ("RENORM", "flag")):
        verifier.meta[axis] = 7
        with pytest.raises(Exception, match=f"unknown router {what} code"):
            verifier(logits)
        verifier.meta[axis] = router_meta(router)[axis]