"""The batched verifier's interface: `Verifier` (prepare per step, call per layer), its output and errors.
Backends subclass it (`torch_verifier.TorchVerifier`, `cpu_verifier.CpuVerifier`,
`triton_verifier.TritonVerifier`); `backends.make_verifier` picks one by name from `backends.VERIFIERS`.

    >>> import torch
    >>> from acceptmoe.kernels import make_verifier
    >>> from acceptmoe.methods import BlockInfo, Fit, Router, Variant
    >>> fit = Fit(Router.preset("softmax_topk", 2), 16, max_depth=2)
    >>> plan = Variant("acceptmoe").bind(fit, commitment=(1.0, 0.8, 0.5))
    >>> verifier = make_verifier("auto", plan, "cpu")      # cpu (else torch) on a CPU, the Triton kernel on CUDA
    >>> verifier.prepare([BlockInfo.from_parents([-1, 0, 1]), BlockInfo.from_parents([-1, 0])])  # per step
    >>> out = verifier(torch.randn(2, 3, 16))             # per MoE layer: logits [B, T, E] (a resident mask prunes)
    >>> tuple(out.ids.shape), tuple(out.eligible.shape)   # routing inside S [B, T, k]; the sets [B, E]
    ((2, 3, 2), (2, 16))

Every step of one shape reuses the same device buffers, held for the verifier's life, so a CUDA graph
captured through a call reads each step's values at replay; `prepare(..., rows=R)` reserves R block rows
and a call may then take any B <= R blocks (a serving engine whose batch varies). A resident mask turns on
residency-aware pruning of S (never below `plan.min_set`). Every backend agrees exactly with the readable
reference (`acceptmoe.methods.select`, `prune`, `route`) on ids and sets: the tests check it, under the
Triton interpreter for the kernel. No host synchronisation and fixed shapes inside a call: CUDA-graph safe.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from acceptmoe.errors import UserError
from acceptmoe.methods import METHODS, BlockInfo, Plan, Selection

LOGIT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


class VerifierInputError(UserError, ValueError):
    """An input the verifier cannot take; the message names the tensor or setting and the fix."""


class VerifierOutput(NamedTuple):
    ids: Tensor | None       # int64 [B, T, k] constrained top-k inside S, best first (None: not routed)
    weights: Tensor | None   # fp32 [B, T, k] their gating weights (router semantics of `acceptmoe.methods.routing`)
    eligible: Tensor         # bool [B, E] the final set S (after pruning, when a resident mask was given)
    utility: Tensor          # fp32 [B, E] the score the method ranked by
    anchor: Tensor           # bool [B, E] the root's natural top-k (anchoring methods), else all False

    @property
    def selection(self) -> Selection:
        return Selection(self.eligible, self.utility, self.anchor)


@dataclass
class StepBuffers:
    """One shape's per-step inputs on the device, written by `prepare` and read by every layer's call."""
    alpha: Tensor            # fp32 [R, T] commitment weights (zeros on padding and for other methods)
    num_tokens: Tensor       # int32 [R] valid tokens per block (0 for unused rows)
    valid: Tensor            # fp32 [R, T] 1.0 on a block's tokens, 0.0 on padding
    counts: tuple = ()       # num_tokens as last written


def commitment_weights(plan: Plan, depth: Tensor, level_size: Tensor, p_hat: Tensor | None = None) -> Tensor:
    """alpha_t = p_hat[d_t]^beta * N_{d_t}^level_exponent in float64, returned as fp32 (the root's is 1): the one
    definition both prepares use. depth long [...], level_size [...] the size N_d of each token's level; p_hat
    the plan's as a float64 tensor on depth's device (made here when not given)."""
    cfg = plan.selector
    if p_hat is None:
        p_hat = torch.tensor(cfg.p_hat, dtype=torch.float64, device=depth.device)
    return (p_hat[depth].pow(cfg.beta) * level_size.to(torch.float64).pow(cfg.level_exponent)).float()


# the selector fields `prepare` turns into a step's commitment weights before the layers run; every other part
# of a plan is read by the calls themselves (a launch's constants, and any graph captured on them)
STEP_FIELDS = ("p_hat", "beta", "level_exponent")


def same_calls(a: Plan, b: Plan) -> bool:
    """Whether plans a and b make the same verifier calls and differ at most in `STEP_FIELDS` (so one verifier,
    and a graph captured on its calls, serves both: `Verifier.rebind`)."""
    def calls(p: Plan) -> tuple:
        return p.spec, p.fit, p.prune, dataclasses.replace(p.selector, p_hat=None, beta=0.0, level_exponent=0.0)
    return calls(a) == calls(b)


def tree_depths(parents: Tensor, max_depth: int) -> Tensor:
    """parents [B, T] long (-1: the root) -> depths [B, T] long, capped at max_depth: max_depth + 1 rounds of
    fixed-shape gathers (each token's ancestor one level further up), no host read."""
    depth = torch.zeros_like(parents)
    anc = parents
    for _ in range(max_depth + 1):
        live = anc >= 0
        depth = depth + live.long()
        anc = torch.where(live, parents.gather(1, anc.clamp_min(0)), anc)
    return depth.clamp_max(max_depth)


class Verifier:
    """One plan's batched select-and-route for one MoE layer per call (a backend implements `_run`)."""
    backend = "base"

    def __init__(self, plan: Plan, device: torch.device | str = "cpu"):
        if not plan.spec.speculates:
            raise VerifierInputError(f"method {plan.spec.name!r} does not speculate, so it has no verifier; use "
                                     f"one of: {', '.join(n for n, s in METHODS.items() if s.speculates)}")
        self.plan, self.device = plan, torch.device(device)
        self.buffers: dict[tuple[int, int], StepBuffers] = {}     # (rows, T) -> buffers, kept for graph replays
        self.step: StepBuffers | None = None
        self._p_hat: Tensor | None = None                          # p_hat on the device (prepare_tree)
        self._alpha_tables: dict[tuple[int, ...], Tensor] = {}     # level sizes -> alpha per depth (prepare)

    def rebind(self, plan: Plan) -> None:
        """Serve `plan` from the next `prepare` on with the same buffers and calls (a graph captured on them stays
        right): `plan` may differ from the current one only in what `prepare` writes (`STEP_FIELDS`)."""
        if not same_calls(self.plan, plan):
            raise VerifierInputError(f"plan {plan.name} makes other verifier calls than {self.plan.name} (only "
                                     f"{', '.join(STEP_FIELDS)} may change between steps): make a new verifier")
        self.plan, self._p_hat, self._alpha_tables = plan, None, {}

    def prepare(self, blocks: BlockInfo | Sequence[BlockInfo], pad_to: int | None = None,
                rows: int | None = None) -> None:
        """Bind one verification step's blocks, padded to T = pad_to (default: the longest block) tokens and
        `rows` blocks (default: as many as given). Each shape (rows, T) gets its buffers once and keeps them
        (never replaced, so a graph captured on them stays valid); a buffer whose values did not change is
        not written."""
        blocks = [blocks] if isinstance(blocks, BlockInfo) else list(blocks)
        if not blocks:
            raise VerifierInputError("prepare needs at least one verification block")
        T, R = pad_to or max(b.num_tokens for b in blocks), rows or len(blocks)
        if len(blocks) > R:
            raise VerifierInputError(f"{len(blocks)} blocks exceed the {R} reserved rows")
        for i, b in enumerate(blocks):
            if b.num_tokens > T:
                raise VerifierInputError(f"block {i} has {b.num_tokens} tokens, more than the padded T={T}")
            if b.max_depth > self.plan.fit.max_depth:
                raise VerifierInputError(f"block {i} reaches depth {b.max_depth}, deeper than the plan's "
                                         f"{self.plan.fit.max_depth} (bind the plan to the engine's tree)")
        buf = self._buffers(R, T)
        if self.plan.spec.needs_commitment:
            buf.alpha.copy_(self._alpha(blocks, R, T))
        self._counts(buf, tuple(b.num_tokens for b in blocks) + (0,) * (R - len(blocks)))
        self.step = buf

    def prepare_tree(self, parents: Tensor, rows: int | None = None, admitted: Tensor | None = None) -> None:
        """Bind one step of B full blocks of T tokens from their parent lists on the device, parents [B, T] long
        (parents[:, 0] == -1, each parent earlier than its node): nothing is read on the host, so a serving
        engine binds a verify step without a synchronisation. Depths come from pointer jumping and are capped
        at the plan's max_depth (a tree drafted with that many steps never exceeds it); otherwise the same
        buffers and values as `prepare` with the same blocks.

        `admitted` bool [B, T] (token-side admission in a fixed-width pass, an ancestor-closed subset per row):
        the blocks are the admitted subtrees, carried by the commitment weights, which are zero on every other
        token and count only admitted tokens in each level's size; so only a method whose score is the
        commitment-weighted demand takes it (the same sets as `prepare` with the subtrees' blocks)."""
        B, T = parents.shape
        R = rows or B
        if B > R:
            raise VerifierInputError(f"{B} blocks exceed the {R} reserved rows")
        if admitted is not None and not self.plan.spec.needs_commitment:
            raise VerifierInputError(f"method {self.plan.spec.name!r} does not weight tokens by commitment, so a "
                                     f"fixed-width pass cannot carry an admitted subset of its tokens")
        buf = self._buffers(R, T)
        if self.plan.spec.needs_commitment:
            depth = tree_depths(parents.to(self.device), self.plan.fit.max_depth)            # [B, T]
            D = self.plan.fit.max_depth
            member = torch.nn.functional.one_hot(depth, D + 1)                               # [B, T, D + 1]
            if admitted is not None:
                member = member * admitted.to(self.device)[..., None]
            level = member.sum(1)                                                            # [B, D + 1]
            if self._p_hat is None:                       # once: no host-to-device copy per step
                self._p_hat = torch.tensor(self.plan.selector.p_hat, dtype=torch.float64, device=self.device)
            alpha = commitment_weights(self.plan, depth, level.gather(1, depth), self._p_hat)
            if admitted is not None:                      # a level with no admitted node has N_d = 0: where, not *
                alpha = torch.where(admitted.to(self.device), alpha, 0.0)
            if B < R:
                alpha = torch.cat([alpha, alpha.new_zeros(R - B, T)])
            buf.alpha.copy_(alpha)
        counts = (T,) * B + (0,) * (R - B)
        if counts != buf.counts:                           # from the host-known batch size: device ops only
            used = torch.arange(R, device=self.device) < B
            buf.num_tokens.copy_(used.int() * T)
            buf.valid.copy_(used[:, None].float().expand(R, T))
            buf.counts = counts
        self.step = buf

    def _buffers(self, R: int, T: int) -> StepBuffers:
        buf = self.buffers.get((R, T))
        if buf is None:
            dev = self.device
            buf = self.buffers[(R, T)] = StepBuffers(torch.zeros(R, T, device=dev),
                                                     torch.zeros(R, dtype=torch.int32, device=dev),
                                                     torch.zeros(R, T, device=dev))
        return buf

    @staticmethod
    def _counts(buf: StepBuffers, counts: tuple) -> None:
        """Valid tokens per row: written only when they change (a host-known tuple, no device read)."""
        if counts != buf.counts:
            n = torch.tensor(counts, dtype=torch.int32)
            T = buf.valid.shape[1]
            buf.num_tokens.copy_(n)
            buf.valid.copy_((torch.arange(T) < n[:, None]).float())
            buf.counts = counts

    def _alpha(self, blocks: list[BlockInfo], R: int, T: int) -> Tensor:
        """fp32 [R, T] on the host: alpha_t = p_hat[d_t]^beta * N_{d_t}^level_exponent (root 1), zero padding."""
        out = torch.zeros(R, T, dtype=torch.float32)
        for i, b in enumerate(blocks):
            out[i, : b.num_tokens] = self._alpha_by_depth(b.level_sizes)[b.depth]
        return out

    def _alpha_by_depth(self, level_sizes: Tensor) -> Tensor:
        """fp32 [D + 1]: alpha at each depth of a block with these level sizes, kept per sizes (a drafted tree's
        levels repeat from step to step). `commitment_weights` is elementwise, so a token's value read from
        the table is the one computed for it alone."""
        key = tuple(level_sizes.tolist())
        table = self._alpha_tables.get(key)
        if table is None:
            if len(self._alpha_tables) >= 4096:
                self._alpha_tables.clear()
            table = self._alpha_tables[key] = commitment_weights(self.plan, torch.arange(len(key)), level_sizes)
        return table

    def __call__(self, logits: Tensor, resident: Tensor | None = None, route: bool = True,
                 bias: Tensor | None = None) -> VerifierOutput:
        """logits [B, T, E] of one MoE layer (B <= the prepared rows); resident bool [E] or [B, E] (the pool
        before the pass) turns on residency pruning; route=False returns the sets only (ids, weights None);
        bias fp32 [E] the layer's selection bias (a biased router, `Router.biased`; None: zero)."""
        self._check(logits, resident)
        self._check_bias(bias)
        return self._run(logits, resident, route, bias)

    def _run(self, logits: Tensor, resident: Tensor | None, route: bool, bias: Tensor | None) -> VerifierOutput:
        raise NotImplementedError

    def _check_bias(self, bias: Tensor | None) -> None:
        if bias is None:
            return
        router, E = self.plan.router, self.plan.num_experts
        if not router.biased:
            raise VerifierInputError(f"a selection bias was given, but the {router.name} router has none: "
                                     f"drop bias=")
        if tuple(bias.shape) != (E,) or bias.dtype != torch.float32 or bias.device != self.device:
            raise VerifierInputError(f"bias must be fp32 [{E}] on {self.device}, got {bias.dtype} "
                                     f"{tuple(bias.shape)} on {bias.device}")

    def _check(self, logits: Tensor, resident: Tensor | None) -> None:
        if self.step is None:
            raise VerifierInputError("call verifier.prepare(blocks) once per verification step before the layers")
        R, T = self.step.alpha.shape
        E = self.plan.num_experts
        if logits.dim() != 3 or logits.shape[0] > R or tuple(logits.shape[1:]) != (T, E):
            raise VerifierInputError(f"logits must be [B, T, E] with B <= {R} and (T, E) = {(T, E)} (the prepared "
                                     f"blocks, the plan's experts), got {tuple(logits.shape)}")
        if logits.device != self.device:
            raise VerifierInputError(f"logits are on {logits.device} but the verifier was made for {self.device}: "
                                     f"make_verifier(..., device={str(logits.device)!r})")
        if logits.dtype not in LOGIT_DTYPES:
            raise VerifierInputError(f"logits dtype {logits.dtype} is not supported; use one of {LOGIT_DTYPES}")
        if resident is not None:
            B = logits.shape[0]
            if tuple(resident.shape) not in ((E,), (B, E)):
                raise VerifierInputError(f"resident must have shape ({E},) or ({B}, {E}), got {tuple(resident.shape)}")
            if resident.dtype != torch.bool:
                raise VerifierInputError(f"resident dtype must be torch.bool, got {resident.dtype}")
            if resident.device != self.device:
                raise VerifierInputError(f"resident is on {resident.device} but logits are on {self.device}")

    def rows(self, B: int) -> StepBuffers:
        """The prepared buffers' first B rows (what a call over B blocks reads)."""
        s = self.step
        assert s is not None                          # prepared (`_check` refuses a call before `prepare`)
        if B == len(s.counts):
            return s
        return StepBuffers(s.alpha[:B], s.num_tokens[:B], s.valid[:B], s.counts[:B])
