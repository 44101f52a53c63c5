"""Import-only stand-in for SGLang's compiled CPU kernels (`sgl_kernel`) in the CPU test environment.

With SGLANG_USE_CPU_ENGINE=1 several SGLang modules import `*_cpu` ops at import time; no CPU build of them is
on the registry. Plain CPU serving of the tiny model calls none of them; every attribute is a function that
raises when called, so a path that does need one fails loudly instead of computing something else.
"""


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)

    def missing(*args, **kwargs):
        raise NotImplementedError(f"sgl_kernel.{name} is not available in the SGLang CPU test environment")
    missing.__name__ = name
    return missing
