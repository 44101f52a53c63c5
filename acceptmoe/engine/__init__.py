"""The engine: target model and expert store, EAGLE-3 drafter and draft trees, the verify/accept loop, traces.

    >>> from acceptmoe.engine import GenerationOptions, TreeShape, load_engine
    >>> from acceptmoe.methods import Variant
    >>> engine = load_engine("models/tiny", tree=TreeShape(3, 4, 12))     # target/ and draft/ inside
    >>> plan = Variant("acceptmoe").bind(engine.fit, commitment=(1.0, 0.8, 0.6, 0.4))
    >>> gen = engine.generate([1, 17, 42, 99], plan, 8, GenerationOptions(ignore_eos=True))
    >>> len(gen.tokens), sum(gen.accept_lengths) == len(gen.tokens) - 1   # the prefill yields tokens[0]
    (8, True)

The engine knows nothing of tokenization, tasks or run folders: it maps token ids and a `Plan` (a `Variant`
bound to its `fit`) to a `Generation` (the `EngineBackend` contract that experiments call).
"""
from .backend import Capabilities, EngineBackend, GenerationOptions
from .eagle3 import DraftMismatchError, Eagle3Draft, Eagle3Drafter
from .engine import Engine, Generation, load_engine
from .trace import Trace, commitment_table, load_traces, save_traces
from .tree import DraftTree, TreeShape

__all__ = [
    "Capabilities", "DraftMismatchError", "DraftTree", "Eagle3Draft", "Eagle3Drafter", "Engine", "EngineBackend",
    "Generation", "GenerationOptions",
    "Trace", "TreeShape", "commitment_table", "load_engine", "load_traces", "save_traces",
]
