"""The task registry, loading, prompts and code-task programs (real and tiny tasks)."""
import re

import pytest

from acceptmoe.evals.rules import CodeRules
from acceptmoe.evals.tasks import TASKS, Grade, get_task

REAL_COUNTS = {("gsm8k", "test"): 1319, ("gsm8k", "train"): 7473, ("math500", "test"): 500,
               ("humaneval", "test"): 164, ("mbpp", "test"): 378, ("mbpp", "validation"): 90 - 39,
               ("mbpp", "train"): 374 - 108, ("mbpp", "prompt"): 10 - 7}  # MBPP+ problems leave the other splits
REAL = ("gsm8k", "math500", "humaneval", "mbpp")
TINY = ("tiny-gsm", "tiny-math", "tiny-humaneval", "tiny-mbpp")



def test_unknown_task_lists_valid_names():
    with pytest.raises(KeyError, match="unknown task 'gsm8k-cot' \\(did you mean 'gsm8k'\\?\\); valid: gsm8k, math500, humaneval, mbpp, tiny-gsm"):
        get_task("gsm8k-cot")


@pytest.mark.parametrize("name, split", sorted(REAL_COUNTS))
def test_dataset_counts(name, split):
    examples = get_task(name).load(split)
    assert len(examples) == REAL_COUNTS[(name, split)]
    assert len({ex["id"] for ex in examples}) == len(examples)


def test_mbpp_test_split_is_mbpp_plus_and_no_other_split_shares_a_problem():
    test = get_task("mbpp").load("test")
    assert test[0]["id"] == "Mbpp/2" and test[-1]["id"] == "Mbpp/809"
    assert all(ex["entry_point"] and ex["text"] and len(ex["test_list"]) == 1 for ex in test)
    test_ids = {int(ex["id"].split("/")[1]) for ex in test}
    for split in ("validation", "train", "prompt"):
        ids = {ex["task_id"] for ex in get_task("mbpp").load(split)}
        assert ids and not ids & test_ids, split


@pytest.mark.parametrize("name", TASKS.names())
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


def test_humaneval_code_for_bodies_and_full_functions():
    task = get_task("humaneval")
    ex = task.load(limit=1)[0]
    body = ex["canonical_solution"]
    full = ex["prompt"] + body
    fenced_full = f"Here you go:\n```python\n{full}```\n"
    without_imports = "```python\n" + re.sub(r"^from typing import List\n", "", full) + "```"
    responses = [body, fenced_full, without_imports, "    return not True\n",
                 "```python\ndef has_close_elements(numbers, threshold):\n    return False\n```"]
    # EvalPlus's readings: a whole function or a chat reply alone, sanitised (a function without the prompt's
    # imports fails, as it does in EvalPlus); a bare body after the prompt, as EvalPlus reads a base model's
    # completion (prompt + completion)
    scores = task.score_many([ex] * len(responses), responses)
    assert [s.correct for s in scores] == [True, True, False, False, False]
    assert [s.details["plus"] for s in scores] == [True, True, False, False, False]
    assert "NameError" in scores[2].details["base_reason"]
    assert scores[0].extracted.startswith("from typing import List") and body.strip() in scores[0].extracted
    # the "first-block" reading (a deviation): the code is put after the prompt
    first = CodeRules(reading="first-block")
    scores = task.score_many([ex] * len(responses), responses, rules=first)
    assert [s.correct for s in scores] == [True, True, True, False, False]
    assert [s.details["plus"] for s in scores] == [True, True, True, False, False]
    assert scores[2].extracted.startswith("from typing import List")  # the prompt's import is kept
    assert scores[0].details["rules"] == "evalplus 0.3.1; deviations: find_zero_fix=True, reading=first-block"


def test_mbpp_non_test_splits_grade_on_their_asserts_inputs():
    task = get_task("mbpp")
    train = task.load("train")
    objects = next(ex for ex in train if ex["task_id"] == 601)  # asserts build Pair objects: not gradable
    with pytest.raises(ValueError, match="not literals"):
        task.problem(objects)
    examples = [ex for ex in train if ex["task_id"] != 601][:3]
    scores = task.score_many(examples, [f"```python\n{ex['code']}\n```" for ex in examples])
    assert all(s.correct and "plus" not in s.details for s in scores)
    assert not task.score(examples[0], "```python\ndef nothing():\n    return 1\n```").correct


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
    assert all(isinstance(s, Grade) for s in scores)


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


@pytest.mark.parametrize("name", TASKS.names())
def test_code_tasks_name_the_verdicts_their_rows_hold(name):
    task = get_task(name)
    expected = {"humaneval": ("base", "plus"), "mbpp": ("base", "plus"), "tiny-humaneval": ("base",),
                "tiny-mbpp": ("base",)}.get(name, ())
    assert task.test_sets == expected and task.executes_code == bool(expected)
    if expected:
        assert tuple(n for n, _ in task.problem(task.load("test", limit=1)[0]).test_sets) == expected
