"""GSM8K (test 1319, train 7473): grade-school word problems, exact match with lm-evaluation-harness
semantics (lm-eval 0.4 `gsm8k` task).

- flexible-extract (the reported score): last match of `(-?[$0-9.,]{2,})|(-?[0-9]+)`, the first non-empty
  group of it, stripped; no match gives "[invalid]".
- strict-match (also recorded): first match of `#### (\\-?[0-9\\.\\,]+)`.
- exact match: both prediction and reference (the full dataset answer) have `,`, `$`, `(?s).*#### ` and a
  final `.` removed, are lower-cased, then compared as strings.
Prompt (our choice): zero-shot chat, the question followed by an instruction to end with `#### <number>`.
"""
from __future__ import annotations

import re

from acceptmoe.evals.data import read_records, take
from acceptmoe.evals.tasks import Score, check_split, user_message

NAME = "gsm8k"
VERSION = "1"
SPLITS = ("test", "train")

FLEXIBLE_REGEX = re.compile(r"(-?[$0-9.,]{2,})|(-?[0-9]+)")
STRICT_REGEX = re.compile(r"#### (\-?[0-9\.\,]+)")
IGNORE_REGEXES = (",", r"\$", r"(?s).*#### ", r"\.$")
INVALID = "[invalid]"
INSTRUCTION = ("Solve the problem step by step. At the end, write the final answer as a number on its own "
               "line in the form '#### <number>'.")


def load(split: str = "test", limit: int | None = None) -> list[dict]:
    check_split(NAME, split, SPLITS)
    records = read_records(f"gsm8k-{split}")
    return take([{"id": f"gsm8k-{split}-{i}", **r} for i, r in enumerate(records)], limit)


def messages(example: dict) -> list[dict]:
    return user_message(f"{example['question']}\n\n{INSTRUCTION}")


def _select(matches: list, index: int) -> str:
    if not matches:
        return INVALID
    match = matches[index]
    if isinstance(match, tuple):
        match = [m for m in match if m][0]
    return match.strip()


def flexible_extract(response: str) -> str:
    """lm-eval's flexible-extract filter: the last number-like string, or "[invalid]"."""
    return _select(FLEXIBLE_REGEX.findall(response), -1)


def strict_extract(response: str) -> str:
    """lm-eval's strict-match filter: the number after the first `#### `, or "[invalid]"."""
    return _select(STRICT_REGEX.findall(response), 0)


def normalize(text: str) -> str:
    """lm-eval's exact_match preprocessing for GSM8K (regexes_to_ignore, then ignore_case)."""
    for pattern in IGNORE_REGEXES:
        text = re.sub(pattern, "", text)
    return text.lower()


def exact_match(prediction: str, reference: str) -> bool:
    return normalize(prediction) == normalize(reference)


def extract(example: dict, response: str) -> str:
    return flexible_extract(response)


def score_against(reference: str, response: str) -> Score:
    """Grade a response against a reference answer (full GSM8K solution or a bare number)."""
    flexible, strict = flexible_extract(response), strict_extract(response)
    return Score(correct=exact_match(flexible, reference), extracted=flexible,
                 details={"strict_extracted": strict, "strict_match": exact_match(strict, reference),
                          "target": normalize(reference)})


def score(example: dict, response: str) -> Score:
    return score_against(example["answer"], response)
