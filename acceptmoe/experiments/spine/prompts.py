"""Checkpoints, tokenizers, prompts and decoding for the runners.

- `resolve_checkpoint(ref)`: a folder (absolute, or relative to the repository) or a hub id, downloaded
  into the Hugging Face cache on first use.
- `prompt_ids(tokenizer, messages)`: the tokenizer's own chat template with the generation prompt opened,
  rendered to text and encoded without extra special tokens (the template already holds them).
- `decode(tokenizer, tokens, response_format)`: "plain" drops special tokens (EOS included); "harmony"
  keeps them, because GPT-OSS's channel markers are special tokens and grading reads the final channel.
"""
from __future__ import annotations

import contextlib
import datetime
import hashlib
import threading
from pathlib import Path
from typing import Sequence

from .runs import REPO

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


def load_tokenizer(target: Path):
    """The target's tokenizer (it must carry a chat template)."""
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(str(target))
    if not getattr(tok, "chat_template", None):
        raise ValueError(f"the tokenizer in {target} has no chat template: the runners prompt chat models "
                         f"through their own template; save one with the tokenizer")
    return tok


def prompt_ids(tokenizer, messages: list[dict], model=None) -> list[int]:
    """The prompt of `messages` for `model` (a ModelSpec: its chat_template_kwargs, and its template_date for
    templates that stamp today's date, e.g. GPT-OSS's, so a prompt never changes from day to day)."""
    kwargs = dict(getattr(model, "chat_template_kwargs", None) or {})
    with template_date(getattr(model, "template_date", None)):
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, **kwargs)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if not ids:
        raise ValueError(f"the chat template rendered an empty prompt for {messages!r}")
    return list(ids)


_DATE_LOCK = threading.Lock()


@contextlib.contextmanager
def template_date(date: str | None):
    """While rendering, transformers' `strftime_now` template global (it calls `datetime.now()` of
    `transformers.utils.chat_template_utils`) returns `date` (YYYY-MM-DD); None leaves the clock alone."""
    if date is None:
        yield
        return
    from transformers.utils import chat_template_utils as ctu
    fixed = datetime.datetime.fromisoformat(date)

    class FixedClock(datetime.datetime):
        @classmethod
        def now(cls, tz=None):
            return fixed
    with _DATE_LOCK:
        saved, ctu.datetime = ctu.datetime, FixedClock
        try:
            yield
        finally:
            ctu.datetime = saved


def prompt_hash(ids: Sequence[int]) -> str:
    """sha256 of the prompt's token ids (rows keep it, so a changed prompt is visible)."""
    return hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest()[:16]


def decode(tokenizer, tokens: Sequence[int], response_format: str) -> str:
    return tokenizer.decode(list(tokens), skip_special_tokens=response_format != "harmony")
