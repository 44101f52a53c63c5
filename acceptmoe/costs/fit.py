"""What a model of the world needs on a machine, from config.json files alone, and the check that a run fits
before it loads anything.

    need = model_need(entry, world, "offloaded", slots=48)      # Need: device, pinned, host_peak, experts (bytes)
    check_fits(need, world.device)      # one UserError naming the number and the fix when the machine lacks it
    check_model_fits(entry, world, "offloaded", 48)             # both, where `engines.load_model` opens a model

- Config files (`model_config(ref)`): a local folder's config.json (absolute, or relative to the repository),
  else the copy a Hugging Face cache holds (no download), else the released copy shipped under
  `configs/models/<hub id>/config.json` (`configs/models/README.md` says where each came from), else None.
- Sizes: the expert store as `engine.memory.store_bytes` sizes it (the rule the stores allocate by), the other
  target weights (`other_params`), the draft (`draft_bytes`, with an embedding of its own), and the target's
  KV cache for the longest generation (`PROMPT_TOKENS` + the model's graded-generation cap + the tree's draft
  tokens). On CUDA those are device bytes and the host holds the pinned arena plus one layer being read; on
  CPU everything is host memory.
- The check (`check_fits`), where an experiment opens a model (`engines.load_model`): device bytes plus
  `RUNTIME_RESERVE` against `torch.cuda.mem_get_info`'s free bytes on CUDA; the host peak (the pinned arena
  included) against /proc/meminfo's MemAvailable.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from acceptmoe.engine.config import DTYPES, ModelConfig, read_json
from acceptmoe.engine.memory import draft_bytes, expert_bytes, kv_bytes, mxfp4_in_config, other_params, store_bytes
from acceptmoe.errors import UserError
from acceptmoe.paths import REPO

SHIPPED = REPO / "configs" / "models"
PROMPT_TOKENS = 1024              # assumed prompt length when sizing the KV cache
RUNTIME_RESERVE = 2 * 10 ** 9     # device bytes for the CUDA context, workspaces and activations (assumed)
GB = 1e9


def model_config(ref: str) -> dict | None:
    """The config.json (as a dict) of a checkpoint reference (folder or hub id), or None when none is at hand."""
    path = Path(ref).expanduser()
    local = path if path.is_absolute() else REPO / path
    if (local / "config.json").is_file():
        return read_json(local / "config.json")
    if ref.count("/") != 1 or ref.startswith("."):
        return None
    try:
        from huggingface_hub import try_to_load_from_cache
        cached = try_to_load_from_cache(ref, "config.json")
    except Exception:  # noqa: BLE001  (no cache, or an unusable one: fall back to the shipped copy)
        cached = None
    if isinstance(cached, str) and Path(cached).is_file():
        return read_json(Path(cached))
    shipped = SHIPPED / ref / "config.json"
    return read_json(shipped) if shipped.is_file() else None


def required_config(ref: str, role: str) -> dict:
    found = model_config(ref)
    if found is None:
        raise UserError(f"no config.json for {role} {ref!r}: not a local folder, not in the Hugging Face cache and "
                        f"not shipped under {SHIPPED.relative_to(REPO)}/: give a local checkpoint folder, or "
                        f"copy its config.json to {SHIPPED.relative_to(REPO)}/{ref}/config.json")
    return found


def num_experts(ref: str) -> int | None:
    """Routed experts per MoE layer of a checkpoint reference, or None when its config.json is not at hand."""
    found = model_config(ref)
    return None if found is None else ModelConfig.from_dict(found).moe.num_experts


@dataclass(frozen=True)
class Need:
    """Bytes one model needs: on the device, page-locked on the host, the host's peak while loading, and every
    expert's stored bytes (what an offloaded store keeps in host memory)."""
    device: int
    pinned: int
    host_peak: int
    experts: int


def model_need(entry, world, store: str, slots: int | None, target: dict | None = None,
               draft: dict | None = None) -> Need:
    """What `entry` (a ModelEntry) needs with this expert store on the world's device; `target` / `draft`: their
    config dicts when already read (else resolved with `required_config`)."""
    target = target if target is not None else required_config(entry.target, "target")
    if draft is None and entry.draft is not None:
        draft = required_config(entry.draft, "draft")
    cfg = ModelConfig.from_dict(target)
    dtype = DTYPES.get(world.dtype, cfg.dtype)
    b = store_bytes(cfg, dtype, store, slots, mxfp4_in_config(target), world.device)
    other = other_params(cfg) * torch.empty((), dtype=dtype).element_size()
    tokens = PROMPT_TOKENS + world.max_new_tokens(entry) + world.tree.num_draft_tokens
    extra = (draft_bytes(draft, dtype) if draft else 0) + kv_bytes(cfg, dtype, tokens)
    on_host = torch.device(world.device).type == "cpu"      # the store's peak already holds experts and `other`
    experts = len(cfg.moe.layer_ids) * cfg.moe.num_experts * expert_bytes(cfg, mxfp4_in_config(target), dtype)
    return Need(b.device + other + extra, b.pinned, b.load_peak + (extra if on_host else 0), experts)


def mem_available() -> int:
    """Host bytes available to a new process (/proc/meminfo MemAvailable)."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise OSError("/proc/meminfo has no MemAvailable line")


def check_fits(need: Need, device: str, what: str = "") -> None:
    """One UserError when this machine lacks what `need` says (device memory on CUDA, host memory always)."""
    dev = torch.device(device)
    if dev.type == "cuda" and torch.cuda.is_available():
        free, total = torch.cuda.mem_get_info(dev)
        if need.device + RUNTIME_RESERVE > free:
            raise UserError(f"{what}needs {need.device / GB:.1f} GB on {device} plus {RUNTIME_RESERVE / GB:.0f} GB "
                            f"for the runtime, {free / GB:.1f} GB of {total / GB:.1f} GB are free: use a larger GPU, "
                            f"an offloaded phase with fewer slots, or free the device "
                            f"(`./reproduce.sh plan` shows every model's need)")
    available = mem_available()
    if need.host_peak > available:
        pinned = f" ({need.pinned / GB:.1f} GB of it page-locked)" if need.pinned else ""
        raise UserError(f"{what}needs {need.host_peak / GB:.1f} GB of host memory while loading{pinned}, "
                        f"{available / GB:.1f} GB are available (MemAvailable): use a machine with more RAM, "
                        f"or free host memory (`./reproduce.sh plan` shows every model's need)")


def check_model_fits(entry, world, store: str, slots: int | None) -> None:
    """`check_fits` for `entry` when its config files are at hand (a local folder, a cache or the shipped copies);
    a model whose config.json is nowhere here is not checked (its download comes first)."""
    target = model_config(entry.target)
    draft = model_config(entry.draft) if entry.draft is not None else {}
    if target is not None and draft is not None:
        need = model_need(entry, world, store, slots, target, draft)
        check_fits(need, world.device, f"{entry.name} ({store} store) ")
