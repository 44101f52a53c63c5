"""The tiny task generators: deterministic, disjoint splits, well-formed fields, references that pass."""
import pytest

from acceptmoe.evals import generators as tasks
from acceptmoe.evals.generators import FAMILIES, generate
from acceptmoe.tiny import checks

N_TEST = 120


@pytest.fixture(scope="module")
def test_splits():
    return {f: generate(f, "test", N_TEST) for f in FAMILIES}


@pytest.mark.parametrize("family", FAMILIES)
def test_deterministic_and_prefix_stable(family):
    a, b = generate(family, "train", 50, seed=3), generate(family, "train", 80, seed=3)
    assert a == b[:50]
    assert generate(family, "test", 20) == generate(family, "test", 20)
    assert generate(family, "train", 20, seed=1) != generate(family, "train", 20, seed=2)


@pytest.mark.parametrize("family", FAMILIES)
def test_splits_disjoint(family, test_splits):
    test_q = {e["question"] for e in test_splits[family]}
    assert len(test_q) == N_TEST, "test questions must be unique"
    train_q = {e["question"] for seed in (0, 1) for e in generate(family, "train", 2000, seed=seed)}
    assert not test_q & train_q
    assert all(tasks.split_of(family, q) == "test" for q in test_q)


@pytest.mark.parametrize("family", FAMILIES)
def test_fields(family, test_splits):
    required = {"tiny-gsm": {"answer"}, "tiny-math": {"answer"},
                "tiny-humaneval": {"prompt", "entry_point", "test"},
                "tiny-mbpp": {"text", "test_list", "test_setup_code"}}[family]
    ids = [e["id"] for e in test_splits[family]]
    assert len(set(ids)) == len(ids)
    for e in test_splits[family]:
        assert {"id", "question", "reference"} | required <= set(e)
        if family == "tiny-gsm":
            assert e["reference"].endswith(f"#### {e['answer']}") and e["answer"].lstrip("-").isdigit()
        if family == "tiny-math":
            assert e["reference"].endswith(f"\\boxed{{{e['answer']}}}")
        if family == "tiny-humaneval":
            assert e["question"] == e["prompt"] and e["prompt"].startswith(f"def {e['entry_point']}(")
            assert ">>> " in e["prompt"] and e["test"].startswith("def check(candidate):\n    assert ")
            assert e["reference"].startswith("    ")
        if family == "tiny-mbpp":
            assert len(e["test_list"]) == 3 and e["test_setup_code"] == ""
            assert e["question"] == e["text"] + "\nYour code should pass these tests:\n" + "\n".join(e["test_list"])
            assert e["reference"].startswith("def ") and "```" not in e["reference"]


@pytest.mark.parametrize("family", FAMILIES)
def test_references_pass_checks(family, test_splits):
    examples = test_splits[family]
    assert all(checks.score(family, examples, [e["reference"] for e in examples]))


@pytest.mark.parametrize("family", FAMILIES)
def test_wrong_replies_fail(family, test_splits):
    examples = test_splits[family][:10]
    wrong = {"tiny-gsm": lambda e: f"#### {int(e['answer']) + 1}",
             "tiny-math": lambda e: f"\\boxed{{{e['answer']} + 1}}",
             "tiny-humaneval": lambda e: "    return None",
             "tiny-mbpp": lambda e: e["reference"].split("\n")[0] + "\n    return None"}[family]
    assert not any(checks.score(family, examples, [wrong(e) for e in examples]))


def test_template_variety():
    qs = [e["question"] for e in generate("tiny-gsm", "train", 400)]
    assert len({q.split(".")[1] for q in qs}) > 20
    entry = {e["entry_point"] for e in generate("tiny-humaneval", "train", 400)}
    assert len(entry) > 60


def test_errors_name_valid_values():
    with pytest.raises(tasks.TaskError, match="tiny-gsm"):
        generate("gsm", "test")
    with pytest.raises(tasks.TaskError, match="train, test"):
        generate("tiny-gsm", "dev")


def test_code_check_timeout():
    assert checks.run_program("while True: pass", timeout_s=0.5) is False
    assert checks.run_program("assert 1 == 1") is True


def test_code_checks_run_model_code_in_the_sandbox():
    import os

    if os.geteuid() != 0:
        pytest.skip("the sandbox's uid drop is only visible when the harness runs as root")
    assert checks.run_program("import os\nassert os.getuid() != 0 and not os.path.exists('/root/.ssh')") is True


def test_mixed_stream_follows_the_weights():
    import itertools

    weights = {"tiny-gsm": 3, "tiny-math": 2, "tiny-humaneval": 0, "tiny-mbpp": 1}
    rows = list(itertools.islice(tasks.mixed_stream("train", 0, weights), 12))
    families = [r["id"].split("/")[0] for r in rows]
    assert families == (["tiny-gsm"] * 3 + ["tiny-math"] * 2 + ["tiny-mbpp"]) * 2
    # each family's examples are its own stream, in order
    assert [r for r in rows if r["id"].startswith("tiny-gsm")] == generate("tiny-gsm", "train", 6)
    default = [r["id"].split("/")[0] for r in itertools.islice(tasks.mixed_stream("train", 0), 8)]
    assert default == list(FAMILIES) * 2


@pytest.mark.parametrize("weights", [{"gsm": 1}, {"tiny-gsm": -1, "tiny-math": 1}, {"tiny-gsm": 0}])
def test_mixed_stream_rejects_bad_weights(weights):
    with pytest.raises(tasks.TaskError, match="mixture weights"):
        next(tasks.mixed_stream("train", 0, weights))
