"""The lm-eval model backend on the tiny world: lm-eval's own command line, a local GSM8K-style task (offline
json data, lm-eval's regex filter and exact_match), Standard SD equal to Vanilla AR, AcceptMoE with a p_hat."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from acceptmoe.errors import UserError

ROOT = Path(__file__).parents[2]
TASK = """task: tiny_gsm_local
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: generate_until
doc_to_text: "{{{{question}}}}"
doc_to_target: "{{{{answer}}}}"
generation_kwargs: {{until: [], do_sample: false, max_gen_toks: 96}}
filter_list:
  - name: strict-match
    filter:
      - {{function: regex, regex_pattern: "#### (\\\\-?[0-9\\\\.\\\\,]+)"}}
      - {{function: take_first}}
metric_list:
  - {{metric: exact_match, aggregation: mean, higher_is_better: true, ignore_case: true, ignore_punctuation: false,
     regexes_to_ignore: [",", "\\\\$", "(?s).*#### ", "\\\\.$"]}}
"""


@pytest.fixture(scope="module")
def task_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("lm_eval_task")
    rows = (ROOT / "models/tiny/data/tiny-gsm-test.jsonl").read_text().splitlines()[:3]
    (folder / "gsm.jsonl").write_text("\n".join(rows) + "\n")
    (folder / "tiny_gsm.yaml").write_text(TASK.format(data=folder / "gsm.jsonl"))
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    return folder


def run(task_dir: Path, out: Path, model_args: str) -> dict:
    from acceptmoe.experiments import lm_eval as lm_eval_model
    assert lm_eval_model.main(["--model", "acceptmoe", "--model_args", model_args, "--tasks", "tiny_gsm_local",
                               "--include_path", str(task_dir), "--apply_chat_template", "--device", "cpu",
                               "--output_path", str(out), "--log_samples"]) == 0
    (result,) = out.rglob("results_*.json")
    samples = [json.loads(line) for f in out.rglob("samples_*.jsonl") for line in f.read_text().splitlines()]
    return {"metrics": json.loads(result.read_text())["results"]["tiny_gsm_local"],
            "replies": [s["resps"][0][0] for s in sorted(samples, key=lambda s: s["doc_id"])],
            "summary": lm_eval_model.INSTANCES[-1].summary()}


def test_lm_eval_runs_every_method_kind_on_the_tiny_world(task_dir, tmp_path):
    ar = run(task_dir, tmp_path / "ar", "method=vanilla-ar")
    sd = run(task_dir, tmp_path / "sd", "method=standard-sd")
    am = run(task_dir, tmp_path / "am", "method=acceptmoe,p_hat=1.0;0.8;0.64;0.5;0.4;0.3")
    assert sd["replies"] == ar["replies"] and len(ar["replies"]) == 3            # lossless
    assert sd["metrics"]["exact_match,strict-match"] == ar["metrics"]["exact_match,strict-match"] >= 2 / 3
    assert all("####" in r for r in ar["replies"])
    assert sd["summary"]["tau"] > 1.5 and sd["summary"]["mean_set_size"] == 128.0
    assert am["summary"]["tau"] > 1.5 and 8 <= am["summary"]["mean_set_size"] < 128


def test_bad_model_args_are_clear_errors():
    from acceptmoe.experiments.lm_eval import AcceptMoELM
    with pytest.raises(UserError, match="needs commitment probabilities.*commitment=<table.json>"):
        AcceptMoELM(method="acceptmoe")
    with pytest.raises(UserError, match="a budget applies to fixed-budget methods only"):
        AcceptMoELM(method="standard-sd", budget=8)
    with pytest.raises(UserError, match="needs an offloaded expert store"):
        AcceptMoELM(method="acceptmoe", p_hat="1;0.8;0.6;0.5;0.4;0.3", prune="true")
    with pytest.raises(UserError, match="unknown model_args"):
        AcceptMoELM(method="standard-sd", colour="red")
    with pytest.raises(UserError, match="no CUDA GPU"):
        AcceptMoELM(method="standard-sd", device="cuda")
    lm = AcceptMoELM(method="standard-sd")
    with pytest.raises(UserError, match="generative tasks only"):
        lm.loglikelihood([])


def test_long_prompts_are_left_truncated_as_lm_evals_hf_backend_truncates_them():
    """The context is the target's (512 positions, resolved as lm-eval's HF backend resolves it) minus the
    request's max_gen_toks; a longer prompt keeps its last tokens, and the summary says so."""
    from lm_eval.api.instance import Instance

    from acceptmoe.experiments.lm_eval import AcceptMoELM, truncation_note
    lm = AcceptMoELM(method="vanilla-ar")
    assert lm.max_length == 512
    long = " ".join(f"question {i}: what is {i} plus {i}?" for i in range(200))  # well over 512 tokens
    ids = lm.tokenizer(long, add_special_tokens=False)["input_ids"]
    assert len(ids) > 1000
    request = Instance("generate_until", {}, (long, {"until": [], "do_sample": False, "max_gen_toks": 12}), 0)
    short = Instance("generate_until", {}, ("What is 2 plus 3?", {"until": [], "do_sample": False, "max_gen_toks": 12}), 1)
    replies = lm.generate_until([request, short])
    kept = ids[-(512 - 12):]
    expected = lm.tokenizer.decode(lm.engine.generate(kept, lm.plan, 12).tokens, skip_special_tokens=True)
    assert replies[0] == expected
    summary = lm.summary()
    assert summary["truncated"] == 1 and summary["truncated_to"] == [500] and summary["generations"] == 2
    assert "1 of 2 prompts were left-truncated to their last 500 tokens (context 512 tokens" in truncation_note(summary)
    with pytest.raises(UserError, match="leaves no room for a prompt"):
        lm.generate_until([Instance("generate_until", {}, ("x", {"until": [], "max_gen_toks": 600}), 2)])
    assert AcceptMoELM(method="vanilla-ar", max_length=64).prompt_ids(long, 16) == ids[-48:]
