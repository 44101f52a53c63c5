"""`V(...)`: a bound `Variant` from the keyword style tests read best (method, budget, p_hat, pruning, selector)."""
from __future__ import annotations

from acceptmoe.methods import Variant


def V(method: str, budget: int | None = None, commitment=None, prune: bool | None = None,
      selector: dict | None = None) -> Variant:
    """Variant(method, budget, prune, overrides=selector) bound to p_hat (a CommitmentTable or a sequence)."""
    v = Variant(method, budget=budget, prune=prune, overrides=tuple((selector or {}).items()))
    return v.bind(commitment=getattr(commitment, "p_hat", commitment))
