"""A bad plugin setting stops SGLang's plugin loader (which logs and skips plugins that raise an Exception):
a server must never run unrestricted when a method was asked for."""
import os
import subprocess
import sys

LOAD = "from sglang.srt.plugins import load_plugins; load_plugins(); print('loaded')"


def run(**env):
    full = {k: v for k, v in os.environ.items() if not k.startswith("ACCEPTMOE_")}
    return subprocess.run([sys.executable, "-c", LOAD], env={**full, **env}, capture_output=True, text=True,
                          timeout=600)


def test_bad_setting_stops_the_process_with_one_message():
    proc = run(ACCEPTMOE_METHOD="count-b")
    assert proc.returncode != 0 and "loaded" not in proc.stdout
    assert "error: acceptmoe plugin: method count-b needs a budget" in proc.stderr


def test_an_admitting_method_without_a_cost_profile_stops_the_plugin_and_loads_with_one():
    proc = run(ACCEPTMOE_METHOD="standard-sd-survival")
    assert proc.returncode != 0 and "loaded" not in proc.stdout
    assert "admits draft nodes under a verify-cost model: set ACCEPTMOE_COST" in proc.stderr
    from acceptmoe.costs.verify import DEFAULT_PROFILE
    proc = run(ACCEPTMOE_METHOD="standard-sd-survival", ACCEPTMOE_COST=str(DEFAULT_PROFILE))
    assert proc.returncode == 0 and "loaded" in proc.stdout, proc.stderr


def test_the_backend_serves_an_admitting_method_and_records_its_admitted_subtrees():
    """The backend passes the plan's verify-cost profile to the plugin; the steps it returns hold the admitted
    subtrees (fewer nodes than the tree's 64 when the rule cuts), never a node outside its parent's reach."""
    from acceptmoe.costs.verify import load_profile
    from acceptmoe.engine.backend import GenerationOptions
    from acceptmoe.engine.tree import TreeShape
    from acceptmoe.methods import Variant
    from acceptmoe.serving.sglang.engine import open_engine

    from common import ROOT

    backend = open_engine(ROOT / "models" / "tiny" / "target", ROOT / "models" / "tiny" / "draft", device="cpu",
                          dtype="float32", tree=TreeShape(5, 10, 64), skip_tokenizer_init=True,
                          max_running_requests=2, max_total_tokens=2048, log_level="error")
    try:
        plan = Variant("standard-sd-survival").bind(backend.fit, cost=load_profile())
        gen = backend.generate([1, 2, 3, 4], plan, 8, GenerationOptions(ignore_eos=True, trace_layers=True))
    finally:
        backend.close()
    blocks = gen.trace.blocks
    assert blocks and any(len(b.parents) < 64 for b in blocks)
    for b in blocks:
        assert b.parents[0] == -1 and all(0 <= p < i for i, p in enumerate(b.parents) if i)
        assert b.path[0] == 0 and all(b.parents[c] == p for p, c in zip(b.path, b.path[1:], strict=False))


def test_good_settings_load():
    proc = run(ACCEPTMOE_METHOD="count-b", ACCEPTMOE_BUDGET="16")
    assert proc.returncode == 0 and "loaded" in proc.stdout, proc.stderr


def test_sglang_is_served_in_the_native_engines_dtype():
    """`serving/sglang/check.py` and the runners open SGLang with the native engine's dtype (fp32 for the tiny
    checkpoint), never SGLang's `auto` (fp16 for an fp32 checkpoint): like is compared with like."""
    import torch

    from acceptmoe.engine.engine import load_engine
    from acceptmoe.serving.sglang.engine import SGLangBackend

    from common import ROOT

    native = load_engine(ROOT / "models" / "tiny", device="cpu")
    backend = SGLangBackend(ROOT / "models" / "tiny" / "target", ROOT / "models" / "tiny" / "draft",
                            dtype=native.model.dtype)
    assert native.model.dtype == torch.float32 and backend.describe()["dtype"] == "float32"
    assert backend.fit == native.fit
