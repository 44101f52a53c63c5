"""The torch stand-ins for SGLang's sampling verify ops on a CPU (`acceptmoe.serving.sglang.cpu.ops`), without an
engine: the tree rule against a direct reading of sgl-kernel's kernel (hand-chosen coins) and against the
target's exact law (chi-square at alpha 0.01 over seeded coins, power stated), the renormalisations against the
native engine's `distribution`, and the seeded hash against SGLang's own Triton kernel (under the interpreter)."""
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import torch

from acceptmoe.engine import GenerationOptions
from acceptmoe.engine.sampling import distribution
from acceptmoe.evals.goodness import ALPHA, chi_square, min_detectable_tv
from acceptmoe.serving.sglang.cpu import ops

# one request's tree of n = 4 nodes: root 0 -> children 1 (token A) then 2 (token B); node 1 -> child 3 (token C)
A, B, C, V = 1, 2, 3, 6
CANDIDATES = [0, A, B, C]
NEXT_TOKEN, NEXT_SIBLING = [1, 3, -1, -1], [-1, 2, -1, -1]
ROWS = torch.tensor([[0.10, 0.30, 0.20, 0.15, 0.15, 0.10],    # target at the root
                     [0.05, 0.05, 0.10, 0.50, 0.20, 0.10],    # after A
                     [0.40, 0.10, 0.10, 0.10, 0.20, 0.10],    # after B
                     [0.20, 0.20, 0.20, 0.20, 0.10, 0.10]])   # after A C
STEPS = 3                                                     # depth 2 + the bonus


def run(coins: torch.Tensor, finals: torch.Tensor):
    """The op over len(finals) copies of the tree; the emitted tokens of each request (accepted + bonus)."""
    bs, n = finals.numel(), len(CANDIDATES)
    predicts = torch.zeros(bs * n, dtype=torch.int32)
    accept_index = torch.full((bs, STEPS), -1, dtype=torch.int32)
    accept_num = torch.empty(bs, dtype=torch.int32)
    draft = torch.zeros(bs, n, V)
    ops.tree_speculative_sampling_target_only(
        predicts, accept_index, accept_num, torch.tensor([CANDIDATES] * bs), torch.arange(bs * n).view(bs, n),
        torch.tensor([NEXT_TOKEN] * bs), torch.tensor([NEXT_SIBLING] * bs), coins, finals,
        ROWS.expand(bs, n, V).contiguous(), draft)
    out = []
    for b in range(bs):
        kept = accept_index[b, :int(accept_num[b]) + 1].tolist()
        assert -1 not in kept and accept_index[b, int(accept_num[b]) + 1:].eq(-1).all()
        out.append(tuple(int(predicts[i]) for i in kept))
    return out, draft


def one(root_coin, node_coin, final_coin):
    coins = torch.tensor([[root_coin, node_coin, 0.5, 0.5]])
    out, draft = run(coins, torch.tensor([final_coin]))
    return out[0], draft[0]


def test_the_kernels_rule_with_chosen_coins():
    # the root coin falls in A's share [0, .3): accept A; node A's coin in C's share [0, .5): accept C (full depth);
    # the bonus is drawn from the target after A C alone: cumulative .2 .4 .6 .8 .9 1.0, coin .5 -> token 2
    seq, draft = one(0.29, 0.49, 0.5)
    assert seq == (A, C, 2) and draft.eq(0).all()
    # a coin in B's share [.3, .5): A is rejected (its target mass copied into the draft row), B accepted; B has
    # no child, so the bonus is drawn from the target after B (draft row of B untouched): coin .05 -> token 0
    seq, draft = one(0.3, 0.99, 0.05)
    assert seq == (B, 0) and draft[0, A] == ROWS[0, A] and draft[0].count_nonzero() == 1
    # both children rejected: the bonus from the root's law without A and B, relu(target - draft):
    # [.1, 0, 0, .15, .15, .1] (sum .5), coin .6 -> u = .3 -> cumulative .1 .1 .1 .25 .4: first above .3 is 4
    seq, draft = one(0.6, 0.0, 0.6)
    assert seq == (4,) and draft[0, A] == ROWS[0, A] and draft[0, B] == ROWS[0, B]
    # A accepted, C rejected at node A: the bonus from the target after A without C: [.05,.05,.1,0,.2,.1]
    # (sum .5), coin 0 -> the first token with mass, 0
    assert one(0.0, 0.5, 0.0)[0] == (A, 0)
    # the largest coin SGLang draws (1 - 2^-24): the last token with mass
    assert one(0.99, 0.0, 1.0 - 2 ** -24)[0][-1] == 5


