"""`./reproduce.sh cross-engine`: the same prompts through the native engine and SGLang, method by method.

Per method it reports how often the two engines verified the same tree (step by step, while their histories
agree), how often their tokens agree (required equal for the lossless methods), whether each restricting
method's sets inside SGLang equal the native selection recomputed on SGLang's own trees and router logits
(required equal, every layer and request of every recorded verify pass), whether the trees the plugin
recovered are the trees SGLang's attention masked, and tau in each engine. It exits 1 on a required
disagreement. It runs on a CPU with the tiny world (SGLang's CPU path, `acceptmoe.serving.sglang.cpu`) and is
the first thing to run on a GPU with the paper's models.

    compare   pure comparisons of the two engines' generations and SGLang's recorded passes
    commands  the command: prompts, the methods in calibration order, the report
"""
