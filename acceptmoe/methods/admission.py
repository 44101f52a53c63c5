"""Token-side admission: which drafted nodes one verify pass admits (docs/method.md, "Token-side admission").

    >>> from acceptmoe.methods.admission import Admission, UnionGrowth, VerifyCost, admitted
    >>> cost = VerifyCost(fixed_s=1e-3, per_token_s=1e-4, per_byte_s=1e-9, expert_bytes=10_000, moe_layers=2)
    >>> growth = UnionGrowth(experts=16, top_k=2)            # independent tokens until a pass is measured
    >>> admitted(Admission.SURVIVAL, [1.0, 0.9, 0.5, 0.05], [-1, 0, 1, 0], cost, growth)
    [0, 1, 2]

The pieces are pure and host-side (floats and lists), shared by every engine that admits:

- `VerifyCost`: the explicit cost of one verify pass, `fixed + per_token * tokens + per_byte * bytes`, with
  `bytes = moe_layers * expert_bytes * (experts read per layer)` (resident) plus, under the offloaded store,
  `fetch_per_byte * moe_layers * expert_bytes * (experts fetched per layer)`. Its parameters come from a profile
  (`./reproduce.sh profile-verify`, `acceptmoe.costs.verify`), never from constants here.
- `UnionGrowth`: the expected number of distinct experts per layer that n tokens route to,
  `E (1 - (1 - k/E)^(1 + c (n - 1)))`: `c = 1` is independent tokens, `c = 0` one token's `k`; `c` is refitted
  from each pass's measured mean union over its tokens (per request), so it starts at 1.
- `admitted(rule, survival, parents, ...)`: the admitted node indices (root first, ascending, so topological):
  a prefix of the nodes ranked by survival (descending, ties to the lower index), which is ancestor-closed
  because a node's survival (the product of the drafter's probabilities on its path) never exceeds its
  parent's; checked anyway. Each `Admission` member maps to one rule in `RULES`, checked at import.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from .registry import Admission, BackendCoverageError


@dataclass(frozen=True)
class VerifyCost:
    """Seconds of one verify pass: fixed + per token + per expert byte read (and fetched, offloaded)."""
    fixed_s: float
    per_token_s: float
    per_byte_s: float                     # per byte of expert weights the pass reads (the union of its sets)
    expert_bytes: int                     # one expert's bytes at the target's shape (every matrix)
    moe_layers: int
    fetch_per_byte_s: float | None = None   # per byte fetched into the offloaded X-slot pool (None: not profiled)
    source: str = ""                      # what profiled it: machine, model, when (recorded in every run)

    def seconds(self, tokens: float, experts: float, fetched: float = 0.0) -> float:
        """A pass of `tokens` tokens reading `experts` experts per MoE layer, `fetched` of them not resident."""
        per_layer = self.moe_layers * self.expert_bytes
        fetch = 0.0 if fetched == 0 else (self.fetch_per_byte_s or 0.0) * per_layer * fetched
        return self.fixed_s + self.per_token_s * tokens + self.per_byte_s * per_layer * experts + fetch

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> VerifyCost:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


@dataclass
class UnionGrowth:
    """Expected distinct experts per layer for n tokens (see the module docstring); `observe` refits `c`."""
    experts: int
    top_k: int
    c: float = 1.0

    def at(self, n: float) -> float:
        E, k = self.experts, self.top_k
        if n <= 0:
            return 0.0
        if k >= E:
            return float(E)
        return E * (1.0 - (1.0 - k / E) ** (1.0 + self.c * (n - 1)))

    def observe(self, tokens: int, union: float) -> None:
        """Refit `c` to a pass of `tokens` tokens whose mean union per layer was `union` (one token: no change)."""
        E, k = self.experts, self.top_k
        if tokens < 2 or k >= E:
            return
        u = min(max(union, float(k)), E - 0.5)
        m = math.log(1.0 - u / E) / math.log(1.0 - k / E)
        self.c = min(max((m - 1.0) / (tokens - 1), 0.0), 1.0)


@dataclass(frozen=True)
class Costing:
    """What a rule weighs a prefix with: the cost, the natural union's growth, the method's eligible set's growth
    (None: the natural union, an unrestricted method), a fixed budget's cap, the non-resident share of experts."""
    cost: VerifyCost
    natural: UnionGrowth
    eligible: UnionGrowth | None = None
    cap: int | None = None
    fetch_share: float = 0.0

    def experts(self, n: int, own: bool) -> float:
        """Experts per layer a pass of n tokens reads: the natural union, or (own) the method's expected set."""
        growth = self.eligible if own and self.eligible is not None else self.natural
        out = growth.at(n)
        return min(out, float(self.cap)) if own and self.cap is not None else out

    def seconds(self, n: int, own: bool) -> float:
        e = self.experts(n, own)
        return self.cost.seconds(n, e, e * self.fetch_share)


