"""Sampling: the target's next-token distribution under a request's options, one draw per row, and the tree
acceptance rule that keeps speculative decoding exact in distribution (docs/method.md, "Sampling").

    >>> import torch
    >>> from acceptmoe.engine.backend import GenerationOptions
    >>> opts = GenerationOptions(temperature=0.7, top_k=3, top_p=0.9, seed=1)
    >>> probs = distribution(torch.tensor([[2.0, 1.0, 0.0, -9.0]]), opts)
    >>> [round(x, 3) for x in probs[0].tolist()]      # the last token is past top_k, the third past top_p
    [0.807, 0.193, 0.0, 0.0]

The contract:

- `distribution(logits, options)` is the one place temperature, top-k and top-p are applied, in that order
  (vLLM's, SGLang's and lm-eval's): logits / temperature; tokens below the top_k-th largest value removed
  (ties with it kept); then, over what is left, the smallest set of most likely tokens whose mass reaches
  top_p (a token is removed when the tokens ranked above it already hold top_p; the most likely one always
  stays). Vanilla AR's draws, the tree rule's per-node draws and hence its bonus tokens all read it.
- `next_tokens(logits, options, generator)`: one token per row. Greedy (temperature 0) is `argmax(-1)`,
  exactly what the engine did before sampling existed; otherwise one multinomial draw per row from
  `distribution`, with the request's own `torch.Generator` (`generator(options, device)`), eagerly, after the
  pass that produced the logits (never inside a captured CUDA graph), so a seed reproduces a run.
- `accept(tree, logits, options, generator)`: the accepted path and bonus token of one verified draft tree.
  EAGLE-2's tree is the draft's top-k expansion, so each child is a deterministic proposal: its draft
  distribution is a point mass on its token (q(x) = 1), the rule EAGLE-2 (`evaluate_posterior`, q = 1) and
  SGLang (`tree_speculative_sampling_target_only` with threshold_single = threshold_acc = 1) implement. At
  each node, with p the node's `distribution`, the children are tried in draft order: child x is accepted with
  probability min(1, p(x) / q(x)) = p(x); on rejection p <- norm(max(0, p - q)), which is p with x removed and
  renormalised; when every child is rejected the bonus is drawn from that residual, and after a leaf from p.
  Child x_i is therefore output with probability p(x_i) and every other token z with probability p(z): the
  law of one draw y ~ p. We implement it as that draw: y ~ p at every node, then the greedy walk
  (`DraftTree.accept`) with y in place of the argmax (the path follows the child whose token is y; y after the
  path's last node is the bonus). The draft's own probabilities are not used: a top-k pick is not a sample
  from them, and min(1, p/q_draft) with them would not preserve p.
"""
from __future__ import annotations

import torch
from torch import Tensor

from acceptmoe.errors import UserError

from .backend import GenerationOptions
from .tree import DraftTree


def distribution(logits: Tensor, options: GenerationOptions) -> Tensor:
    """fp32 probabilities [..., V] of the next token under options' temperature (> 0), top_k and top_p."""
    if options.greedy:
        raise ValueError("temperature 0 decodes greedily: there is no distribution to draw from")
    x = logits.float() / options.temperature
    if 0 < options.top_k < x.shape[-1]:
        kth = x.topk(options.top_k, dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    if options.top_p < 1:
        ranked, order = x.sort(dim=-1, descending=True, stable=True)
        p = ranked.softmax(-1)
        before = p.cumsum(-1) - p                                   # the mass ranked above each token
        drop = before >= options.top_p
        drop[..., 0] = False
        x = x.scatter(-1, order, ranked.masked_fill(drop, float("-inf")))
    return x.softmax(-1)


def generator(options: GenerationOptions, device: torch.device) -> torch.Generator | None:
    """The request's own random generator on `device` (None when greedy): seeded with options.seed, or with
    fresh entropy when it is None."""
    if options.greedy:
        return None
    gen = torch.Generator(device=device)
    if options.seed is None:
        gen.seed()
    else:
        gen.manual_seed(options.seed)
    return gen


def next_tokens(logits: Tensor, options: GenerationOptions, gen: torch.Generator | None) -> Tensor:
    """One next token per row of logits [T, V] -> long [T]: the argmax when greedy, else a draw from
    `distribution` with the request's generator."""
    if options.greedy:
        return logits.argmax(-1)
    if gen is None:
        raise ValueError("sampling needs the request's generator (sampling.generator)")
    return torch.multinomial(distribution(logits, options), 1, generator=gen).squeeze(-1)


def accept(tree: DraftTree, logits: Tensor, options: GenerationOptions,
           gen: torch.Generator | None) -> tuple[list[int], int]:
    """The accepted path (node indices, root first) and the bonus token of a verified tree; logits [T, V] are
    the target's after each node. Greedy: the longest path of argmax tokens; sampling: the tree rejection rule
    above, exact in distribution."""
    return tree.accept(next_tokens(logits, options, gen))


def exact_law(model, prompt: list[int], options: GenerationOptions, length: int) -> dict[tuple[int, ...], float]:
    """Vanilla AR's exact law of the first `length` tokens after `prompt`: the product of the target's
    conditionals under `options` (`distribution`), each from one full forward pass of `model` (an engine's
    `MoEModel`) over prompt and prefix. What the exactness checks test samples against."""
    law: dict[tuple[int, ...], float] = {(): 1.0}
    device = model.device
    for _ in range(length):
        nxt: dict[tuple[int, ...], float] = {}
        for prefix, weight in law.items():
            ids = torch.tensor(prompt + list(prefix), device=device)
            logits, _ = model.forward(ids, torch.arange(len(ids), device=device), model.new_cache(len(ids)), 0)
            p = distribution(logits[-1:], options)[0].double().cpu()
            for t in torch.nonzero(p).flatten().tolist():
                nxt[prefix + (t,)] = weight * float(p[t])
        law = nxt
    return law


def divergence(restricted: Tensor, natural: Tensor, options: GenerationOptions) -> tuple[Tensor, Tensor]:
    """Per row of two logits [n, V] (a restricted verify pass's and natural routing's at the same positions):
    KL(restricted || natural) in nats and the total variation, both between their `distribution`s under
    `options`. KL is inf where the restricted law puts mass on a token the natural one cut (top-k / top-p)."""
    p = distribution(restricted, options).double()
    q = distribution(natural, options).double()
    terms = torch.where(p > 0, p * (p.log() - q.log()), torch.zeros_like(p))
    return terms.sum(-1), 0.5 * (p - q).abs().sum(-1)


def check_divergence(plan, options: GenerationOptions, store: str, batched: bool) -> None:
    """`options.record_divergence` is asked of one sampled generation of a restricting method on a resident
    store (an extra pass would move an offloaded store's residency, which its pruning reads)."""
    why = ("it compares a restricting method's verify pass with natural routing's" if not plan.spec.restricts
           or not plan.spec.speculates else "it compares sampled distributions (temperature > 0)"
           if options.greedy else "an extra pass would move the offloaded store's residency" if store != "resident"
           else "generate_batch does not record it" if batched else None)
    if why is not None:
        raise UserError(f"record_divergence: {why}; record it with a restricting method, temperature > 0, a resident "
                        f"store and generate / generate_many")

