"""Scorers on hand-written cases: GSM8K through lm-eval's objects, math_verify, Harmony, code extraction."""
from concurrent.futures import ThreadPoolExecutor

import pytest

from acceptmoe.evals.extract import extract_code, extract_final_channel, fenced_blocks, response_text
from acceptmoe.evals.mathcheck import GoldParseError, math_check, math_equal, parse_gold
from acceptmoe.evals.tasks import get_task, gsm8k

REF = "Natalia sold 48/2 = 24 clips in May.\nNatalia sold 48+24 = 72 clips altogether.\n#### 72"


@pytest.mark.parametrize("response, flexible, strict", [
    ("So the total is $1,000.", "$1,000.", "[invalid]"),
    ("The temperature drops to -12 degrees.", "-12", "[invalid]"),
    ("I cannot tell from the question.", "[invalid]", "[invalid]"),
    ("#### 42", "42", "42"),
    ("#### 42\nThat makes 3 baskets.", "3", "42"),
    ("3 + 4 = 7.", "7.", "[invalid]"),
    ("x is 5", "5", "[invalid]"),
    ("#### 1,234.5\n", "1,234.5", "1,234.5"),
    ("#### 7 and later #### 8", "8", "7"),
])
def test_gsm8k_extraction(response, flexible, strict):
    assert gsm8k.flexible_extract(response) == flexible
    assert gsm8k.strict_extract(response) == strict


@pytest.mark.parametrize("prediction, reference, equal", [
    ("$1,000.", "#### 1000", True),
    ("$1,000.", "1000", True),
    ("-12", "#### -12", True),
    ("-12", "12", False),
    ("[invalid]", "#### 5", False),
    ("42.00", "42", False),  # lm-eval compares strings: no numeric normalisation beyond the ignore rules
    ("42..", "42", False),  # only one final "." is ignored
    ("72", REF, True),
])
def test_gsm8k_exact_match(prediction, reference, equal):
    assert gsm8k.exact_match(prediction, reference) is equal


def test_gsm8k_strict_versus_flexible_scores():
    s = gsm8k.score({"answer": REF}, "She sold 72 clips.\n#### 72")
    assert s.correct and s.details["strict_match"] and s.extracted == "72" and s.details["target"] == "72"
    s = gsm8k.score({"answer": REF}, "She sold 72 clips in total.")
    assert s.correct and not s.details["strict_match"]
    s = gsm8k.score({"answer": REF}, "#### 72\nThat is 24 more than in May.")
    assert not s.correct and s.details["strict_match"]


def test_every_gsm8k_reference_solution_scores_correct():
    for split in ("test", "train"):
        examples = gsm8k.load(split)
        scores = [gsm8k.score(ex, ex["answer"]) for ex in examples]
        assert all(s.correct and s.details["strict_match"] for s in scores), split


@pytest.mark.parametrize("gold, response", [
    ("\\frac{1}{2}", "The answer is $\\boxed{\\frac12}$"),
    ("\\frac{1}{2}", "\\boxed{0.5}"),
    ("3\\sqrt{2}", "\\boxed{\\sqrt{18}}"),
    ("\\left( 3, \\frac{\\pi}{2} \\right)", "so the point is \\boxed{(3, \\frac{\\pi}{2})}"),
    ("-\\frac{3}{4}", "Therefore $x = -\\frac{3}{4}$."),
    ("x^2+2x+1", "\\boxed{(x+1)^2}"),
    ("\\dfrac{7}{3}", "\\boxed{\\frac{7}{3}}"),
    ("\\text{(C)}", "The answer is \\boxed{C}"),
])
def test_math_verify_positives(gold, response):
    correct, extracted = math_equal(gold, response)
    assert correct and extracted


@pytest.mark.parametrize("gold, response", [
    ("\\frac{1}{2}", "\\boxed{\\frac{1}{3}}"),
    ("\\frac{1}{2}", "\\boxed{2}"),
    ("10", "\\boxed{11}"),
    ("10", "I do not know."),
    ("5", "First I guessed \\boxed{3}, then \\boxed{5}"),  # two boxed answers form a set, not one answer
])
def test_math_verify_negatives(gold, response):
    assert math_equal(gold, response)[0] is False


def test_unparseable_gold_is_an_error():
    with pytest.raises(ValueError, match="does not parse"):
        parse_gold("")


def test_math_scoring_works_in_worker_threads():
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda r: math_equal("\\frac{1}{2}", r)[0], ["\\boxed{0.5}", "\\boxed{3}"]))
    assert results == [True, False]


