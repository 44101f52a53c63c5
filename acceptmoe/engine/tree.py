"""Draft trees: the frozen `DraftTree` a drafter hands to the verifier, and the EAGLE-2 dynamic tree.

A tree has T tokens; index 0 is the root (the last committed token, not yet run through the target), the
rest are draft nodes in topological order (each parent index is smaller than its child's). The tree
attention mask lets each node see itself and its ancestors only.

EAGLE-2 expansion (as in EAGLE-2 and SGLang's `select_top_k_tokens` / `organize_draft_results`):
level 1 takes the root's `topk` most likely tokens; each later level feeds the `topk` kept nodes through
the drafter, proposes `topk` children per kept node, and keeps the `topk` best of those `topk**2`
children by cumulative log-probability (what each fed node attends to is the drafter's business: see
`eagle3.Eagle3Drafter`, which follows SGLang's beam slots). Every proposed node is a candidate; the tree is the best
`num_draft_tokens - 1` candidates by cumulative log-probability (ties: shallower first, then earlier
proposal), which is ancestor-closed because a child's cumulative log-probability never exceeds its
parent's. The tree reaches depth `num_steps` after `num_steps - 1` drafter forwards.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property

import torch
from torch import Tensor

from acceptmoe.methods import BlockInfo


@dataclass(frozen=True)
class TreeShape:
    num_steps: int = 5           # draft levels (maximum depth of a draft node)
    topk: int = 10               # children per kept node, and nodes kept per level
    num_draft_tokens: int = 64   # tree size T, root included (SGLang's speculative_num_draft_tokens)

    def __post_init__(self) -> None:
        if self.num_steps < 1 or self.topk < 1:
            raise ValueError(f"TreeShape needs num_steps >= 1 and topk >= 1, got {self}")
        if self.num_draft_tokens < 2:
            raise ValueError(f"num_draft_tokens counts the root, so it must be >= 2, got {self.num_draft_tokens}")
        if self.num_draft_tokens - 1 > self.num_candidates:
            raise ValueError(f"num_draft_tokens - 1 = {self.num_draft_tokens - 1} exceeds the "
                             f"{self.num_candidates} nodes {self.num_steps} levels of top-{self.topk} "
                             f"propose: lower num_draft_tokens or raise num_steps/topk")

    @property
    def num_candidates(self) -> int:
        """Nodes proposed during expansion: topk at level 1, topk**2 at every later level."""
        return self.topk + (self.num_steps - 1) * self.topk ** 2


def ancestor_mask(parents: Tensor) -> Tensor:
    """bool [T, T]: mask[i, j] is True when j is i or an ancestor of i. parents [T] in topological order
    (parents[0] == -1, each parent earlier than its child: what `BlockInfo.from_parents` checks).

    Built on the host from lists (each node's ancestry is its parent's plus itself) into one byte buffer."""
    par = parents.tolist()
    T = len(par)
    flat = bytearray(T * T)
    chains: list[list[int]] = []
    for i, p in enumerate(par):
        chain = [i] if p < 0 else chains[p] + [i]
        chains.append(chain)
        for j in chain:
            flat[i * T + j] = 1
    mask = torch.frombuffer(flat, dtype=torch.bool).view(T, T)
    return mask.to(parents.device)


@dataclass(frozen=True, eq=False)
class DraftTree:
    tokens: Tensor     # [T] long, target vocabulary ids; tokens[0] is the root
    parents: Tensor    # [T] long, parents[0] == -1
    depths: Tensor     # [T] long, depths[0] == 0
    positions: Tensor  # [T] long, sequence positions: root position + depth
    mask: Tensor       # [T, T] bool, ancestor-or-self
    scores: Tensor     # [T] fp32, cumulative draft log-probability (root 0)

    @classmethod
    def from_parents(cls, tokens: Sequence[int] | Tensor, parents: Sequence[int] | Tensor,
                     root_position: int = 0, scores: Tensor | None = None) -> DraftTree:
        """A tree from its token and parent lists (validated: topological order, one root)."""
        block = BlockInfo.from_parents(parents)
        tok = torch.as_tensor(tokens, dtype=torch.long)
        if tok.shape != block.parents.shape:
            raise ValueError(f"tokens has {tok.numel()} entries but parents has {block.num_tokens}")
        device = tok.device
        par = block.parents.to(device)
        sc = torch.zeros(block.num_tokens) if scores is None else scores.float()
        tree = cls(tokens=tok, parents=par, depths=block.depth.to(device),
                   positions=block.depth.to(device) + root_position, mask=ancestor_mask(par),
                   scores=sc.to(device))
        tree.__dict__["block"] = block
        return tree

    @property
    def num_tokens(self) -> int:
        return int(self.tokens.numel())

    @cached_property
    def block(self) -> BlockInfo:
        """The verification-block geometry the selectors use."""
        return BlockInfo.from_parents(self.parents.cpu())

    def accept(self, target_argmax: Sequence[int] | Tensor) -> tuple[list[int], int]:
        """Greedy acceptance: the longest root path whose every child is the target's argmax at its parent.

        target_argmax [T]: the target's greedy token after each node. Returns the accepted path (node
        indices, root first) and the bonus token (the target's argmax after the path's last node)."""
        pred = [int(x) for x in (target_argmax.tolist() if isinstance(target_argmax, Tensor) else target_argmax)]
        if len(pred) != self.num_tokens:
            raise ValueError(f"target_argmax has {len(pred)} entries, the tree has {self.num_tokens} nodes")
        toks, pars = self.tokens.tolist(), self.parents.tolist()
        children: dict[int, list[int]] = {}
        for node in range(1, self.num_tokens):
            children.setdefault(pars[node], []).append(node)
        path = [0]
        while True:
            want = pred[path[-1]]
            nxt = next((c for c in children.get(path[-1], ()) if toks[c] == want), None)
            if nxt is None:
                return path, want
            path.append(nxt)


# step(level, fed_tokens [k] draft ids, parent_rows [k]) -> log-probs [k, Vd] of the fed nodes' children.
# parent_rows[j] is the row of node j's parent among the previous level's fed nodes (-1: the root).
StepFn = Callable[[int, Tensor, Tensor], Tensor]


@dataclass(frozen=True, eq=False)
class Candidates:
    tokens: Tensor   # [C] long, draft vocabulary ids
    parents: Tensor  # [C] long, candidate index of the parent, -1 for the root
    depths: Tensor   # [C] long, 1..num_steps
    scores: Tensor   # [C] fp32, cumulative log-probability


def eagle2_expand(root_logp: Tensor, step: StepFn, shape: TreeShape) -> Candidates:
    """Propose candidates level by level. root_logp [Vd]: the drafter's log-probs after the root."""
    k = shape.topk
    if root_logp.shape[-1] < k:
        raise ValueError(f"topk={k} exceeds the draft vocabulary ({root_logp.shape[-1]} tokens)")
    device = root_logp.device
    fed_score, fed_tok = root_logp.float().topk(k)                              # [k], [k]
    fed_cand = torch.arange(k, device=device)                                   # candidate index of fed nodes
    fed_parent_row = torch.full((k,), -1, dtype=torch.long, device=device)
    toks, pars, deps, scs = [fed_tok], [torch.full((k,), -1, device=device)], [torch.ones(k, device=device)], [fed_score]
    offset = k
    for level in range(1, shape.num_steps):
        logp = step(level, fed_tok, fed_parent_row).float()                     # [k, Vd]
        child_lp, child_tok = logp.topk(k, dim=-1)                              # [k, k]
        expand = (fed_score[:, None] + child_lp).flatten()                      # [k*k]
        toks.append(child_tok.flatten())
        pars.append(fed_cand.repeat_interleave(k))
        deps.append(torch.full((k * k,), level + 1, device=device))
        scs.append(expand)
        fed_score, sel = expand.topk(k)                                         # [k]
        fed_parent_row = sel // k
        fed_tok = child_tok.flatten()[sel]
        fed_cand = offset + sel
        offset += k * k
    return Candidates(torch.cat(toks), torch.cat(pars).long(), torch.cat(deps).long(), torch.cat(scs))


