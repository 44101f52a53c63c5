"""The verifier's compiled CPU backend (`cpu`) and natural routing through the same top-k.

The selection is a few hundred small tensor operations per MoE layer in the torch backend, which on a CPU
cost more than the arithmetic they do. Here one C library (`cpu_select.c`, compiled with the system's C
compiler on first use into a cache folder, loaded with ctypes) does the top-k rows, the block scores, the
anchor, the sizing and the pruning in two calls per layer; the router's float work stays in torch
(`Router.gates`, `weights`, `probs`: the model's own softmax or sigmoid, gather and renormalisation), so the
weights and the inputs to every integer rule are the values the torch backend computes, and its sets and
ids are the torch backend's bit for bit (the verifier tests run it against the reference beside the other
backends). The library ranks fp32 values; a router gives it values whose order is the router's (`RANKED`, by
the grouping axis): its choice values (`Router.scores`: the logits, or the scores plus the bias), or minus the
rank in `Router.ranking` where the choice is group-limited. Every other routing axis is the router's float
arithmetic, in torch (`routing`'s tables).

    make_verifier("cpu", plan)           # explicit: an error line when no C compiler is found
    make_verifier("auto", plan, "cpu")   # `cpu` when it builds here, else `torch`

`natural(router, logits, bias)` is the engine's unrestricted routing: the library's top-k on CPU fp32 logits,
`Router.natural` elsewhere (the same ids and weights either way).

The library is built into `acceptmoe.paths.cache_root()`; the compiler $CC or `cc`. The library's name
holds a hash of its source and flags, so an edit rebuilds it.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch
from torch import Tensor

from acceptmoe.methods import Plan, Router, Score, Sizing, register_backend
from acceptmoe.methods.fixed import rank_guard, rho_fixed
from acceptmoe.methods.routing import BIAS, ORDERS, RENORMALISE, SCORING
from acceptmoe.paths import cache_root

from .verifier import Verifier, VerifierInputError, VerifierOutput

SOURCE = Path(__file__).with_name("cpu_select.c")
FLAGS = ("-O2", "-shared", "-fPIC", "-ffp-contract=off", "-fno-fast-math", "-std=c99")
MAX_K = 256                                           # cpu_select.c's MAX_K


class CompilerMissing(VerifierInputError):
    """The cpu backend was asked for but its library cannot be built here."""


def cache_dir() -> Path:
    return cache_root()


def _build() -> Path:
    """The compiled library's path, building it when missing (atomic: concurrent builders race harmlessly)."""
    cc = os.environ.get("CC", "cc")
    source = SOURCE.read_bytes()
    digest = hashlib.sha256(source + " ".join((cc,) + FLAGS).encode()).hexdigest()[:16]
    out = cache_dir() / f"cpu_select-{digest}.so"
    if out.is_file():
        return out
    if shutil.which(cc) is None:
        raise CompilerMissing(f"the cpu verifier backend needs a C compiler ({cc!r} not found): install one "
                              f"(e.g. gcc) or set CC, or use backend 'torch'")
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=out.parent)
    os.close(fd)
    try:
        run = subprocess.run([cc, *FLAGS, "-o", tmp, str(SOURCE)], capture_output=True, text=True)
        if run.returncode != 0:
            raise CompilerMissing(f"the cpu verifier backend did not compile with {cc!r}: "
                                  f"{run.stderr.strip().splitlines()[-1:]}; use backend 'torch'")
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out


@functools.lru_cache(maxsize=1)
def library() -> ctypes.CDLL:
    """The loaded library with its signatures (built on first use; raises CompilerMissing)."""
    lib = ctypes.CDLL(str(_build()))
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    lib.topk_rows.argtypes = [ptr, i64, i64, i64, ptr, i64, ptr]
    lib.topk_rows.restype = i64
    lib.select_blocks.argtypes = [i64, i64, i64, i64, ptr, ptr, ptr, ptr, ptr, i64, i64, ptr, i64, ptr, ptr, ptr,
                                  ptr, ptr, ptr]
    lib.select_blocks.restype = i64
    lib.params_count.restype = i64
    return lib


@functools.lru_cache(maxsize=1)
def available() -> bool:
    """Whether the library builds and loads here (what `auto` asks on a CPU)."""
    try:
        library()
        return True
    except (CompilerMissing, OSError):
        return False


def _ptr(t: Tensor | None) -> int | None:
    return None if t is None else t.data_ptr()


def topk_rows(z: Tensor, k: int, allowed: Tensor | None = None) -> Tensor:
    """ids [..., k] long: the k largest of fp32 z [..., E] (contiguous, CPU) per row, best first, ties to
    the lower index (`methods.topk_ids`); allowed bool [M, E] restricts rows in consecutive groups of
    rows / M (one set per block) and must leave at least k per row."""
    E = z.shape[-1]
    rows = z.numel() // E
    ids = torch.empty(z.shape[:-1] + (k,), dtype=torch.long)
    mask = None if allowed is None else allowed.to(torch.uint8).contiguous()
    per = 1 if mask is None else rows // (mask.numel() // E)
    short = library().topk_rows(z.data_ptr(), rows, E, k, _ptr(mask), per, ids.data_ptr())
    if short >= 0:
        raise VerifierInputError(f"row {short} allows fewer than top_k={k} experts")
    return ids


# group-limited choice or not -> fp32 values [..., T, E] (contiguous) whose order under the library's rule (value
# descending, then lower index) is the router's choice order, from (router, fp32 logits, selection bias)
RANKED = {
    False: lambda router, z, bias: router.scores(z, bias).contiguous(),
    True: lambda router, z, bias: -router.ranking(z, bias).argsort(-1).float(),                # -rank
}


