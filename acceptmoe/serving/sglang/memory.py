"""What an SGLang engine's memory pools hold, sized from the run instead of from the machine.

Left alone, SGLang sizes its KV pools from the memory free when it starts (`mem_fraction_static` of the GPU, or
of the host's RAM on a CPU): a server for a 7M-parameter model takes most of a 24 GB host, and on a GPU the
next engine in the same process finds nothing left. Here the pools are sized from what the run sends:

    pools = size_pools(target, draft, tree, "bfloat16", requests=16, request_tokens=4096)
    pools.server_args("cuda", free_bytes=torch.cuda.mem_get_info()[0], cap=0.9)
    # -> max_running_requests, max_total_tokens and, on a GPU, mem_fraction_static

- `requests`: requests in flight at most (a graded batch; 1 for timed batch-1 generations);
- each holds its prompt and generation (`request_tokens`) plus what one speculative step adds: the draft's
  candidates (num_steps x topk) and the verified tree (num_draft_tokens);
- on a GPU SGLang 0.5.23 keeps `mem_fraction_static` of the memory free at its start for weights and KV pools
  (`kv_cache_configurator._profile_available_bytes`): the fraction is what the target and draft weights and these
  pools need, with `HEADROOM` for SGLang's other static buffers, at most `cap`. Past the cap SGLang holds fewer
  tokens than asked and serves fewer requests at once (it says so in its log); the result is unchanged.

Nothing here imports SGLang; the numbers come from the checkpoints' config.json and file sizes.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from acceptmoe.engine.config import ModelConfig

MEMORY_CAP = 0.9       # on a GPU: the most of the device memory free at the start a server keeps (`cap`)

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
HEADROOM = (1.05, 1 << 30)          # need x 1.05 + 1 GiB: SGLang's request tables, sampling and graph buffers


@dataclass(frozen=True)
class Pools:
    """One engine's pools, per tensor-parallel rank."""
    requests: int                   # requests in flight at most (max_running_requests)
    tokens_per_request: int         # prompt + generation + one speculative step's tokens
    kv_bytes_per_token: int         # target and draft K and V of one token
    weight_bytes: int               # target and draft checkpoint bytes

    @property
    def max_total_tokens(self) -> int:
        return self.requests * self.tokens_per_request

    @property
    def need_bytes(self) -> int:
        """Weights and KV pools, with SGLang's other static buffers (`HEADROOM`)."""
        scale, extra = HEADROOM
        return int((self.weight_bytes + self.kv_bytes_per_token * self.max_total_tokens) * scale) + extra

    def fraction(self, free_bytes: int, cap: float) -> float:
        """mem_fraction_static: what the pools need of the device memory free at the start, at most `cap`."""
        return min(cap, -(-1000 * self.need_bytes // max(1, free_bytes)) / 1000)

    def server_args(self, device: str, free_bytes: int | None = None, cap: float = MEMORY_CAP) -> dict:
        """SGLang's settings for these pools; on a GPU `free_bytes` is the device memory free before the start."""
        args = {"max_running_requests": self.requests, "max_total_tokens": self.max_total_tokens}
        if str(device).startswith("cuda"):
            args["mem_fraction_static"] = self.fraction(free_bytes, cap)
        return args

    def describe(self) -> dict:
        return {**asdict(self), "max_total_tokens": self.max_total_tokens, "need_bytes": self.need_bytes}


def kv_bytes(heads: int, head_dim: int, layers: int, tp: int, dtype: str) -> int:
    """K and V of one token over `layers` attention layers on one of `tp` ranks (heads split, at least one)."""
    return 2 * max(1, heads // tp) * head_dim * layers * DTYPE_BYTES[dtype]


def checkpoint_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in Path(folder).glob("*.safetensors"))


def size_pools(target: Path, draft: Path, tree, dtype: str, requests: int, request_tokens: int,
               tp: int = 1) -> Pools:
    """The pools of a server for `target` with its EAGLE-3 `draft` (tree: `TreeShape`), `requests` in flight of
    up to `request_tokens` tokens each, in `dtype` (the KV cache's too), on `tp` ranks."""
    model = ModelConfig.from_folder(target)
    head = json.loads((Path(draft) / "config.json").read_text())
    draft_heads = head.get("num_key_value_heads") or head["num_attention_heads"]
    draft_dim = head.get("head_dim") or head["hidden_size"] // head["num_attention_heads"]
    per_token = (kv_bytes(model.attn.num_kv_heads, model.attn.head_dim, model.num_layers, tp, dtype)
                 + kv_bytes(draft_heads, draft_dim, head.get("num_hidden_layers", 1), tp, dtype))
    step = tree.num_steps * tree.topk + tree.num_draft_tokens
    return Pools(requests=int(requests), tokens_per_request=int(request_tokens) + step, kv_bytes_per_token=per_token,
                 weight_bytes=(checkpoint_bytes(target) + checkpoint_bytes(draft)) // tp)
