"""Token-side admission in the native engine: one request's admitted subtree of each drafted tree, and the
measured union growth it weighs the next tree with (docs/method.md, "Token-side admission").

    state = Admitting.start(plan)                  # None for a method that admits every drafted node
    tree = state.truncate(tree, fetch_share)       # an ancestor-closed subtree, root first (the tree itself if whole)
    state.observe(tree.num_tokens, stats)          # the pass's per-layer trace rows [L, 6] refit the growth

The rule is the plan's `Admission` (`methods.admission.admitted`), weighed with the plan's `VerifyCost`. The
unions it models are read from the verify pass's own per-layer rows (`trace.layer_stats`), which an admitting
method whose rule counts experts always computes (recording never changes the computation; the trace keeps
them only when asked). A request's growth starts at independent tokens and is refitted after every pass.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from acceptmoe.methods import Plan, UnionGrowth, admitted

from .trace import LAYER_FIELDS
from .tree import DraftTree

SET_SIZE, NATURAL_UNION = LAYER_FIELDS.index("set_size"), LAYER_FIELDS.index("natural_union")


@dataclass
class Admitting:
    """One request's admission: its plan and its expected growth of the natural union and of its own set."""
    plan: Plan
    natural: UnionGrowth
    eligible: UnionGrowth | None       # the method's own set (restricting methods); None: the natural union

    @classmethod
    def start(cls, plan: Plan) -> Admitting | None:
        if not plan.spec.admits:
            return None
        E, k = plan.num_experts, plan.router.top_k
        return cls(plan, UnionGrowth(E, k), UnionGrowth(E, k) if plan.spec.restricts else None)

    @property
    def measures(self) -> bool:
        """Its rule needs each pass's per-layer unions (`Admission.models_experts`)."""
        return self.plan.spec.admission.models_experts

    def truncate(self, tree: DraftTree, fetch_share: float = 0.0) -> DraftTree:
        """The admitted subtree of `tree` (the tree itself when every node is admitted)."""
        keep = self.keep(torch.exp(tree.scores.double()).tolist(), tree.parents.tolist(), fetch_share)
        return tree if len(keep) == tree.num_tokens else subtree(tree, keep)

    def keep(self, survival: list[float], parents: list[int], fetch_share: float = 0.0) -> list[int]:
        """The admitted node indices of one drafted tree (root first, ascending), from each node's survival (the
        product of the drafter's probabilities on its path; the root's 1) and its parent list: the rule every
        engine applies (the SGLang plugin calls it with the scores SGLang drafted with)."""
        assert self.plan.cost is not None                    # an admitting plan has one (Plan.__post_init__)
        return admitted(self.plan.spec.admission, survival, parents, self.plan.cost, self.natural, self.eligible,
                        self.plan.budget, fetch_share)

    def observe(self, tokens: int, stats: Tensor | None) -> None:
        """Refit the growth from one verified block's rows [L, len(LAYER_FIELDS)] (None: nothing measured)."""
        if stats is None or not self.measures:
            return
        means = stats.double().mean(0).tolist()
        self.natural.observe(tokens, means[NATURAL_UNION])
        if self.eligible is not None:
            self.eligible.observe(tokens, means[SET_SIZE])


def subtree(tree: DraftTree, keep: list[int]) -> DraftTree:
    """The nodes `keep` of `tree` (ascending, root first, ancestor-closed) as a tree of their own."""
    idx = torch.tensor(keep, device=tree.tokens.device)
    return DraftTree.from_parents(tree.tokens[idx], subtree_parents(tree.parents.tolist(), keep),
                                  int(tree.positions[0]), tree.scores[idx])


def subtree_parents(parents: Sequence[int], keep: Sequence[int]) -> list[int]:
    """The parent list of the nodes `keep` of a tree (ascending, root first, ancestor-closed), renumbered."""
    new = {old: i for i, old in enumerate(keep)}
    return [-1] + [new[parents[i]] for i in keep[1:]]


def fetch_share(store) -> float:
    """The share of a layer's experts not resident in the expert pool (0 for a resident store)."""
    if store.kind != "offloaded":
        return 0.0
    shares = [float(store.resident(layer).float().mean()) for layer in store.layer_ids]
    return 1.0 - sum(shares) / len(shares) if shares else 0.0
