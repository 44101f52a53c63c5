"""Token-side admission inside SGLang's worker: which drafted nodes of each request's tree a verify pass admits,
applied to SGLang's fixed-width pass (docs/method.md, "Token-side admission"; docs/sglang.md).

    scores = node_survival(score_list, top_scores_index)    # organize_draft_results hook: [B, n-1] per node
    keeps, mask = admissions.admit(rids, scores, parents)   # before the verify pass (host): one rule per request
    cut_links(next_token, next_sibling, keeps)              # SGLang's verification never walks past them
    admissions.observe(rids, keeps, records)                # after it: the pass's unions refit each request's growth

The native engine verifies the admitted subtree alone. SGLang verifies a fixed number of tokens per request
(`speculative_num_draft_tokens`), so here the other nodes stay in the pass but count for nothing: they are cut
from the links SGLang's tree verification follows (never accepted, greedy or sampled), they weigh zero in the
eligible set's demand (`Verifier.prepare_tree(admitted=...)`), they route only to experts the admitted tokens
already read (`Runtime.restrict`), and the records hold the admitted subtree. What differs from the native
engine: their attention and dense work is still done (the saving is the expert union, not the tokens).

The rule is the native engine's (`engine.admission.Admitting`, per request, its union growth refitted after
every pass) with the survival SGLang drafted with: the product of the drafter's top-k probabilities on the
node's path, as SGLang ranks its candidates (`eagle_utils.organize_draft_results`). SGLang's top-1 chain path
keeps no probabilities (it drafts by argmax), so admission needs a tree with topk > 1; a draft pass replayed
from a CUDA graph runs no Python, so the scores exist only with the draft's graphs off.
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import torch
from torch import Tensor

from acceptmoe.engine.admission import Admitting, subtree_parents
from acceptmoe.errors import UserError
from acceptmoe.methods import Plan


class AdmissionUnavailableError(UserError, RuntimeError):
    """A verify pass whose drafted nodes have no survival scores to admit by; the message says why and the fix."""


def node_survival(score_list: Sequence[Tensor], top_scores_index: Tensor) -> Tensor:
    """fp32 [B, n-1]: the survival of each drafted node 1..n-1 of SGLang's tree, from the draft's per-step
    cumulative scores and the chosen candidates (node i + 1 is candidate top_scores_index[:, i], as SGLang's
    tree builder numbers them)."""
    return torch.cat(list(score_list), dim=1).flatten(1).gather(1, top_scores_index.long()).float()


def cut_links(next_token: Tensor, next_sibling: Tensor, keeps: Sequence[Sequence[int]]) -> None:
    """Unlink every node outside `keeps[b]` from request b's tree in place: each node's first admitted child
    and next admitted sibling, siblings in SGLang's own order. The admitted nodes are ancestor-closed, so
    every admitted node stays reachable from the root."""
    first, sibling = next_token.tolist(), next_sibling.tolist()
    changed = False
    for b, keep in enumerate(keeps):
        n = len(first[b])
        if len(keep) == n:
            continue
        kept = set(keep)
        new_first, new_sibling = [-1] * n, [-1] * n
        for p in keep:
            children, c = [], first[b][p]
            while c >= 0:
                if c in kept:
                    children.append(c)
                c = sibling[b][c]
            if children:
                new_first[p] = children[0]
                for a, nxt in zip(children, children[1:], strict=False):
                    new_sibling[a] = nxt
        first[b], sibling[b], changed = new_first, new_sibling, True
    if changed:
        next_token[: len(keeps)].copy_(torch.tensor(first[: len(keeps)], dtype=next_token.dtype))
        next_sibling[: len(keeps)].copy_(torch.tensor(sibling[: len(keeps)], dtype=next_sibling.dtype))


def subtree_record(parents: Sequence[int], keep: Sequence[int], path: Sequence[int]) -> tuple[list[int], list[int]]:
    """The admitted subtree's parent list and the accepted path in its own numbering (`engine.admission.subtree`'s)."""
    new = {old: i for i, old in enumerate(keep)}
    return subtree_parents(parents, keep), [new[i] for i in path]


class Admissions:
    """One server's admission state: per request id its `Admitting` (the most recent `limit` requests kept)."""

    def __init__(self, plan: Plan, limit: int = 4096):
        self.plan, self.limit = plan, limit
        self.states: OrderedDict[str, Admitting] = OrderedDict()

    @property
    def measures(self) -> bool:
        """Its rule counts experts: every pass computes its per-layer unions (`Admission.models_experts`)."""
        return self.plan.spec.admission.models_experts

    def state(self, rid: str) -> Admitting:
        st = self.states.get(rid)
        if st is None:
            st = Admitting.start(self.plan)
            assert st is not None                          # an admitting plan (Admissions is made for one)
            self.states[rid] = st
            if len(self.states) > self.limit:
                self.states.popitem(last=False)
        else:
            self.states.move_to_end(rid)
        return st

    def admit(self, rids: Sequence[str], scores: Tensor, parents: Tensor) -> tuple[list[list[int]], Tensor]:
        """Per request (scores [B, n-1] survival, parents [B, n]): its admitted nodes, and the mask bool [B, n]."""
        B, n = parents.shape
        survival, tree = scores.double().tolist(), parents.tolist()
        keeps = [self.state(str(rids[b])).keep([1.0] + survival[b], tree[b]) for b in range(B)]
        mask = torch.zeros(B, n, dtype=torch.bool)
        for b, keep in enumerate(keeps):
            mask[b, keep] = True
        return keeps, mask

    def observe(self, rids: Sequence[str], keeps: Sequence[Sequence[int]], records: Tensor) -> None:
        """Refit each request's growth from this pass's rows [L, B, fields] over its admitted tokens."""
        for b, keep in enumerate(keeps):
            self.state(str(rids[b])).observe(len(keep), records[:, b])
