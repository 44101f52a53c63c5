"""AcceptMoE inside SGLang: a plugin (hooks on SGLang's verify passes) and an `EngineBackend` over `sglang.Engine`.

    pip install sglang==0.5.23 && pip install --no-deps -e .   # a CUDA machine; registers the plugin entry point
    ACCEPTMOE_METHOD=acceptmoe ACCEPTMOE_COMMITMENT=p_hat.json python -m sglang.launch_server ...
    acceptmoe table1 --engine sglang            # runners through `open_engine`

Modules: `config` (settings from the environment or a file read again between generations, parsed into a
`Variant`; when a server must restart), `tree` (SGLang's linked-list trees -> parent lists), `runtime` (the
per-process work inside the forward: selection through `acceptmoe.kernels.make_verifier`, trace fields through
`acceptmoe.engine.trace.layer_stats`), `plugin` (the entry point and its hooks), `memory` (a server's pools sized
from the run), `engine` (`open_engine`, imported on first use: it needs SGLang and CUDA).
This package imports SGLang only inside `plugin.load`, the hooks and `engine`; it may import the project's
engine, kernels, methods and errors, never the experiments.
"""


def __getattr__(name):
    if name == "open_engine":           # imported on use: fails with one message where SGLang or CUDA is missing
        from .engine import open_engine
        return open_engine
    raise AttributeError(name)