def ranked(survival: Sequence[float]) -> list[int]:
    """Draft nodes (1..T-1) by survival descending, ties to the lower index."""
    return sorted(range(1, len(survival)), key=lambda i: (-survival[i], i))


def _best(values: list[float]) -> int:
    """The first index of the largest value (the smallest prefix on ties)."""
    return max(range(len(values)), key=lambda n: (values[n], -n))


def _survival(survival: Sequence[float], order: list[int], c: Costing) -> int:
    """vLLM-style: the n maximising (1 + expected accepted) / (fixed + per_token * tokens); experts not modeled."""
    gains = _cumulative(survival, order)
    return _best([(1.0 + g) / (c.cost.fixed_s + c.cost.per_token_s * (n + 1)) for n, g in enumerate(gains)])


def _prefix(survival: Sequence[float], order: list[int], c: Costing) -> int:
    """EVICT-style: the n maximising (1 + expected accepted) / modeled pass cost, the natural union's bytes in it."""
    gains = _cumulative(survival, order)
    return _best([(1.0 + g) / c.seconds(n + 1, own=False) for n, g in enumerate(gains)])


def _costed(survival: Sequence[float], order: list[int], c: Costing) -> int:
    """The n maximising gain minus cost: expected accepted tokens, each worth one decode step's modeled seconds,
    minus the pass's modeled seconds with the method's own expected set (a node is admitted when what it adds
    to acceptance pays for the token and the experts it adds)."""
    gains = _cumulative(survival, order)
    value = c.cost.seconds(1, float(c.natural.top_k))          # one accepted token saves one decode step
    return _best([value * g - c.seconds(n + 1, own=True) for n, g in enumerate(gains)])


def _cumulative(survival: Sequence[float], order: list[int]) -> list[float]:
    out, acc = [0.0], 0.0
    for i in order:
        acc += survival[i]
        out.append(acc)
    return out


def _all(survival: Sequence[float], order: list[int], c: Costing) -> int:
    return len(order)


# every Admission member -> the number of ranked draft nodes it admits; checked complete below, at import
RULES: dict[Admission, Callable[[Sequence[float], list[int], Costing], int]] = {
    Admission.ALL: _all, Admission.SURVIVAL: _survival, Admission.PREFIX: _prefix, Admission.COSTED: _costed}
_missing = [a.name for a in Admission if a not in RULES]
if _missing:
    raise BackendCoverageError(f"admission {' and '.join(_missing)} has no rule in methods.admission.RULES")


def admitted(rule: Admission, survival: Sequence[float], parents: Sequence[int], cost: VerifyCost,
             natural: UnionGrowth, eligible: UnionGrowth | None = None, cap: int | None = None,
             fetch_share: float = 0.0) -> list[int]:
    """The node indices a pass admits, root first, ascending (an ancestor-closed subtree)."""
    order = ranked(survival)
    n = RULES[rule](survival, order, Costing(cost, natural, eligible, cap, fetch_share))
    keep = sorted([0] + order[:n])
    kept = set(keep)
    if any(parents[i] not in kept for i in keep[1:]):
        raise AssertionError("admission is not ancestor-closed (a node's parent was dropped)")
    return keep
