"""GSM8K (test 1319, train 7473): grade-school word problems, scored by lm-evaluation-harness itself.

The filters and the metric are lm-eval's own objects (lm-eval 0.4.13), configured from the `gsm8k`
task YAML that ships inside the lm_eval package (`lm_eval/tasks/gsm8k/gsm8k.yaml`), nothing copied:
- flexible-extract (the reported score): the YAML's regex filter (last match of a number-like string,
  first non-empty group, stripped; "[invalid]" when nothing matches) and take_first;
- strict-match (also recorded): the number after the first `#### `;
- exact_match: lm-eval's registered `exact_match` metric with the YAML's arguments (regexes to ignore,
  ignore_case), the reference being the full dataset answer (the YAML's `doc_to_target`).
Prompt (our choice): zero-shot chat, the question followed by an instruction to end with `#### <number>`.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import yaml

from acceptmoe.errors import UserError
from acceptmoe.evals.data import read_records, take
from acceptmoe.evals.tasks import Grade, Task, check_split, user_message

NAME = "gsm8k"
VERSION = "1"
SPLITS = ("test", "train")
LM_EVAL_VERSION = "0.4.13"
LM_EVAL_TASK_YAML = "tasks/gsm8k/gsm8k.yaml"
FLEXIBLE, STRICT = "flexible-extract", "strict-match"
INSTRUCTION = ("Solve the problem step by step. At the end, write the final answer as a number on its own "
               "line in the form '#### <number>'.")


class LmEvalMissing(UserError):
    """lm-eval is not installed (or another version is)."""


@dataclass(frozen=True)
class LmEvalScorer:
    """lm-eval's gsm8k filter ensembles (by name) and its exact_match metric with the YAML's arguments."""

    instance: type
    filters: dict
    metric: object
    metric_kwargs: dict


@lru_cache(maxsize=1)
def lm_eval_scorer() -> LmEvalScorer:
    try:
        import lm_eval
        from lm_eval.api.instance import Instance
        from lm_eval.api.registry import get_metric
        from lm_eval.filters import build_filter_ensemble
    except ImportError as exc:
        raise LmEvalMissing(f"GSM8K scoring needs lm-eval=={LM_EVAL_VERSION} ({exc}); install the project's "
                            "`eval` extra (`pip install -e .[eval]`, as ./reproduce.sh does)") from None
    if lm_eval.__version__ != LM_EVAL_VERSION:
        raise LmEvalMissing(f"GSM8K scoring is pinned to lm-eval=={LM_EVAL_VERSION}, found {lm_eval.__version__}; "
                            f"run `pip install lm-eval=={LM_EVAL_VERSION}`")
    config = yaml.safe_load(resources.files("lm_eval").joinpath(LM_EVAL_TASK_YAML).read_text())
    filters = {entry["name"]: build_filter_ensemble(
        entry["name"], [(step["function"], {k: v for k, v in step.items() if k != "function"})
                        for step in entry["filter"]]) for entry in config["filter_list"]}
    (metric_cfg,) = [m for m in config["metric_list"] if m["metric"] == "exact_match"]
    kwargs = {k: v for k, v in metric_cfg.items() if k not in ("metric", "aggregation", "higher_is_better", "hf_evaluate")}
    return LmEvalScorer(Instance, filters, get_metric("exact_match"), kwargs)


def load(split: str = "test", limit: int | None = None) -> list[dict]:
    check_split(NAME, split, SPLITS)
    records = read_records(f"gsm8k-{split}")
    return take([{"id": f"gsm8k-{split}-{i}", **r} for i, r in enumerate(records)], limit)


def messages(example: dict) -> list[dict]:
    return user_message(f"{example['question']}\n\n{INSTRUCTION}")


def apply_filter(name: str, response: str) -> str:
    """lm-eval's filter ensemble `name` on one response, run as lm-eval runs it (FilterEnsemble.apply on
    an Instance)."""
    scorer = lm_eval_scorer()
    inst = scorer.instance(request_type="generate_until", doc={}, arguments=("", {}), idx=0)
    inst.resps = [response]
    scorer.filters[name].apply([inst])
    return inst.filtered_resps[name]


def flexible_extract(response: str) -> str:
    """lm-eval's flexible-extract filter: the last number-like string, or "[invalid]"."""
    return apply_filter(FLEXIBLE, response)


def strict_extract(response: str) -> str:
    """lm-eval's strict-match filter: the number after the first `#### `, or "[invalid]"."""
    return apply_filter(STRICT, response)


def exact_match(prediction: str, reference: str) -> bool:
    """lm-eval's exact_match metric with the gsm8k YAML's arguments, as ConfigurableTask.process_results
    calls it."""
    scorer = lm_eval_scorer()
    return float(scorer.metric(references=[reference], predictions=[prediction], **scorer.metric_kwargs)["exact_match"]) == 1.0


def extract(example: dict, response: str) -> str:
    return flexible_extract(response)


def score_against(reference: str, response: str) -> Grade:
    """Grade a response against a reference answer (full GSM8K solution or a bare number)."""
    flexible, strict = flexible_extract(response), strict_extract(response)
    return Grade(correct=exact_match(flexible, reference), extracted=flexible,
                 details={"strict_extracted": strict, "strict_match": exact_match(strict, reference),
                          "target": reference.rsplit("#### ", 1)[-1].strip()})


def score(example: dict, response: str) -> Grade:
    return score_against(example["answer"], response)


TASK = Task.of_module(__name__)
