"""Math answer equivalence with math_verify (`verify(parse(gold), parse(answer))`).

math_verify enforces its time limits with `signal.alarm`, which works only in the main thread; in any
other thread we pass `parsing_timeout=None` / `timeout_seconds=None` (no time limit) instead of letting
it fail. The gold answer is parsed as `\\boxed{answer}`; a gold answer that does not parse is an error
(a data problem), while a model answer that does not parse is simply wrong.
"""
from __future__ import annotations

import logging
import threading

from math_verify import parse, verify

DEFAULT_TIMEOUT_S = 5

logging.getLogger("math_verify").setLevel(logging.ERROR)  # the "timeout is disabled" notice, per call


def _timeout() -> int | None:
    return DEFAULT_TIMEOUT_S if threading.current_thread() is threading.main_thread() else None


def parse_gold(answer: str) -> list:
    """Parse a gold LaTeX answer (without `$` or `\\boxed`); raise ValueError if math_verify cannot."""
    parsed = parse("\\boxed{" + answer + "}", parsing_timeout=_timeout())
    if not parsed:
        raise ValueError(f"gold answer {answer!r} does not parse with math_verify")
    return parsed


def parse_answer(response: str) -> list:
    """Parse a model response with math_verify's default extraction (last \\boxed{} first, then LaTeX
    and plain expressions); [] when nothing is found."""
    return parse(response, parsing_timeout=_timeout())


def math_equal(gold_answer: str, response: str) -> tuple[bool, str]:
    """(correct, extracted answer string) for a response against a gold LaTeX answer."""
    gold = parse_gold(gold_answer)
    pred = parse_answer(response)
    extracted = str(pred[-1]) if pred else ""
    return bool(pred) and verify(gold, pred, timeout_seconds=_timeout()), extracted
