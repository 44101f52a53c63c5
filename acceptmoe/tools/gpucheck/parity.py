"""gpu-check's parity check: our logits against transformers' on small random checkpoints of every model family
(`engine.families`), fp32 and bf16; the checkpoints are `acceptmoe.testing`'s (the tests' fixtures too)."""
from __future__ import annotations

from pathlib import Path

import torch

from acceptmoe.testing import SMALL, random_checkpoint

from .base import verdict


def check_parity(device, folder: Path, tokens: int = 24, load=None) -> dict:
    """Our logits vs transformers' on the same random checkpoints: relative max error (to max |logit|)
    <= 1e-4 in fp32 and <= 0.1 in bf16 (both sides in that dtype), plus top-1 agreement. load(path, device,
    dtype) -> our model (default `MoEModel.from_pretrained`)."""
    from acceptmoe.engine.model import MoEModel
    load = load or (lambda path, device, dtype: MoEModel.from_pretrained(path, device=device, dtype=dtype))
    device, rows, ok = torch.device(device), [], True
    for kind in SMALL:
        hf = random_checkpoint(kind, Path(folder) / kind)
        ids = torch.randint(0, 96, (tokens,), generator=torch.Generator().manual_seed(1))
        for dtype, tol in ((torch.float32, 1e-4), (torch.bfloat16, 0.1)):
            ours = load(Path(folder) / kind, device, dtype)
            logits, _ = ours.forward(ids.to(device), torch.arange(tokens, device=device),
                                     ours.new_cache(tokens), 0)
            with torch.no_grad():
                ref = hf.to(device=device, dtype=dtype)(ids[None].to(device)).logits[0].float()
            rel = float((logits - ref).abs().max() / ref.abs().max())
            top1 = float((logits.argmax(-1) == ref.argmax(-1)).float().mean())
            rows.append({"model": kind, "dtype": str(dtype)[6:], "rel_max_err": rel, "top1_agree": top1,
                         "tolerance": tol})
            ok &= rel <= tol
    return {"check": "parity", "verdict": verdict(ok), "rows": rows}