def natural(router: Router, logits: Tensor, bias: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Unrestricted routing (`Router.natural`): logits [..., T, E] -> ids, weights [..., T, k]; the
    library's top-k for CPU logits when it is built, the same ids and weights as `Router.natural`."""
    if logits.device.type != "cpu" or router.top_k > MAX_K or not available():
        return router.natural(logits, bias=bias)
    z = logits.float().contiguous()
    ids = topk_rows(RANKED[router.grouped](router, z, bias), router.top_k)
    return ids, router.weights(z, ids)


def natural_gates(router: Router, z: Tensor, ranked: Tensor) -> tuple[Tensor, Tensor]:
    """The natural top-k ids [..., T, k] from `ranked` (fp32 CPU values in the router's order, `RANKED`) and
    the model's gates r[t, K_t] on them (before `scale`): the natural routing a verifier call computes."""
    ids = topk_rows(ranked, router.top_k)
    return ids, router.gates(z, ids)


# score -> (term, dense, tie, token factor, batch roots) from (router, z, natural ids, gates, demand weights, step
# buffers): the per-token inputs `cpu_select.c` sums, the torch backend's SCORES in the library's form (batch
# roots: each block also sums the other blocks' root terms)
SCORES = {
    Score.GATE_MASS: lambda router, z, ids, gate, demand, s: (demand, False, None, s.valid, False),
    Score.VOTES: lambda router, z, ids, gate, demand, s: (None, False, gate, s.valid, False),   # ties: gate mass
    Score.ROUTER_MASS: lambda router, z, ids, gate, demand, s: (router.probs(z), True, None, s.valid, False),
    Score.COMMITMENT: lambda router, z, ids, gate, demand, s: (demand, False, None, s.alpha, False),
    Score.SHARED_COMMITMENT: lambda router, z, ids, gate, demand, s: (demand, False, None, s.alpha, True),
}
SIZES = {Sizing.ALL: 0, Sizing.FIXED: 1, Sizing.SELF: 2}          # cpu_select.c's SIZING_*
register_backend("cpu", SCORES, SIZES, dict(scoring=SCORING, order=ORDERS, biased=BIAS, grouped=RANKED,
                                            renormalize=RENORMALISE))


class CpuVerifier(Verifier):
    """The `cpu` backend of `make_verifier`: torch for the router's float work, the library for the rest."""
    backend = "cpu"

    def __init__(self, plan: Plan, device: torch.device | str = "cpu"):
        super().__init__(plan, device)
        if self.device.type != "cpu":
            raise VerifierInputError(f"the cpu verifier backend runs on the CPU, not {self.device}; use 'auto'")
        if plan.router.top_k > MAX_K:
            raise VerifierInputError(f"the cpu verifier backend takes top_k <= {MAX_K}; use backend 'torch'")
        self.lib = library()
        cfg, spec = plan.selector, plan.spec
        self.params = torch.tensor([int(spec.anchor), SIZES[spec.sizing], cfg.budget or 0,
                                    rank_guard(cfg.rank_tolerance), rho_fixed(cfg.prune_rho), plan.min_set,
                                    cfg.score_bits], dtype=torch.long)
        assert self.params.numel() == self.lib.params_count()

    def _run(self, logits: Tensor, resident: Tensor | None, route: bool, bias: Tensor | None) -> VerifierOutput:
        plan, router = self.plan, self.plan.router
        (B, T, E), k = logits.shape, router.top_k
        z = logits.float().contiguous()                                       # [B, T, E]
        ranked = RANKED[router.grouped](router, z, bias)                      # [B, T, E] in the router's order
        gate = demand = None
        if plan.spec.score is Score.ROUTER_MASS:
            ids = topk_rows(ranked, k)                                        # [B, T, k] natural K_t
        else:
            ids, gate = natural_gates(router, z, ranked)                      # K_t and the model's r[t, K_t]
            demand = gate if plan.selector.demand_score == "gate" else router.probs(z).gather(-1, ids)
        assert plan.spec.score is not None                                # a verifier's method speculates
        term, dense, tie, factor, roots = SCORES[plan.spec.score](router, z, ids, gate, demand, self.rows(B))
        # every array the call reads is held in a local until it returns
        term, tie, factor = _flat(term), _flat(tie), factor.float().contiguous()
        held = None if resident is None else resident.to(torch.uint8).contiguous()
        eligible = torch.empty(B, E, dtype=torch.bool)
        utility = torch.empty(B, E, dtype=torch.float32)
        anchor = torch.empty(B, E, dtype=torch.bool)
        routed = torch.empty(B, T, k, dtype=torch.long) if route else None
        masked = torch.empty(B, T, E, dtype=torch.float32) if route else None     # ranked, -inf outside S
        short = self.lib.select_blocks(B, T, E, k, ranked.data_ptr(), ids.data_ptr(), _ptr(term), _ptr(tie),
                                       factor.data_ptr(), int(dense), int(roots), _ptr(held),
                                       1 if held is None else held.numel() // E, self.params.data_ptr(),
                                       eligible.data_ptr(), utility.data_ptr(), anchor.data_ptr(), _ptr(routed),
                                       _ptr(masked))
        if not route:
            return VerifierOutput(None, None, eligible, utility, anchor)
        if short >= 0:
            raise VerifierInputError(f"block {short}'s set holds fewer than top_k={k} experts: raise prune_min_set "
                                     f"or the budget")
        assert routed is not None and masked is not None                      # allocated above when routing
        if not router.ranks_logits:                                           # ranked values, not the logits
            masked = z.masked_fill(~eligible[:, None, :], float("-inf"))
        return VerifierOutput(routed, router.weights(masked, routed, z), eligible, utility, anchor)


def _flat(t: Tensor | None) -> Tensor | None:
    return None if t is None else t.float().contiguous()
