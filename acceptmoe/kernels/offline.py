"""Offline compilation of a Triton launch for a real NVIDIA target, and what the binary holds.

No GPU is needed: a launch is captured from the wrapper (the `@triton.jit` kernel object is swapped for a
recorder while the wrapper runs, so the arguments, constexprs and launch options are exactly the ones the
wrapper would launch with), bound and specialised by Triton's own JIT binder for the target, compiled with
`triton.compile`, and the cubin is read with the `cuobjdump` that ships in the Triton wheel.

    launch = capture_launch(verifier_module, "_verifier_kernel", lambda: verifier(logits))
    stats = compile_stats(launch, arch=120)       # registers, stack, spill bytes, SASS counts
    binary_spills(compile_launch(launch.with_warps(8), 90).asm["cubin"])   # local memory or STL/LDL in the SASS

Run it in a process where TRITON_INTERPRET is unset: under the interpreter `@triton.jit` builds an
interpreted function that cannot be compiled.
"""
from __future__ import annotations

import os
import re
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import triton

ARCHS = {90: "sm_90 (H100/H200)", 120: "sm_120 (RTX 5090 / RTX PRO 6000)"}
# fp64 SASS: D* arithmetic (DADD, DMUL, DFMA, DSETP, DMNMX, ...), 64-bit MUFU halves and every conversion
# to or from F64.
_FP64_OPS = {"DADD", "DMUL", "DFMA", "DSETP", "DMNMX", "DMMA", "DSET"}
_INSTR = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;")


@dataclass(frozen=True)
class Launch:
    kernel: Any            # the @triton.jit function
    args: tuple
    kwargs: dict           # constexprs and launch options (num_warps, ...)

    def with_warps(self, num_warps: int) -> Launch:
        return Launch(self.kernel, self.args, {**self.kwargs, "num_warps": num_warps})


class _Recorder:
    def __init__(self, kernel):
        self.kernel, self.launches = kernel, []

    def __getitem__(self, grid):
        def record(*args, **kwargs):
            self.launches.append(Launch(self.kernel, args, kwargs))
        return record


def capture_launch(module, name: str, run: Callable[[], Any]) -> Launch:
    """The one launch `run()` makes of `module.<name>`, recorded instead of executed."""
    launches = capture_launches(module, name, run)
    if len(launches) != 1:
        raise RuntimeError(f"expected one launch of {name}, got {len(launches)}")
    return launches[0]


def capture_launches(module, name: str, run: Callable[[], Any]) -> list[Launch]:
    """Every launch `run()` makes of `module.<name>`, in order, recorded instead of executed."""
    kernel = getattr(module, name)
    recorder = _Recorder(kernel)
    setattr(module, name, recorder)
    try:
        try:
            run()
        except Exception:
            if not recorder.launches:
                raise
    finally:
        setattr(module, name, kernel)
    if not recorder.launches:
        raise RuntimeError(f"{name} was not launched")
    return recorder.launches


def compile_launch(launch: Launch, arch: int):
    """triton.compile of the launch for GPUTarget("cuda", arch, 32), specialised as the JIT would."""
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        raise RuntimeError("TRITON_INTERPRET is set: compile for a GPU target in a process without it")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import create_function_from_signature

    kernel = launch.kernel
    target = GPUTarget("cuda", arch, 32)
    backend = make_backend(target)
    binder = create_function_from_signature(kernel.signature, kernel.params, backend)
    bound, specialization, options = binder(*launch.args, **launch.kwargs)
    options, signature, constexprs, attrs = kernel._pack_args(backend, launch.kwargs, bound, specialization, options)
    return triton.compile(ASTSource(kernel, signature, constexprs, attrs), target=target, options=options.__dict__)


def _bin(tool: str) -> str:
    return str(Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / tool)


@dataclass(frozen=True)
class KernelStats:
    registers: int
    stack: int            # bytes of stack (cuobjdump; includes the frames of called subroutines)
    local: int            # bytes of local memory
    spill: int            # bytes of spill stores + loads (ptxas -v on the same PTX)
    local_ops: int        # local-memory instructions (STL, LDL) in the SASS: spills or stack arrays
    sass: int             # SASS instructions
    fp64: int             # fp64 SASS instructions
    shuffles: int         # SHFL instructions (warp reductions)
    shared: int           # bytes of shared memory

    @property
    def spills(self) -> bool:
        return self.spill > 0 or self.local > 0 or self.local_ops > 0


def ptxas_spill_bytes(ptx: str, arch: int) -> int:
    """Spill store + load bytes that ptxas reports for the PTX, run as Triton runs it for the cubin (the
    same ptxas binary and register-allocation flags)."""
    from triton.backends.nvidia.compiler import get_ptxas
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel.ptx"
        path.write_text(ptx)
        found = re.search(r"^\.target\s+(\w+)", ptx, re.M)
        assert found is not None                                  # every PTX module names its .target
        target = found.group(1)
        cmd = [get_ptxas(arch).path, "-lineinfo", "-v", "--regAllocOptLevel=2", f"--gpu-name={target}", str(path),
               "-o", str(Path(tmp) / "k.cubin")]
        log = subprocess.run(cmd, capture_output=True, text=True, check=True).stderr
    return sum(int(n) for n in re.findall(r"(\d+) bytes spill (?:stores|loads)", log))


def cubin_stats(cubin: bytes, spill: int = 0) -> KernelStats:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        usage = subprocess.run([_bin("cuobjdump"), "--dump-resource-usage", str(path)], capture_output=True,
                               text=True, check=True).stdout
        sass = subprocess.run([_bin("cuobjdump"), "-sass", str(path)], capture_output=True, text=True,
                              check=True).stdout
    field = lambda key: int(m.group(1)) if (m := re.search(rf"\b{key}:(\d+)", usage)) else 0
    instrs = [m.group(1) for line in sass.splitlines() if (m := _INSTR.match(line))]
    ops = [op for i in instrs if (op := re.sub(r"^@!?U?P\w+\s+", "", i).split()[0]) != "NOP"]
    is_fp64 = lambda op: op.split(".")[0] in _FP64_OPS or "F64" in op or "64H" in op
    return KernelStats(
        registers=field("REG"), stack=field("STACK"), local=field("LOCAL"), spill=spill, shared=field("SHARED"),
        sass=len(ops), fp64=sum(map(is_fp64, ops)), shuffles=sum(op.startswith("SHFL") for op in ops),
        local_ops=sum(op.split(".")[0] in ("STL", "LDL") for op in ops))


def binary_spills(cubin: bytes) -> bool:
    """Whether a cubin spills: local memory or local-memory instructions (STL/LDL) in its SASS. The test the
    verifier's warps are chosen by (`triton_verifier.choose_warps`), on a GPU's JIT binary and offline alike."""
    stats = cubin_stats(cubin)
    return stats.local > 0 or stats.local_ops > 0


def kernel_stats(kernel, arch: int) -> KernelStats:
    """`cubin_stats` of a compiled kernel, with ptxas's spill bytes on its PTX."""
    return cubin_stats(kernel.asm["cubin"], ptxas_spill_bytes(kernel.asm["ptx"], arch))


def compile_stats(launch: Launch, arch: int) -> KernelStats:
    return kernel_stats(compile_launch(launch, arch), arch)
