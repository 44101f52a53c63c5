"""Text in and out of the engine: the target's tokenizer, chat prompts through the model's own template, and
decoding (docs/architecture.md, "The engine contract"). `Engine.generate` takes text, chat messages or ids
through `encode`; the experiments' runners build their prompts with the same `prompt_ids`.

- `prompt_ids(tokenizer, messages)`: the tokenizer's own chat template with the generation prompt opened,
  rendered to text and encoded without extra special tokens (the template already holds them).
- `decode(tokenizer, tokens, response_format)`: "plain" drops special tokens (EOS included); "harmony"
  keeps them, because GPT-OSS's channel markers are special tokens and grading reads the final channel.
"""
from __future__ import annotations

import contextlib
import datetime
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

from acceptmoe.errors import UserError


def load_tokenizer(target: Path, chat: bool = True):
    """The target's tokenizer (with `chat`, it must carry a chat template)."""
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(str(target))
    if chat and not getattr(tok, "chat_template", None):
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


def is_text(prompt) -> bool:
    """Whether a prompt is text or chat messages (which need the tokenizer), not token ids."""
    return isinstance(prompt, str) or (isinstance(prompt, Sequence) and len(prompt) > 0
                                       and isinstance(prompt[0], Mapping))


def as_ids(prompt):
    """Token ids as given: a sequence, a tensor ([T] or [1, T]), or the mapping a tokenizer (or transformers'
    `apply_chat_template(..., tokenize=True)`) returns, whose "input_ids" it takes."""
    if isinstance(prompt, Mapping):
        if "input_ids" not in prompt:
            raise UserError(f"a prompt mapping needs 'input_ids' (as a tokenizer returns), got keys {sorted(prompt)}")
        return prompt["input_ids"]
    return prompt


def encode(tokenizer, prompt) -> list[int]:
    """Text (tokenized as the tokenizer does by default) or chat messages (a list of {"role", "content"}: the
    model's chat template, `prompt_ids`) as token ids."""
    if isinstance(prompt, str):
        return list(tokenizer(prompt)["input_ids"])
    if not getattr(tokenizer, "chat_template", None):
        raise UserError("chat messages need the model's chat template, and this tokenizer has none: pass text "
                        "or token ids, or save a chat template with the tokenizer")
    return prompt_ids(tokenizer, list(prompt))


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
        saved, ctu.datetime = ctu.datetime, FixedClock  # type: ignore[misc]  # the template module's clock
        try:
            yield
        finally:
            ctu.datetime = saved  # type: ignore[misc]


def decode(tokenizer, tokens: Sequence[int], response_format: str) -> str:
    return tokenizer.decode(list(tokens), skip_special_tokens=response_format != "harmony")
