"""`plan(engine, method, ...)`: a `Plan` from the keyword style tests read best (method, budget, p_hat, pruning,
selector), bound to the engine (or a `Fit`)."""
from __future__ import annotations

from acceptmoe.methods import Fit, Plan, Variant


def plan(engine, method: str, budget: int | None = None, commitment=None, prune: bool | None = None,
         selector: dict | None = None, b0: int | None = None) -> Plan:
    """Variant(method, budget, prune, overrides=selector) bound to engine.fit (or a Fit) with p_hat (a
    CommitmentTable or a sequence) and b0."""
    v = Variant(method, budget=budget, prune=prune, overrides=tuple((selector or {}).items()))
    fit = engine if isinstance(engine, Fit) else engine.fit
    return v.bind(fit, commitment=getattr(commitment, "p_hat", commitment), b0=b0)
