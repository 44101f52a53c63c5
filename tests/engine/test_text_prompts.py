"""`Engine.generate` takes text, chat messages (the model's own template) or token ids in any of the shapes
users hold them (a list, a [1, T] tensor, the mapping transformers' `apply_chat_template(tokenize=True)`
returns), the same tokens for the same prompt; a prompt and budget past the target's positions is refused."""
from pathlib import Path

import pytest
import torch

from acceptmoe.engine import TreeShape, load_engine
from acceptmoe.errors import UserError
from acceptmoe.methods import Variant

TINY = Path(__file__).resolve().parents[2] / "models" / "tiny"


@pytest.fixture(scope="module")
def engine():
    eng = load_engine(TINY, tree=TreeShape(3, 4, 12))
    yield eng
    eng.close()


def test_text_messages_and_ids_give_the_same_generation(engine):
    plan = Variant("vanilla-ar").bind(engine.fit)
    messages = [{"role": "user", "content": "Ivan has 7 balloons. Leo has 12 more. How many in total?"}]
    tok = engine.tokenizer
    rendered = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    ids = tok(rendered, add_special_tokens=False)["input_ids"]
    chat = engine.generate(messages, plan, 8)
    assert chat.text == tok.decode(chat.tokens, skip_special_tokens=True) and chat.text
    same = [engine.generate(p, plan, 8).tokens for p in (
        ids, torch.tensor([ids]), tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                          return_dict=True))]
    assert all(t == chat.tokens for t in same)
    assert engine.generate(ids, plan, 8).text is None          # ids in, ids out
    text = "Ivan has 7 balloons."                              # raw text: the tokenizer's own encoding
    assert engine.generate(text, plan, 8).tokens == engine.generate(tok(text)["input_ids"], plan, 8).tokens


def test_a_prompt_past_the_targets_positions_is_refused(engine):
    plan = Variant("vanilla-ar").bind(engine.fit)
    limit = engine.model.config.max_position_embeddings
    with pytest.raises(UserError, match=f"pass the target's max_position_embeddings={limit}"):
        engine.generate([5] * (limit - 3), plan, 8)
    with pytest.raises(UserError, match="needs 'input_ids'"):
        engine.generate({"ids": [1, 2]}, plan, 8)
