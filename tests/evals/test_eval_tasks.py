"""The task registry, loading, prompts and code-task programs (real and tiny tasks)."""
import re

import pytest

from acceptmoe.evals.tasks import TASK_MODULES, Score, get_task

REAL_COUNTS = {("gsm8k", "test"): 1319, ("gsm8k", "train"): 7473, ("math500", "test"): 500,
               ("humaneval", "test"): 164, ("mbpp", "test"): 500, ("mbpp", "validation"): 90,
               ("mbpp", "train"): 374, ("mbpp", "prompt"): 10}
REAL = ("gsm8k", "math500", "humaneval", "mbpp")
TINY = ("tiny-gsm", "tiny-math", "tiny-humaneval", "tiny-mbpp")



def test_unknown_task_lists_valid_names():
    with pytest.raises(KeyError, match="valid tasks: gsm8k, math500, humaneval, mbpp, tiny-gsm"):
        get_task("gsm8k-cot")


@pytest.mark.parametrize("name, split", sorted(REAL_COUNTS))
def test_dataset_counts(name, split):
    examples = get_task(name).load(split)
    assert len(examples) == REAL_COUNTS[(name, split)]
    assert len({ex["id"] for ex in examples}) == len(examples)


def test_mbpp_test_split_is_ids_11_to_510():
    ids = [ex["task_id"] for ex in get_task("mbpp").load("test")]
    assert ids == list(range(11, 511))
    assert all(ex["entry_point"] for ex in get_task("mbpp").load("test"))


@pytest.mark.parametrize("name", list(TASK_MODULES))
def test_task_contract(name):
    task = get_task(name)
    assert task.name == name and task.version and "test" in task.splits
    examples = task.load("test", limit=3)
    assert len(examples) == 3
    for ex in examples:
        msgs = task.messages(ex)
        assert isinstance(msgs, list) and msgs and all(set(m) == {"role", "content"} for m in msgs)
        assert msgs[-1]["role"] == "user" and msgs[-1]["content"].strip()
    assert task.load("test", limit=0) == []
    with pytest.raises(ValueError, match="has no split 'dev'"):
        task.load("dev")


def test_prompts_carry_the_problem_and_the_answer_format():
    ex = get_task("gsm8k").load(limit=1)[0]
    content = get_task("gsm8k").messages(ex)[0]["content"]
    assert content.startswith(ex["question"]) and "#### <number>" in content
    ex = get_task("math500").load(limit=1)[0]
    assert "\\boxed{}" in get_task("math500").messages(ex)[0]["content"]
    ex = get_task("mbpp").load(limit=1)[0]
    content = get_task("mbpp").messages(ex)[0]["content"]
    assert ex["text"] in content and all(t in content for t in ex["test_list"])
    ex = get_task("humaneval").load(limit=1)[0]
    assert ex["prompt"] in get_task("humaneval").messages(ex)[0]["content"]


def test_humaneval_programs_for_bodies_and_full_functions():
    task = get_task("humaneval")
    ex = task.load(limit=1)[0]
    body = ex["canonical_solution"]
    full = ex["prompt"] + body
    fenced_full = f"Here you go:\n```python\n{full.split('def ', 1)[0]}def {full.split('def ', 1)[1]}```\n"
    without_imports = "```python\n" + re.sub(r"^from typing import List\n", "", full) + "```"
    for response in (body, fenced_full, without_imports):
        assert task.score(ex, response).correct, response
    assert not task.score(ex, "    return not True\n").correct
    assert not task.score(ex, "```python\ndef has_close_elements(numbers, threshold):\n    return False\n```").correct


def test_mbpp_program_runs_setup_after_the_code():
    task = get_task("mbpp")
    ex = next(e for e in task.load("test") if e["task_id"] == 367)  # setup builds inputs with the code's class
    assert ex["test_setup_code"]
    assert task.score(ex, f"```python\n{ex['code']}\n```").correct


def test_score_many_checks_lengths():
    task = get_task("gsm8k")
    with pytest.raises(ValueError, match="2 examples but 1 responses"):
        task.score_many(task.load(limit=2), ["#### 1"])


def test_score_many_reads_the_harmony_final_channel():
    task = get_task("math500")
    ex = task.load(limit=1)[0]

    def harmony(analysis, final):
        return (f"<|channel|>analysis<|message|>{analysis}<|end|><|start|>assistant<|channel|>final"
                f"<|message|>{final}<|return|>")

    right, wrong = f"\\boxed{{{ex['answer']}}}", "\\boxed{0}"
    scores = task.score_many([ex, ex], [harmony(wrong, right), harmony(right, wrong)], response_format="harmony")
    assert [s.correct for s in scores] == [True, False]
    assert all(isinstance(s, Score) for s in scores)


@pytest.mark.parametrize("name", TINY)
def test_tiny_references_pass_and_wrong_replies_fail(name):
    task = get_task(name)
    examples = task.load("test", limit=12)
    assert all(s.correct for s in task.score_many(examples, [ex["reference"] for ex in examples])), name
    wrong = {"tiny-gsm": "#### -1", "tiny-math": "\\boxed{-12345}",
             "tiny-humaneval": "    return None\n", "tiny-mbpp": "def nothing():\n    return None\n"}[name]
    assert not any(s.correct for s in task.score_many(examples, [wrong] * len(examples)))


def test_tiny_prompt_is_the_question_exactly():
    task = get_task("tiny-gsm")
    ex = task.load(limit=1)[0]
    assert task.messages(ex) == [{"role": "user", "content": ex["question"]}]
