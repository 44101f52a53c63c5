"""SGLang's data parallelism through the engine settings (`serving.dp`), on a CPU: two schedulers share the
requests in flight; greedy tokens equal one scheduler's, and the plugin's records (appended by both
schedulers to one file) come back once per request and verify step."""
import pytest

from acceptmoe.engine.backend import GenerationOptions
from acceptmoe.engine.tree import TreeShape
from acceptmoe.methods import Variant

from common import ROOT, task_prompts

NEW = 8


@pytest.fixture(scope="module")
def open_engine():
    from acceptmoe.serving.sglang.engine import open_engine
    return open_engine


def generate(open_engine, prompts, dp):
    backend = open_engine(ROOT / "models" / "tiny" / "target", ROOT / "models" / "tiny" / "draft", device="cpu",
                          dtype="float32", tree=TreeShape(5, 10, 64), dp=dp, skip_tokenizer_init=True,
                          max_running_requests=8, max_total_tokens=4096, log_level="error")
    try:
        plan = Variant("standard-sd").bind(backend.fit)
        return backend.generate_many(prompts, plan, NEW, GenerationOptions(ignore_eos=True)), backend.describe()
    finally:
        backend.close()


def test_dp2_serves_like_dp1_and_records_each_step_once(open_engine):
    prompts = task_prompts(4)
    one, _ = generate(open_engine, prompts, dp=1)
    two, described = generate(open_engine, prompts, dp=2)
    assert described["server_args"].get("dp_size") == "2"
    assert [g.tokens for g in two] == [g.tokens for g in one]
    for a, b in zip(one, two, strict=True):
        assert [(x.parents, x.path) for x in b.trace.blocks] == [(x.parents, x.path) for x in a.trace.blocks]
        assert sum(b.accept_lengths) == NEW - 1
