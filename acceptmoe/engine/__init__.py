"""The engine: target model and expert store, EAGLE-3 drafter and draft trees, the verify/accept loop, traces.

    from acceptmoe.engine import load_engine, TreeShape
    engine = load_engine("models/tiny")                     # target/ and draft/ inside
    gen = engine.generate(prompt_ids, method="acceptmoe", commitment=table, tree=TreeShape(5, 10, 64))
"""
from .eagle3 import DraftMismatchError, Eagle3Draft, Eagle3Drafter
from .engine import Engine, Generation, load_engine
from .trace import Trace, commitment_table, load_traces, save_traces
from .tree import DraftTree, TreeShape

__all__ = [
    "DraftMismatchError", "DraftTree", "Eagle3Draft", "Eagle3Drafter", "Engine", "Generation", "Trace",
    "TreeShape", "commitment_table", "load_engine", "load_traces", "save_traces",
]
