"""The lm-eval model backend on the tiny world, offline: lm-eval's own command line on the repository's task
YAML (integrations/lm_eval/tasks/acceptmoe_tiny_gsm.yaml: lm-eval's gsm8k config on the shipped tiny data), Standard SD equal
to Vanilla AR, AcceptMoE with the p_hat table `calibrate` wrote for the reference Table 1 run; each run under a
folder named by model and method, its results JSON carrying the plan and per-task tau and set size."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from acceptmoe.errors import UserError

ROOT = Path(__file__).parents[2]
CALIBRATED = next((ROOT / "results/reference/table1").glob("*/calibration/tiny/tiny-gsm-train.json"))


def run(out: Path, model_args: str) -> dict:
    from acceptmoe.integrations.lm_eval import backend as lm_eval_model
    assert lm_eval_model.main(["--model", "acceptmoe", "--model_args", model_args, "--tasks", "acceptmoe_tiny_gsm",
                               "--limit", "3", "--apply_chat_template", "--device", "cpu",
                               "--output_path", str(out), "--log_samples"]) == 0
    (result,) = out.rglob("results_*.json")
    samples = [json.loads(line) for f in out.rglob("samples_*.jsonl") for line in f.read_text().splitlines()]
    samples = [s for s in samples if s["filter"] == "strict-match"]     # one row per filter of the task
    results = json.loads(result.read_text())
    return {"metrics": results["results"]["acceptmoe_tiny_gsm"], "folder": result.parent.name,
            "acceptmoe": results["acceptmoe"],
            "replies": [s["resps"][0][0] for s in sorted(samples, key=lambda s: s["doc_id"])]}


def test_lm_eval_runs_every_method_kind_offline_on_the_tiny_world(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    ar = run(tmp_path / "ar", "method=vanilla-ar")
    sd = run(tmp_path / "sd", "method=standard-sd")
    am = run(tmp_path / "am", f"method=acceptmoe,commitment={CALIBRATED}")
    assert sd["replies"] == ar["replies"] and len(ar["replies"]) == 3            # lossless
    assert sd["metrics"]["exact_match,strict-match"] == ar["metrics"]["exact_match,strict-match"] >= 2 / 3
    assert all("####" in r for r in ar["replies"])
    assert (ar["folder"], sd["folder"], am["folder"]) == ("target__vanilla-ar", "target__standard-sd",
                                                          "target__acceptmoe")
    sd_task, am_task = sd["acceptmoe"]["tasks"]["acceptmoe_tiny_gsm"], am["acceptmoe"]["tasks"]["acceptmoe_tiny_gsm"]
    assert sd_task["generations"] == am_task["generations"] == 3
    assert sd_task["tau"] > 1.5 and sd_task["mean_set_size"] == 128.0
    assert am_task["tau"] > 1.5 and 8 <= am_task["mean_set_size"] < 128
    assert am["acceptmoe"]["plan"]["variant"] == "acceptmoe" and len(am["acceptmoe"]["plan"]["selector"]["p_hat"]) == 6


def test_offline_task_names_become_their_yamls_and_runs_get_a_label():
    from acceptmoe.integrations.lm_eval.backend import TASKS_DIR, prepare_argv
    argv = prepare_argv(["--model", "acceptmoe", "--model_args", "method=acceptmoe-b,budget=24",
                         "--tasks=acceptmoe_gsm8k,hellaswag", "--limit", "2"])
    assert argv == ["--model", "acceptmoe", "--model_args", "method=acceptmoe-b,budget=24",
                    "model=target__acceptmoe-b@24", "--tasks", f"{TASKS_DIR / 'acceptmoe_gsm8k.yaml'},hellaswag",
                    "--limit", "2"]
    assert "model=mine" in prepare_argv(["--model", "acceptmoe", "-a", "model=mine", "-t", "x"])


def test_bad_model_args_are_clear_errors():
    from acceptmoe.integrations.lm_eval.backend import AcceptMoELM
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

    from acceptmoe.integrations.lm_eval.backend import AcceptMoELM, truncation_note
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


def test_sampling_gen_kwargs_through_lm_evals_command_line(tmp_path, monkeypatch):
    """`--gen_kwargs do_sample=true,temperature=...` reaches the engine as GenerationOptions: a seed reproduces
    the replies, another seed draws others, and the results JSON records the settings."""
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from acceptmoe.integrations.lm_eval import backend as lm_eval_model

    def sampled(out: Path, seed: int) -> tuple[list[str], dict]:
        assert lm_eval_model.main(["--model", "acceptmoe", "--model_args", f"method=standard-sd,seed={seed}",
                                   "--tasks", "acceptmoe_tiny_gsm", "--limit", "3", "--apply_chat_template",
                                   "--gen_kwargs", "do_sample=true,temperature=1.5,top_p=0.98", "--device", "cpu",
                                   "--output_path", str(out), "--log_samples"]) == 0
        (result,) = out.rglob("results_*.json")
        rows = [json.loads(line) for f in out.rglob("samples_*.jsonl") for line in f.read_text().splitlines()]
        rows = sorted((r for r in rows if r["filter"] == "strict-match"), key=lambda r: r["doc_id"])
        return [r["resps"][0][0] for r in rows], json.loads(result.read_text())["acceptmoe"]

    first, meta = sampled(tmp_path / "a", 1)
    again, _ = sampled(tmp_path / "b", 1)
    other, _ = sampled(tmp_path / "c", 2)
    assert first == again and first != other and len(first) == 3
    assert meta["sampling"] == [{"temperature": 1.5, "top_k": 0, "top_p": 0.98, "seed": 1}]


def test_request_options_follow_lm_evals_normalised_kwargs():
    from lm_eval.api.instance import Instance
    from lm_eval.models.utils import normalize_gen_kwargs

    from acceptmoe.engine import GenerationOptions
    from acceptmoe.integrations.lm_eval.backend import AcceptMoELM
    lm = AcceptMoELM(method="vanilla-ar", seed=5)

    def options(kwargs: dict, doc: int = 0) -> GenerationOptions:
        req = Instance("generate_until", {}, ("q", kwargs), doc, metadata=("t", doc, 1))
        return lm.options(req, normalize_gen_kwargs(kwargs, 8))

    assert options({"do_sample": False, "temperature": 0.7}).greedy                   # lm-eval: greedy wins
    assert options({"temperature": 0.0}).greedy and options({}).greedy
    a = options({"do_sample": True, "temperature": 0.6, "top_p": 0.9, "top_k": 20})
    assert (a.temperature, a.top_p, a.top_k) == (0.6, 0.9, 20)
    repeat = options({"temperature": 0.6})                      # do_sample absent: temperature > 0 samples
    assert not repeat.greedy and repeat.seed != a.seed          # the same request again: its next stream
    assert options({"temperature": 0.6}, doc=1).seed not in (a.seed, repeat.seed)
    with pytest.raises(UserError, match="top_p must be in"):
        options({"do_sample": True, "temperature": 0.6, "top_p": 0})
