"""`sgl_kernel` for a CPU without sgl-kernel's CPU build: acceptmoe's torch versions of the ops SGLang's EAGLE
path calls (`acceptmoe.serving.sglang.cpu.ops`); every other name imports but raises when called.

This folder is put on the path only when no real `sgl_kernel` is importable (`acceptmoe.serving.sglang.cpu`).
SGLang modules bind `from sgl_kernel import <op>` at import time; a name this stand-in does not implement fails
loudly when a path calls it, never computes something else.
"""
from acceptmoe.serving.sglang.cpu import ops as _ops

_ops.register()
globals().update({name: getattr(_ops, name) for name in _ops.OPS})
__version__ = "0.0.0+acceptmoe.cpu"


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)

    def missing(*args, **kwargs):
        raise NotImplementedError(f"sgl_kernel.{name}: not among the CPU ops acceptmoe supplies "
                                  f"({', '.join(_ops.OPS)}); this SGLang path needs sgl-kernel's CPU build")
    missing.__name__ = name
    return missing
