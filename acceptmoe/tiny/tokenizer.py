"""The tiny world's tokenizer: a byte-level BPE trained with `tokenizers` on the tiny training corpus.

Digits are split one per token (as in Qwen's tokenizers), which keeps arithmetic learnable. Special tokens
are ChatML's: `<|endoftext|>` (pad), `<|im_start|>`, `<|im_end|>` (eos). The chat template renders
user/assistant (and system) turns and, with `add_generation_prompt`, opens the assistant turn. The result
is saved as a `PreTrainedTokenizerFast` folder that `AutoTokenizer.from_pretrained` loads.
"""
from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

PAD, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = (PAD, IM_START, IM_END)

CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def chat_text(question: str, reply: str | None = None) -> str:
    """The chat template rendered in plain Python (used to build the BPE training corpus)."""
    text = f"{IM_START}user\n{question}{IM_END}\n{IM_START}assistant\n"
    return text if reply is None else text + f"{reply}{IM_END}\n"


def train_bpe(texts: Iterable[str], vocab_size: int) -> Tokenizer:
    """A byte-level BPE over `texts` with individual digits and the ChatML special tokens (ids 0, 1, 2)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def wrap(tok: Tokenizer):
    """The `tokenizers` object as a transformers fast tokenizer with ChatML specials and chat template."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=IM_END, pad_token=PAD,
                                   additional_special_tokens=[IM_START], chat_template=CHAT_TEMPLATE,
                                   clean_up_tokenization_spaces=False, model_max_length=1024)


def build(texts: Iterable[str], vocab_size: int, out_dir: str | Path):
    """Train, wrap and save to `out_dir`; returns the transformers tokenizer."""
    hf = wrap(train_bpe(texts, vocab_size))
    hf.save_pretrained(str(out_dir))
    return hf


def corpus(examples: Iterable[dict]) -> Iterable[str]:
    """Chat-formatted training texts (question and reference reply) of the given examples."""
    for ex in examples:
        yield chat_text(ex["question"], ex["reference"])
