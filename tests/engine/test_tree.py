"""Draft trees: EAGLE-2 expansion against a brute-force reference, tree properties, greedy acceptance."""
from __future__ import annotations

import hashlib

import pytest
import torch

from acceptmoe.engine.tree import DraftTree, TreeShape, ancestor_mask, eagle2_expand, select_tree
from acceptmoe.methods import TreeError

from spec_checkpoints import one_thread

VD = 40


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    yield from one_thread()


def path_logp(path: tuple[int, ...]) -> torch.Tensor:
    """A deterministic draft distribution [VD] that depends on the whole path (root = empty path)."""
    seed = int(hashlib.sha256(repr(path).encode()).hexdigest()[:8], 16)
    g = torch.Generator().manual_seed(seed)
    return torch.log_softmax(torch.randn(VD, generator=g) * 3, dim=-1)


class PathStep:
    """A step function that rebuilds each fed node's path from parent_row, as a drafter must."""

    def __init__(self):
        self.paths: list[tuple[int, ...]] = [()]
        self.calls = 0

    def __call__(self, level: int, fed_tok: torch.Tensor, parent_row: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        prev = self.paths
        self.paths = [prev[max(int(r), 0)] + (int(t),) for t, r in zip(fed_tok, parent_row, strict=False)]
        assert all(len(p) == level for p in self.paths)
        return torch.stack([path_logp(p) for p in self.paths])


def reference_tree(shape: TreeShape) -> dict[tuple[int, ...], float]:
    """Brute-force EAGLE-2: {kept path: cumulative log-prob}, paths as token tuples."""
    k = shape.topk
    lp = path_logp(())
    cands = {(t,): float(lp[t]) for t in lp.topk(k).indices.tolist()}
    fed = sorted(cands, key=lambda p: -cands[p])[:k]
    for _ in range(1, shape.num_steps):
        level = {}
        for p in fed:
            lp = path_logp(p)
            for t in lp.topk(k).indices.tolist():
                level[p + (t,)] = cands[p] + float(lp[t])
        cands.update(level)
        fed = sorted(level, key=lambda p: -level[p])[:k]
    kept = sorted(cands, key=lambda p: (-cands[p], len(p)))[: shape.num_draft_tokens - 1]
    return {p: cands[p] for p in kept}


def build(shape: TreeShape, root_token: int = 7, root_position: int = 11, offset: int = 100) -> DraftTree:
    step = PathStep()
    cand = eagle2_expand(path_logp(()), step, shape)
    assert step.calls == shape.num_steps - 1
    assert cand.tokens.numel() == shape.num_candidates
    return select_tree(cand, shape, root_token, root_position, lambda d: d + offset)


def node_paths(tree: DraftTree, offset: int = 100) -> dict[tuple[int, ...], float]:
    out = {}
    for node in range(1, tree.num_tokens):
        path = tree.block.path_to(node)[1:]
        out[tuple(int(tree.tokens[n]) - offset for n in path)] = float(tree.scores[node])
    return out


@pytest.mark.parametrize("shape", [TreeShape(5, 10, 64), TreeShape(3, 4, 12), TreeShape(1, 3, 3),
                                   TreeShape(4, 2, 11), TreeShape(2, 5, 31)])
def test_expansion_matches_brute_force_reference(shape):
    tree = build(shape)
    ref = reference_tree(shape)
    got = node_paths(tree)
    assert set(got) == set(ref)
    for p, s in ref.items():
        assert got[p] == pytest.approx(s, abs=1e-5)


@pytest.mark.parametrize("shape", [TreeShape(5, 10, 64), TreeShape(3, 4, 12), TreeShape(2, 3, 5)])
def test_tree_properties(shape):
    tree = build(shape, root_token=7, root_position=11)
    T = shape.num_draft_tokens
    assert tree.num_tokens == T and tree.tokens.shape == tree.parents.shape == tree.depths.shape == (T,)
    assert int(tree.tokens[0]) == 7 and int(tree.parents[0]) == -1 and int(tree.depths[0]) == 0
    assert all(0 <= int(tree.parents[i]) < i for i in range(1, T))          # topological, ancestor-closed
    assert torch.equal(tree.depths[1:], tree.depths[tree.parents[1:]] + 1)
    assert int(tree.depths.max()) <= shape.num_steps
    assert torch.equal(tree.positions, tree.depths + 11)
    for i in range(1, T):                                                    # a child never outscores its parent
        assert float(tree.scores[i]) <= float(tree.scores[int(tree.parents[i])])
    for d in range(2, int(tree.depths.max()) + 1):                           # only topk nodes per level expand
        assert len({int(p) for p, dd in zip(tree.parents, tree.depths, strict=True) if dd == d}) <= shape.topk
    for i in range(T):                                                       # mask = ancestors and self
        anc = set(tree.block.path_to(i))
        assert {j for j in range(T) if tree.mask[i, j]} == anc
    assert torch.equal(tree.block.depth, tree.depths)


def test_paper_shape_counts():
    shape = TreeShape()
    assert (shape.num_steps, shape.topk, shape.num_draft_tokens) == (5, 10, 64)
    assert shape.num_candidates == 10 + 4 * 100
    tree = build(shape)
    assert int((tree.depths == 1).sum()) <= 10


def test_shape_errors():
    with pytest.raises(ValueError, match="num_draft_tokens counts the root"):
        TreeShape(3, 2, 1)
    with pytest.raises(ValueError, match="exceeds the 2 nodes"):
        TreeShape(1, 2, 4)
    with pytest.raises(ValueError, match="num_steps >= 1"):
        TreeShape(0, 2, 2)
    with pytest.raises(ValueError, match="exceeds the draft vocabulary"):
        eagle2_expand(torch.zeros(3), PathStep(), TreeShape(2, 4, 5))


def test_from_parents_validates_and_builds_mask():
    with pytest.raises(TreeError, match="topological"):
        DraftTree.from_parents([1, 2, 3], [-1, 2, 0])
    with pytest.raises(ValueError, match="tokens has 2 entries"):
        DraftTree.from_parents([1, 2], [-1, 0, 0])
    parents = torch.tensor([-1, 0, 0, 1, 1, 3, 2])
    expected = torch.zeros(7, 7, dtype=torch.bool)
    for i, anc in enumerate([[0], [0, 1], [0, 2], [0, 1, 3], [0, 1, 4], [0, 1, 3, 5], [0, 2, 6]]):
        expected[i, anc] = True
    assert torch.equal(ancestor_mask(parents), expected)


# Hand-built tree:            root(10)
#                      /         |        \
#                  a(20)       b(21)     c(20')  (c repeats a's token in a later sibling)
#                 /    \         |
#             d(30)   e(31)    f(40)
#               |
#             g(50)
TOKENS = [10, 20, 21, 20, 30, 31, 40, 50]
PARENTS = [-1, 0, 0, 0, 1, 1, 2, 4]


@pytest.mark.parametrize("argmax, path, bonus", [
    ([99, 0, 0, 0, 0, 0, 0, 0], [0], 99),                      # nothing matches: bonus only
    ([20, 31, 0, 0, 0, 0, 0, 0], [0, 1, 5], 0),                # second child of a; e's argmax is the bonus
    ([20, 30, 0, 0, 50, 0, 0, 77], [0, 1, 4, 7], 77),          # full depth, bonus after the leaf
    ([21, 0, 40, 0, 0, 0, 5, 0], [0, 2, 6], 5),                # another branch
    ([20, 99, 0, 0, 0, 0, 0, 0], [0, 1], 99),                  # first sibling with the token wins
])
def test_greedy_acceptance(argmax, path, bonus):
    tree = DraftTree.from_parents(TOKENS, PARENTS, root_position=4)
    got_path, got_bonus = tree.accept(torch.tensor(argmax))
    assert (got_path, got_bonus) == (path, bonus)
    assert got_path == tree.block.path_to(got_path[-1])


def test_acceptance_checks_length():
    tree = DraftTree.from_parents(TOKENS, PARENTS)
    with pytest.raises(ValueError, match="target_argmax has 3 entries"):
        tree.accept([1, 2, 3])
