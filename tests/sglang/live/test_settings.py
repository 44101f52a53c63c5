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


def test_an_admitting_method_is_refused_by_the_plugin():
    proc = run(ACCEPTMOE_METHOD="standard-sd-survival")
    assert proc.returncode != 0 and "loaded" not in proc.stdout
    assert "token-side admission runs in the native engine only" in proc.stderr


def test_the_backend_refuses_an_admitting_method_before_a_server_starts():
    import pytest

    from acceptmoe.costs.verify import load_profile
    from acceptmoe.errors import UserError
    from acceptmoe.methods import Variant
    from acceptmoe.serving.sglang.engine import SGLangBackend

    from common import ROOT

    backend = SGLangBackend(ROOT / "models" / "tiny" / "target", ROOT / "models" / "tiny" / "draft")
    plan = Variant("acceptmoe-costed").bind(backend.fit, commitment=(1.0,) * 6, cost=load_profile())
    with pytest.raises(UserError, match="token-side admission .* not wired into the SGLang backend"):
        backend.generate([1, 2, 3], plan, 4)
    assert backend.starts == 0


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