def select_tree(cand: Candidates, shape: TreeShape, root_token: int, root_position: int,
                to_target: Callable[[Tensor], Tensor]) -> DraftTree:
    """Keep the best num_draft_tokens - 1 candidates (ancestor-closed), topologically ordered."""
    n = shape.num_draft_tokens - 1
    C = cand.scores.numel()
    idx = torch.arange(C, device=cand.scores.device)
    # order: score desc, then depth asc, then candidate index asc (a stable lexicographic sort)
    order = idx[torch.argsort(cand.depths, stable=True)]
    order = order[torch.argsort(cand.scores[order], descending=True, stable=True)]
    keep = torch.sort(order[:n]).values                                         # candidate order is topological
    new_index = torch.full((C,), -1, dtype=torch.long, device=idx.device)
    new_index[keep] = torch.arange(1, n + 1, device=idx.device)
    par = cand.parents[keep]
    node_par = torch.where(par < 0, 0, new_index[par.clamp_min(0)])             # [n], 0 = the root
    if bool((node_par < 0).any()):
        raise AssertionError("tree selection is not ancestor-closed (a kept node's parent was dropped)")
    tokens = torch.cat([torch.tensor([root_token], device=idx.device), to_target(cand.tokens[keep])])
    parents = torch.cat([torch.tensor([-1], device=idx.device), node_par])
    scores = torch.cat([torch.zeros(1, device=idx.device), cand.scores[keep]])
    return DraftTree.from_parents(tokens, parents.cpu(), root_position, scores)
