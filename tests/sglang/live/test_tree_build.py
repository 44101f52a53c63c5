"""Trees as SGLang builds them: EAGLE draft results through SGLang's own tree kernel (its Triton version, under
the Triton interpreter), recovered by the plugin and compared with the ancestor mask and positions the same
kernel writes for attention. Also SGLang's greedy tree verification walks the recovered tree's links."""
import os
import random

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest
import torch
from sglang.kernels.ops.speculative.spec_tree import TreeMaskMode, sgl_build_tree_kernel_triton

from acceptmoe.serving.sglang.tree import parents_from_links

TOPK, DEPTH = 3, 4


def eagle_draft(rng: random.Random, n: int):
    """parent_list [topk*(depth-1)+1] and sorted selected_index [n-1] in EAGLE's flattened layout: step 0 has
    `topk` candidates (0..topk-1, children of the root); step s >= 1 expands `topk` nodes of step s-1 (listed
    in parent_list), each into `topk` candidates numbered topk + (s-1)*topk^2 + j*topk + c."""
    parent_list, selected = [-1], set()
    level = list(range(TOPK))                          # candidates of step 0
    levels = [level]
    for s in range(1, DEPTH):
        expanded = rng.sample(levels[-1], TOPK)
        parent_list += expanded
        levels.append([TOPK + (s - 1) * TOPK * TOPK + j * TOPK + c for j in range(TOPK) for c in range(TOPK)])
    parent_of = {}
    for s in range(1, DEPTH):
        for j, node in enumerate(parent_list[1 + (s - 1) * TOPK: 1 + s * TOPK]):
            for c in range(TOPK):
                parent_of[TOPK + (s - 1) * TOPK * TOPK + j * TOPK + c] = node
    pool = [c for lv in levels for c in lv]
    while len(selected) < n - 1:                       # a subset closed under parents (EAGLE's top scores are)
        c = rng.choice(pool)
        chain = [c]
        while chain[-1] in parent_of:
            chain.append(parent_of[chain[-1]])
        if len(selected | set(chain)) <= n - 1:
            selected |= set(chain)
    return parent_list, sorted(selected)


@pytest.mark.parametrize("seed", range(3))
def test_recovered_trees_match_sglangs_ancestor_mask(seed):
    rng = random.Random(seed)
    bs, n = 3, 10
    drafts = [eagle_draft(rng, n) for _ in range(bs)]
    parent_list = torch.tensor([p for p, _ in drafts])
    selected = torch.tensor([s for _, s in drafts])
    seq_lens = torch.tensor([7, 3, 12])
    mask = torch.ones(int(seq_lens.sum()) * n + n * n * bs, dtype=torch.bool)
    positions = torch.empty(bs * n, dtype=torch.long)
    retrieve = torch.full((3, bs, n), -1, dtype=torch.long)
    sgl_build_tree_kernel_triton(parent_list, selected, seq_lens, mask, positions, retrieve[0], retrieve[1],
                                 retrieve[2], TOPK, DEPTH, n, TreeMaskMode.FULL_MASK)
    parents = parents_from_links(retrieve[1], retrieve[2])
    offset = 0
    for b in range(bs):
        L = int(seq_lens[b])
        rows = mask[offset: offset + n * (L + n)].view(n, L + n)[:, L:]          # [n, n] ancestors (incl. self)
        offset += n * (L + n)
        depth = positions[b * n: (b + 1) * n] - L
        for i in range(1, n):
            anc = [j for j in range(n) if rows[i, j] and j != i]
            want = max(anc, key=lambda j: depth[j])                              # the deepest proper ancestor
            assert int(parents[b, i]) == want and int(depth[want]) == int(depth[i]) - 1
        assert int(parents[b, 0]) == -1
    assert int((positions.view(bs, n) - seq_lens[:, None]).max()) >= 2          # trees deeper than a star


@pytest.mark.parametrize("mode", [TreeMaskMode.QLEN_ONLY, TreeMaskMode.FULL_MASK], ids=["qlen", "full"])
def test_cpu_tree_op_equals_sglangs_triton_tree_kernel(mode):
    """acceptmoe's torch `build_tree_kernel_efficient_cpu` (the CPU stand-in) writes what SGLang's own Triton
    tree kernel writes: links, positions, retrieve index and the tree mask."""
    from acceptmoe.serving.sglang.cpu.ops import build_tree_kernel_efficient_cpu

    rng = random.Random(11)
    bs, n = 3, 10
    drafts = [eagle_draft(rng, n) for _ in range(bs)]
    parent_list = torch.tensor([p for p, _ in drafts])
    selected = torch.tensor([s for _, s in drafts])
    seq_lens = torch.tensor([7, 3, 12])
    size = bs * n * n if mode == TreeMaskMode.QLEN_ONLY else int(seq_lens.sum()) * n + n * n * bs
    outs = []
    for build in (sgl_build_tree_kernel_triton, build_tree_kernel_efficient_cpu):
        mask = torch.ones(size, dtype=torch.bool)
        positions = torch.empty(bs * n, dtype=torch.long)
        retrieve = torch.full((3, bs, n), -1, dtype=torch.long)
        build(parent_list, selected, seq_lens, mask, positions, retrieve[0], retrieve[1], retrieve[2], TOPK, DEPTH, n,
              int(mode))
        outs.append((mask, positions, retrieve))
    for a, b in zip(*outs, strict=True):
        assert torch.equal(a, b)


def test_cpu_greedy_verify_equals_sglangs_triton_kernel():
    """The torch `verify_tree_greedy_cpu` accepts what SGLang's Triton greedy verification accepts."""
    from sglang.kernels.ops.speculative.spec_tree import verify_tree_greedy_triton

    from acceptmoe.serving.sglang.cpu.ops import verify_tree_greedy_cpu

    rng = random.Random(5)
    bs, n = 3, 10
    drafts = [eagle_draft(rng, n) for _ in range(bs)]
    retrieve = torch.full((3, bs, n), -1, dtype=torch.long)
    sgl_build_tree_kernel_triton(torch.tensor([p for p, _ in drafts]), torch.tensor([s for _, s in drafts]),
                                 torch.tensor([4, 5, 6]), torch.ones(bs * n * n, dtype=torch.bool),
                                 torch.empty(bs * n, dtype=torch.long), retrieve[0], retrieve[1], retrieve[2], TOPK,
                                 DEPTH, n, int(TreeMaskMode.QLEN_ONLY))
    g = torch.Generator().manual_seed(0)
    candidates = torch.randint(0, 3, (bs, n), generator=g)                  # few tokens: many matches
    target = torch.randint(0, 3, (bs, n), generator=g)
    outs = []
    for verify in (verify_tree_greedy_triton, verify_tree_greedy_cpu):
        predicts = torch.zeros(bs * n, dtype=torch.int32)
        accept_index = torch.full((bs, DEPTH + 1), -1, dtype=torch.int32)
        accept_num = torch.zeros(bs, dtype=torch.int32)
        verify(predicts, accept_index, accept_num, candidates, retrieve[0], retrieve[1], retrieve[2], target)
        outs.append((predicts, accept_index, accept_num))
    for a, b in zip(*outs, strict=True):
        assert torch.equal(a, b)
    assert int(outs[1][2].max()) >= 1                                      # some drafts accepted
