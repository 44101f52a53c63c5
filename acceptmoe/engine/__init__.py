"""The engine: target model and expert store, EAGLE-3 drafter and draft trees, the verify/accept loop, traces.

    from acceptmoe.engine import load_engine, TreeShape
    from acceptmoe.methods import Variant
    engine = load_engine("models/tiny", tree=TreeShape(5, 10, 64))       # target/ and draft/ inside
    gen = engine.generate(prompt_ids, Variant("acceptmoe").bind(commitment=table.p_hat), max_new_tokens=96)

The engine knows nothing of tokenization, tasks or run folders: it maps token ids and a `Variant` to a
`Generation` (the `EngineBackend` contract that experiments call).
"""
from .backend import EngineBackend
from .eagle3 import DraftMismatchError, Eagle3Draft, Eagle3Drafter
from .engine import Engine, Generation, load_engine
from .trace import Trace, commitment_table, load_traces, save_traces
from .tree import DraftTree, TreeShape

__all__ = [
    "DraftMismatchError", "DraftTree", "Eagle3Draft", "Eagle3Drafter", "Engine", "EngineBackend", "Generation",
    "Trace", "TreeShape", "commitment_table", "load_engine", "load_traces", "save_traces",
]
