"""Import-only stand-in for torchvision in a CPU SGLang environment.

SGLang and transformers import torchvision modules at import time (multimodal processors); the registry's
torchvision does not load beside the CPU torch wheel, and the text-only models tested never use it. Every
`torchvision.*` module imports; every name in it is a placeholder that can be looked up (for module-level
defaults and tables) but raises when called, so a path that really needs torchvision fails loudly.
"""
import importlib.abc
import importlib.machinery
import sys
import types

__version__ = "0.0.0+stub"


class _Missing:
    def __init__(self, name):
        self._name, self._attrs = name, {}

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return self._attrs.setdefault(attr, _Missing(f"{self._name}.{attr}"))

    def __call__(self, *args, **kwargs):
        raise NotImplementedError(f"{self._name}: torchvision is a stand-in in this CPU SGLang environment (acceptmoe.serving.sglang.cpu)")

    def __repr__(self):
        return f"<torchvision stand-in {self._name}>"


class _StubModule(types.ModuleType):
    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        value = _Missing(f"{self.__name__}.{attr}")
        setattr(self, attr, value)
        return value


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith(__name__ + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _StubModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


sys.meta_path.insert(0, _Finder())


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return importlib.import_module(f"{__name__}.{name}") if name in ("io", "transforms", "ops", "models") \
        else _Missing(f"torchvision.{name}")
