"""Which evaluation examples a throughput phase runs (`ThroughputConfig.prompt_set`).

    examples = examples_for(cfg, phase, task, model, run_dir)   # [:cfg.prompts(phase)] timed, [warmup_index] warm-up

- `index` (the paper's protocol, and always for the sweep): evaluation examples 0..n-1 in order, the warm-up
  example at `warmup_index`.
- `longest_reply` (timed phases): the first `candidates` evaluation examples ordered by the length of the
  target's own greedy reply (plain decoding up to `generation.max_new_tokens`, stopping at EOS), longest
  first, ties to the lower index; the phase times the first n of that order and warms up on the one at
  `warmup_index`. A world whose replies are shorter than the timed window otherwise times mostly the
  continuation after EOS. The lengths are measured once per model with the world's engine and saved in the
  run folder (`prompt-set/<model>.json`: per task each candidate's id and reply length, in index order), where
  a resume and the report read them.
"""
from __future__ import annotations

import json
from pathlib import Path

from acceptmoe.engine.backend import GenerationOptions
from acceptmoe.evals.tasks import get_task
from acceptmoe.methods import REFERENCE, Variant

from ..spine.engines import opened
from ..spine.prompts import prompt_ids
from ..spine.runs import write_json
from .config import ThroughputConfig

FOLDER = "prompt-set"


def reply_lengths(cfg: ThroughputConfig, model, run_dir: Path) -> dict[str, list[list]]:
    """task -> [[example id, greedy reply length], ...] over the candidates, measured once per run folder."""
    path = Path(run_dir) / FOLDER / f"{model.name}.json"
    if path.is_file():
        return json.loads(path.read_text())
    out = {}
    with opened(model, cfg.world, run_dir) as loaded:
        plan = loaded.plan(Variant(REFERENCE))
        cap, untraced = cfg.world.max_new_tokens(model), GenerationOptions(trace_layers=False)
        for name in cfg.world.tasks:
            task = get_task(name)
            out[name] = [[ex["id"], len(loaded.engine.generate(prompt_ids(loaded.tokenizer, task.messages(ex),
                                                                          loaded.model), plan, cap, untraced).tokens)]
                         for ex in task.load(cfg.world.eval_split, cfg.prompt_set.candidates)]
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, out)
    return out


def longest_first(lengths: list[list]) -> list[int]:
    """Candidate positions by reply length, longest first, ties to the lower index."""
    return sorted(range(len(lengths)), key=lambda i: (-lengths[i][1], i))


def examples_for(cfg: ThroughputConfig, phase: str, task: str, model=None, run_dir: Path | None = None) -> list[dict]:
    """The phase's examples in the order it runs them, up to and including its warm-up example."""
    need = max(cfg.prompts(phase), cfg.warmup_index(phase) + 1 if phase != "sweep" else 0)
    ordered = phase != "sweep" and cfg.prompt_set.order == "longest_reply"
    examples = get_task(task).load(cfg.world.eval_split, cfg.prompt_set.candidates if ordered else need)
    if len(examples) < need:
        raise ValueError(f"{task} {cfg.world.eval_split} has {len(examples)} examples; phase {phase} needs {need} "
                         f"(prompts and the warm-up example): lower prompts or warmup_index")
    if not ordered:
        return examples
    lengths = reply_lengths(cfg, model, run_dir)[task]
    if [i for i, _ in lengths] != [ex["id"] for ex in examples]:
        raise ValueError(f"{run_dir / FOLDER / (model.name + '.json')} lists other {task} candidates than the "
                         f"world's: it belongs to another configuration")
    return [examples[i] for i in longest_first(lengths)][:need]