HARMONY = ("<|channel|>analysis<|message|>Maybe 41? Let me recheck: 6*7=42.<|end|>"
           "<|start|>assistant<|channel|>final<|message|>The answer is 42.\n#### 42<|return|>")


@pytest.mark.parametrize("text, final", [
    (HARMONY, "The answer is 42.\n#### 42"),
    (HARMONY + "<|start|>assistant<|channel|>final<|message|>Again: 43<|end|>", "Again: 43"),
    ("<|channel|>analysis<|message|>Still thinking about 17", ""),
    ("<|channel|>analysis<|message|>ok<|end|><|start|>assistant<|channel|>final<|message|>cut off at 9", "cut off at 9"),
    ('<|channel|>final <|constrain|>json<|message|>{"a": 1}<|call|>', '{"a": 1}'),
    ("plain text without channels 5", ""),
])
def test_extract_final_channel(text, final):
    assert extract_final_channel(text) == final


def test_response_formats():
    assert response_text(HARMONY, "plain") == HARMONY
    assert response_text(HARMONY, "harmony").endswith("#### 42")
    with pytest.raises(ValueError, match="valid: plain, harmony"):
        response_text(HARMONY, "chatml")


def test_harmony_analysis_numbers_do_not_count():
    raw = ("<|channel|>analysis<|message|>#### 41<|end|><|start|>assistant<|channel|>final<|message|>"
           "It is 72.<|return|>")
    assert gsm8k.score({"answer": REF}, response_text(raw, "harmony")).correct
    assert not gsm8k.score({"answer": REF}, response_text(raw.replace("72", "71"), "harmony")).correct


CODE_RESPONSE = """Here is a helper and the solution.

```python
def helper(x):
    return x
```

```python
def solve(a):
    return helper(a) + 1
```
Hope this helps."""


def test_extract_code_prefers_the_block_defining_the_entry_point():
    assert extract_code(CODE_RESPONSE, "solve").startswith("def solve(a):")
    assert extract_code(CODE_RESPONSE).startswith("def helper(x):")
    assert extract_code(CODE_RESPONSE, "missing").startswith("def helper(x):")


def test_extract_code_cases():
    assert extract_code("```\ndef f():\n    return 1\n```") == "def f():\n    return 1"
    assert extract_code("```py\nx = 1\n```") == "x = 1"
    assert extract_code("Sure:\n```python\ndef f():\n    return 2") == "def f():\n    return 2"  # cut off
    assert extract_code("    return a + b\n") == "    return a + b\n"  # a plain completion keeps its indent
    assert extract_code("```bash\nls\n```") == "```bash\nls\n```"  # no Python block: text unchanged
    assert fenced_blocks("```Python\nx\n```") == [("python", "x")]


# about 10 s in math_verify's parser here (1 s per 200 terms), far past the 1 s limit on any machine
SLOW_GOLD = "+".join(f"\\frac{{x^{{{i}}}}}{{{i + 1}}}" for i in range(2000))


def test_a_gold_parse_timeout_fails_the_sample_not_the_run():
    verdict = math_check(SLOW_GOLD, "\\boxed{1}", timeout_s=1)
    assert verdict.correct is False and "timed out after 1 s" in verdict.gold_error and verdict.extracted == "1"
    with pytest.raises(GoldParseError, match="timed out"):      # another gold: nothing the first parse cached
        parse_gold(SLOW_GOLD.replace("x", "y"), timeout_s=1)


def test_math500_scores_an_unparseable_gold_as_one_failed_sample():
    task = get_task("math500")
    good, bad = task.load(limit=2)
    bad = {**bad, "answer": ""}
    scores = task.score_many([good, bad], [f"\\boxed{{{good['answer']}}}", "\\boxed{1}"])
    assert scores[0].correct and "gold_error" not in scores[0].details
    assert not scores[1].correct and "does not parse" in scores[1].details["gold_error"]


def test_a_missing_grader_stops_the_run_instead_of_grading_replies_wrong():
    """lm-eval not importable (as in an environment built without the `eval` extra): scoring a GSM8K reply
    raises the one-line install error; it is never saved as an incorrect reply."""
    import subprocess
    import sys

    code = ("import sys; sys.modules['lm_eval'] = None\n"
            "from acceptmoe.evals.tasks import get_task\n"
            "task = get_task('tiny-gsm'); ex = task.load('test')[0]\n"
            "try:\n    task.score_many([ex], ['#### 1'])\nexcept Exception as exc:\n"
            "    print(type(exc).__name__, exc)\nelse:\n    print('graded')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.startswith("LmEvalMissing GSM8K scoring needs lm-eval==0.4.13"), out.stdout + out.stderr
