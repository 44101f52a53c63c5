"""SGLang's own EAGLE-3 loop on a CPU without sgl-kernel's CPU build (SGLang 0.5.23, no installed file edited).

SGLang runs speculative decoding on a CPU through its `intel_amx` attention backend (tree-masked
TARGET_VERIFY, the multi-step draft backend) and eleven `sgl_kernel` CPU ops; no wheel ships those ops, and
SGLang replaces `intel_amx` by `torch_native` (no tree mask, refused by the draft backend factory) on a CPU
without AMX. This package supplies the ops as torch code (`ops`) behind an importable `sgl_kernel`
stand-in, and asks for `intel_amx` through the split prefill/decode backend settings, which that swap leaves
alone. SGLang's scheduler, `EAGLEWorkerV2`, tree building, verify pass and acceptance then run as they are.

Of the two ways that reach this loop from outside, this one depends on the least of SGLang's private detail:
no hook, only the sgl-kernel CPU op contracts (a kernel library's public ABI, the same calls a CPU build of
sgl-kernel serves on an AMX Xeon) and two public server settings. The other way (an attention backend
registered through `attention_registry`) also needs a hook on the draft backend factory's private
`_create_backend` and a subclass of the torch backend's internals.

    from acceptmoe.serving.sglang import cpu
    cpu.prepare_process()                        # before importing sglang: stand-ins on the path, CPU engine on
    sglang.Engine(..., **cpu.SERVER_ARGS, speculative_algorithm="EAGLE3", ...)

At temperature > 0, `sampling` (installed by the plugin in SGLang's processes) lets SGLang's verify take its
sampling branch, which SGLang keeps to CUDA, with torch versions of the three ops that branch calls.

`prepare_process` refuses, with one line naming the version and the missing piece, any SGLang other than the
one these contracts were read from; `check_verify_backend` (called by the plugin on the first CPU verify
pass) refuses a verify pass that would run without the tree mask.
"""
from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from acceptmoe.errors import UserError

SGLANG_VERSION = "0.5.23"
HERE = Path(__file__).resolve().parent
STAND_INS = {"sgl_kernel": HERE / "sgl_kernel_path", "torchvision": HERE / "torchvision_path"}
# the tree-masked CPU attention backend, for both halves (the combined `attention_backend` setting is swapped for
# torch_native on a CPU without AMX); no CUDA graphs on a CPU
SERVER_ARGS = dict(device="cpu", prefill_attention_backend="intel_amx", decode_attention_backend="intel_amx",
                   disable_cuda_graph=True)
TREE_MASKED = ("IntelAMXAttnBackend",)


class SGLangCPUError(UserError, RuntimeError):
    """This SGLang cannot run the CPU EAGLE path the stand-ins were written for."""


def _importable(name: str) -> bool:
    if name in sys.modules:
        return True
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _torchvision_loads() -> bool:
    """The registry's torchvision fails to load beside the CPU torch wheel: only a loading one is kept."""
    if not _importable("torchvision"):
        return False
    import subprocess
    probe = subprocess.run([sys.executable, "-c", "import torchvision.ops"], capture_output=True)
    return probe.returncode == 0


def prepare_process(env: dict | None = None) -> list[str]:
    """Put the stand-ins a CPU run needs on this process's path and on the path of the processes SGLang spawns,
    and select SGLang's CPU engine; returns the stand-ins added. Call before importing sglang."""
    env = os.environ if env is None else env
    added = []
    for name, folder in STAND_INS.items():
        present = _torchvision_loads() if name == "torchvision" else _importable(name)
        if present and str(folder) not in sys.path:
            continue
        if str(folder) not in sys.path:
            sys.path.insert(0, str(folder))
        parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        if str(folder) not in parts:
            env["PYTHONPATH"] = os.pathsep.join([str(folder)] + parts)
        added.append(name)
    env["SGLANG_USE_CPU_ENGINE"] = "1"       # without it --device cpu falls into a vllm import
    check_version()
    return added


def thread_binding(ranks: int) -> str:
    """SGLANG_CPU_OMP_THREADS_BIND for `ranks` CPU ranks (tp * dp): this process's cores split into contiguous
    groups, one per rank (SGLang otherwise allows only one rank per NUMA node)."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < ranks:
        raise SGLangCPUError(f"tp * dp = {ranks} CPU ranks need at least {ranks} cores; this process has "
                             f"{len(cores)}: lower serving.tp / serving.dp")
    size = len(cores) // ranks
    groups = [cores[i * size:(i + 1) * size] for i in range(ranks)]
    return "|".join(",".join(str(c) for c in g) if g[-1] - g[0] + 1 != len(g) else f"{g[0]}-{g[-1]}"
                    for g in groups)


def check_version() -> None:
    try:
        from importlib.metadata import version
        found = version("sglang")
    except Exception:  # noqa: BLE001 - not installed
        raise SGLangCPUError(f"the CPU SGLang path needs sglang=={SGLANG_VERSION}; it is not installed "
                             f"(scripts/sglang-env.sh builds that environment)") from None
    if found != SGLANG_VERSION:
        raise SGLangCPUError(f"SGLang {found}: the CPU EAGLE-3 path was written against SGLang {SGLANG_VERSION}'s "
                             f"sgl_kernel CPU op contracts and intel_amx backend; install sglang=={SGLANG_VERSION} "
                             f"or check acceptmoe/serving/sglang/cpu/ops.py against this version")


def check_verify_backend(runner) -> None:
    """A CPU TARGET_VERIFY pass must run the tree-masked backend; any other would verify a tree causally."""
    backend = getattr(runner, "attn_backend", None)
    names = {type(backend).__name__}
    for part in ("prefill_backend", "decode_backend", "verify_backend"):
        if getattr(backend, part, None) is not None:
            names.add(type(getattr(backend, part)).__name__)
    if not names & set(TREE_MASKED):
        import sglang
        raise SGLangCPUError(f"SGLang {sglang.__version__}: a CPU verify pass runs attention backend "
                             f"{sorted(names)}, which applies no tree mask; serve with "
                             f"prefill_attention_backend=decode_attention_backend=intel_amx (acceptmoe.serving."
                             f"sglang.cpu.SERVER_ARGS)")
