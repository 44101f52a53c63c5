"""GSM8K scoring is lm-eval's own: our Grade equals what lm-eval's ConfigurableTask (built from the gsm8k
YAML shipped in lm_eval, with local data) computes for the same replies, on replies chosen to be tricky."""
import json

import pytest
import yaml

from acceptmoe.evals.tasks import gsm8k

# (reply, reference answer)
TRICKY = [
    ("So the total is $1,000.", "She pays 1000 dollars.\n#### 1000"),
    ("The answer is 1,000", "#### 1000"),
    ("#### $1,000.", "#### 1000"),
    ("It costs $18.\n#### 18", "#### 18"),
    ("#### 18.00", "#### 18"),
    ("#### 7 and later #### 8", "#### 7"),
    ("#### 7 and later #### 8", "#### 8"),
    ("#### 42\nThat makes 3 baskets.", "#### 42"),
    ("No number here.", "#### 5"),
    ("", "#### 5"),
    ("The temperature drops to -12 degrees.", "#### -12"),
    ("x = 5.5.", "#### 5.5"),
    ("Answer: 72.\n\n", "Natalia sold 48/2 = 24 clips.\n#### 72"),
    ("####72", "#### 72"),
    ("1.000.000", "#### 1000000"),
    ("#### -0", "#### 0"),
    ("$5", "#### 5"),
    ("5$", "#### 5"),
    ("The ANSWER is 3", "#### 3"),
    ("We get 3, 4, and 5", "#### 5"),
]


@pytest.fixture(scope="module")
def lm_eval_task(tmp_path_factory):
    from importlib import resources

    from lm_eval.api.task import ConfigurableTask

    folder = tmp_path_factory.mktemp("gsm8k")
    data = folder / "test.jsonl"
    data.write_text("".join(json.dumps({"question": f"q{i}", "answer": ref}) + "\n" for i, (_, ref) in enumerate(TRICKY)))
    config = yaml.safe_load(resources.files("lm_eval").joinpath(gsm8k.LM_EVAL_TASK_YAML).read_text())
    config.pop("tag", None)
    config.update(dataset_path="json", dataset_name=None, num_fewshot=0,
                  dataset_kwargs={"data_files": {"test": str(data), "train": str(data)},
                                  "cache_dir": str(folder / "hf-cache")})
    task = ConfigurableTask(config=config)
    task.build_all_requests(limit=None, rank=0, world_size=1)
    for inst in task.instances:
        inst.resps = [TRICKY[inst.doc_id][0]]
    task.apply_filters()
    return {inst.doc_id: inst for inst in task.instances}, task


@pytest.mark.parametrize("i", range(len(TRICKY)))
def test_gsm8k_score_equals_lm_evals_own_pipeline(lm_eval_task, i):
    instances, task = lm_eval_task
    inst = instances[i]
    reply, reference = TRICKY[i]
    assert inst.doc["answer"] == reference
    flexible, strict = inst.filtered_resps[gsm8k.FLEXIBLE], inst.filtered_resps[gsm8k.STRICT]
    score = gsm8k.score({"answer": reference}, reply)
    assert score.extracted == flexible and score.details["strict_extracted"] == strict
    assert score.correct is bool(task.process_results(inst.doc, [flexible])["exact_match"] == 1.0)
    assert score.details["strict_match"] is bool(task.process_results(inst.doc, [strict])["exact_match"] == 1.0)


def test_the_tricky_set_covers_both_outcomes():
    scores = [gsm8k.score({"answer": ref}, reply) for reply, ref in TRICKY]
    assert 0 < sum(s.correct for s in scores) < len(scores)
    assert sum(s.extracted == "[invalid]" for s in scores) >= 2
