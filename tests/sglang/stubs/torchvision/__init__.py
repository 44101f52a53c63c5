"""Import-only stand-in for torchvision in the CPU SGLang test environment.

SGLang imports torchvision unconditionally (`srt/multimodal/internvl_utils.py`); the registry's torchvision
does not load beside the CPU torch wheel, and the text-only models tested never call it. Any use fails loudly.
"""


def __getattr__(name):
    raise ImportError(f"torchvision.{name}: torchvision is a stand-in in the SGLang CPU test environment")
