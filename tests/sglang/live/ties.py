"""The one rule the live tests compare SGLang's routing ids by (Eq. 2's ids, up to SGLang's own ties)."""
import torch


def same_routing(z, eligible, got, want) -> bool:
    """SGLang's ids equal Eq. 2's, or differ only where SGLang's own ranking key ties: its CPU top-k ranks the
    masked softmax probabilities, and two logits a rounding apart can share one fp32 probability (the project's
    rule ranks the logits themselves). Either way every id lies inside the set."""
    if not bool(eligible[got].all()):
        return False
    if torch.equal(got, want):
        return True
    probs = torch.softmax(z.float().masked_fill(~eligible, float("-inf")), -1)                   # [n, E]
    return torch.equal(probs.gather(-1, got), probs.gather(-1, want))
