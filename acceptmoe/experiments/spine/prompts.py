"""Checkpoints, tokenizers, prompts and decoding for the runners.

- `resolve_checkpoint(ref)`: a folder (absolute, or relative to the repository) or a hub id, downloaded
  into the Hugging Face cache on first use.
- `load_tokenizer`, `prompt_ids`, `template_date`, `decode`: the engine's (`acceptmoe.engine.text`), one
  rule for the runners and `Engine.generate`.
"""
from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

from acceptmoe.engine.text import decode, load_tokenizer, prompt_ids, template_date

from .runs import REPO

__all__ = ["decode", "load_tokenizer", "prompt_ids", "prompt_hash", "resolve_checkpoint", "template_date"]

HUB_PATTERNS = ("*.json", "*.safetensors", "pytorch_model*.bin", "*.model", "*.txt", "*.jinja", "tokenizer*")
HUB_IGNORED = ("original/*", "metal/*")         # gpt-oss-120b's duplicate checkpoints in other layouts


def resolve_checkpoint(ref: str) -> Path:
    """The local folder of a checkpoint reference (folder path or hub id)."""
    path = Path(ref).expanduser()
    local = path if path.is_absolute() else REPO / path
    if local.is_dir():
        return local
    if path.is_absolute() or ref.startswith(".") or ref.count("/") != 1:
        raise FileNotFoundError(f"checkpoint folder {local} not found (for the tiny preset: run "
                                f"./reproduce.sh train-tiny, or point the preset's model at a checkpoint)")
    from huggingface_hub import snapshot_download
    try:
        return Path(snapshot_download(repo_id=ref, allow_patterns=list(HUB_PATTERNS),
                                      ignore_patterns=list(HUB_IGNORED)))
    except Exception as exc:  # noqa: BLE001  (re-raised with the reference and the fix)
        raise FileNotFoundError(f"{ref!r} is neither a folder under {REPO} nor a downloadable hub model "
                                f"({type(exc).__name__}: {exc}); download it first or give a local folder") from exc


def prompt_hash(ids: Sequence[int]) -> str:
    """sha256 of the prompt's token ids (rows keep it, so a changed prompt is visible)."""
    return hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest()[:16]