def test_the_tree_rule_draws_the_targets_exact_law():
    """Emitted prefixes of up to 2 tokens: a first token outside the tree ends the step (law: root row alone);
    A or B continue with their row's law."""
    n_req = 20000
    gen = torch.Generator().manual_seed(0)
    coins, finals = torch.rand(n_req, 4, generator=gen), torch.rand(n_req, generator=gen)
    seqs = [s[:2] for s in run(coins, finals)[0]]
    law = {}
    for t1 in range(V):
        p1 = float(ROWS[0, t1])
        if t1 in (A, B):
            for t2 in range(V):
                law[(t1, t2)] = p1 * float(ROWS[1 if t1 == A else 2, t2])
        else:
            law[(t1,)] = p1
    stat, p, df = chi_square(seqs, law)
    tv = min_detectable_tv(n_req, df)
    print(f"\ntree rule vs exact law: n={n_req} chi2={stat:.1f} df={df} p={p:.3f} detects TV>={tv:.4f} at 80 %")
    assert p > ALPHA


def test_renormalisations_are_the_native_engines_law():
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(64, 50, generator=gen) * 2
    for top_k, top_p in [(5, 1.0), (0, 0.8), (10, 0.6), (1, 0.9), (50, 0.3)]:
        want = distribution(logits, GenerationOptions(temperature=0.7, top_k=top_k, top_p=top_p))
        probs = torch.softmax(logits / 0.7, -1)
        if top_k:
            probs = ops.top_k_renorm_prob(probs, torch.full((64,), top_k))
        if top_p < 1:
            probs = ops.top_p_renorm_prob(probs, torch.full((64,), top_p))
        torch.testing.assert_close(probs, want)
    ties = ops.top_k_renorm_prob(torch.tensor([[0.4, 0.25, 0.25, 0.1]]), torch.tensor([2]))
    torch.testing.assert_close(ties, torch.tensor([[0.4, 0.25, 0.25, 0.0]]) / 0.9)   # a tie with the k-th stays
    nucleus = ops.top_p_renorm_prob(torch.tensor([[0.4, 0.3, 0.2, 0.1]]), torch.tensor([0.65]))
    torch.testing.assert_close(nucleus, torch.tensor([[4 / 7, 3 / 7, 0.0, 0.0]]))


def test_the_seeded_hash_is_sglangs():
    import triton
    from sglang.kernels.ops.sampling.murmur_hash import murmur_hash32_kernel

    seeds = torch.tensor([0, 1, 7, 2 ** 40 + 3, 123456789], dtype=torch.int64).to(torch.uint64)
    positions = torch.tensor([5, 0, 4096, 17, 2 ** 31 + 9], dtype=torch.int64).to(torch.uint64)
    cols = torch.arange(0, 3000, 7, dtype=torch.int64)
    want = torch.empty((5, cols.numel()), dtype=torch.uint32)
    murmur_hash32_kernel[(5, triton.cdiv(cols.numel(), 1024))](seeds, positions, cols, want, 5, cols.numel(),
                                                                BLOCK_SIZE=1024)
    assert torch.equal(ops.murmur_hash32_cpu(seeds, positions, cols).long(), want.long())
