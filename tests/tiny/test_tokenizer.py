"""The tiny tokenizer: trains, saves in Hugging Face format, round-trips text, renders the chat template."""
import pytest

from acceptmoe.evals import generators as tasks
from acceptmoe.tiny import tokenizer

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    from transformers import AutoTokenizer

    out = tmp_path_factory.mktemp("tok")
    examples = [e for f in tasks.FAMILIES for e in tasks.generate(f, "train", 300)]
    tokenizer.build(tokenizer.corpus(examples), vocab_size=512, out_dir=out)
    return AutoTokenizer.from_pretrained(str(out))


def test_specials(tok):
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    assert [tok.convert_tokens_to_ids(t) for t in tokenizer.SPECIAL_TOKENS] == [0, 1, 2]
    ids = tok("<|im_start|>user\nhi<|im_end|>", add_special_tokens=False)["input_ids"]
    assert ids[0] == 1 and ids[-1] == 2


@pytest.mark.parametrize("family", tasks.FAMILIES)
def test_round_trip(tok, family):
    for e in tasks.generate(family, "test", 30):
        for text in (e["question"], e["reference"]):
            assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text


def test_digits_are_single_tokens(tok):
    pieces = tok.convert_ids_to_tokens(tok("12345 + 678", add_special_tokens=False)["input_ids"])
    assert [p for p in pieces if p.strip("Ġ").isdigit()] == list("12345678")


def test_chat_template(tok):
    msgs = [{"role": "user", "content": "What is 2 + 2?"}]
    prompt = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    assert prompt == "<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n<|im_start|>assistant\n"
    assert prompt == tokenizer.chat_text("What is 2 + 2?")
    full = tok.apply_chat_template(msgs + [{"role": "assistant", "content": "4"}], tokenize=False)
    assert full == tokenizer.chat_text("What is 2 + 2?", "4")
