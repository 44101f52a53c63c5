"""Math answer equivalence with math_verify (`verify(parse(gold), parse(answer))`).

math_verify enforces its time limits with `signal.alarm`, which works only in the main thread; in any
other thread we pass `parsing_timeout=None` / `timeout_seconds=None` (no time limit) instead of letting
it fail. The gold answer is parsed as `\\boxed{answer}`. A gold answer that does not parse, or whose
parsing runs past the time limit, fails that one sample (`MathVerdict.gold_error` says why); it never
stops a run. A model answer that does not parse is simply wrong.
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from math_verify import parse, verify
from math_verify.errors import TimeoutException

DEFAULT_TIMEOUT_S = 5

logging.getLogger("math_verify").setLevel(logging.ERROR)  # the "timeout is disabled" notice, per call


class GoldParseError(ValueError):
    """The gold answer did not parse (or its parsing ran past the time limit)."""


def _timeout(seconds: int) -> int | None:
    return seconds if threading.current_thread() is threading.main_thread() else None


def parse_gold(answer: str, timeout_s: int = DEFAULT_TIMEOUT_S) -> list:
    """Parse a gold LaTeX answer (without `$` or `\\boxed`); GoldParseError if math_verify cannot, or if
    parsing takes longer than `timeout_s` seconds (main thread only)."""
    try:
        parsed = parse("\\boxed{" + answer + "}", parsing_timeout=_timeout(timeout_s), raise_on_error=True)
    except TimeoutException:
        raise GoldParseError(f"gold answer {answer[:200]!r} timed out after {timeout_s} s in math_verify's parser") from None
    except Exception as exc:
        raise GoldParseError(f"gold answer {answer[:200]!r} does not parse with math_verify: {exc!r:.200}") from None
    if not parsed:
        raise GoldParseError(f"gold answer {answer[:200]!r} does not parse with math_verify")
    return parsed


def parse_answer(response: str, timeout_s: int = DEFAULT_TIMEOUT_S) -> list:
    """Parse a model response with math_verify's default extraction (last \\boxed{} first, then LaTeX
    and plain expressions); [] when nothing is found."""
    return parse(response, parsing_timeout=_timeout(timeout_s))


@dataclass(frozen=True)
class MathVerdict:
    correct: bool
    extracted: str  # the last parsed answer of the response ("" if none)
    gold_error: str | None = None  # why the gold answer could not be used (then correct is False)


def math_check(gold_answer: str, response: str, timeout_s: int = DEFAULT_TIMEOUT_S) -> MathVerdict:
    """The verdict on a response against a gold LaTeX answer."""
    pred = parse_answer(response, timeout_s)
    extracted = str(pred[-1]) if pred else ""
    try:
        gold = parse_gold(gold_answer, timeout_s)
    except GoldParseError as exc:
        return MathVerdict(False, extracted, str(exc))
    return MathVerdict(bool(pred) and verify(gold, pred, timeout_seconds=_timeout(timeout_s)), extracted)


def math_equal(gold_answer: str, response: str) -> tuple[bool, str]:
    """(correct, extracted answer string) for a response against a gold LaTeX answer."""
    verdict = math_check(gold_answer, response)
    return verdict.correct, verdict.extracted
