"""The four tiny task families, generated deterministically from a seed, with disjoint train and test splits.

    FAMILIES = ("tiny-gsm", "tiny-math", "tiny-humaneval", "tiny-mbpp")
    generate(family, split, n=None, seed=0) -> list[dict]

Every example has "id", "question" (the user message exactly as shown to the model), "reference" (the
reference assistant reply) and the family's grading fields:
  tiny-gsm        "answer": integer string; reference = terse steps ending in "#### N"
  tiny-math       "answer": LaTeX; reference ends in "\\boxed{answer}"
  tiny-humaneval  "prompt" (== question), "entry_point", "test" ("def check(candidate): ..."); reference =
                  the indented body, so prompt + reference + "\\n" + test + f"\\ncheck({entry_point})\\n" runs
  tiny-mbpp       "text", "test_list" (3 asserts), "test_setup_code" (""); reference = the whole function

Disjointness by construction: a question's split is a fixed function of its text (a hash bucket), so no
test question text can ever be drawn into train, whatever the seeds. Each split is one random stream per
(family, split, seed): `generate(..., n)` is a prefix of `generate(..., n + m)`. Test questions are unique
within the split; train questions may repeat.
"""
from __future__ import annotations

import hashlib
import itertools
import random
from collections.abc import Callable, Iterator

from acceptmoe.errors import UserError

from . import algebra, code, gsm

FAMILIES = ("tiny-gsm", "tiny-math", "tiny-humaneval", "tiny-mbpp")
SPLITS = ("train", "test")
DEFAULT_N = {"train": 10_000, "test": 300}
TEST_BUCKETS = 10          # of 100 hash buckets belong to test: about 10% of the question space
TASKS_VERSION = 2          # bump when any generator's output changes

MAKERS: dict[str, Callable[[random.Random], dict]] = {
    "tiny-gsm": gsm.make,
    "tiny-math": algebra.make,
    "tiny-humaneval": code.make_humaneval,
    "tiny-mbpp": code.make_mbpp,
}


class TaskError(UserError, ValueError):
    """An unknown family or split, or a bad count; the message lists the valid values."""


def split_of(family: str, question: str) -> str:
    """The split a question text belongs to: a fixed hash bucket of (family, question)."""
    digest = hashlib.sha256(f"{family}\n{question}".encode()).digest()
    return "test" if int.from_bytes(digest[:8], "big") % 100 < TEST_BUCKETS else "train"


def _check(family: str, split: str) -> None:
    if family not in FAMILIES:
        raise TaskError(f"unknown tiny task family {family!r}; valid families: {', '.join(FAMILIES)}")
    if split not in SPLITS:
        raise TaskError(f"unknown split {split!r}; valid splits: {', '.join(SPLITS)}")


def stream(family: str, split: str, seed: int = 0) -> Iterator[dict]:
    """Endless examples of one split (ids numbered from 0); test questions never repeat."""
    _check(family, split)
    rng = random.Random(f"tiny-tasks|{family}|{split}|{seed}")
    make, seen, i = MAKERS[family], set(), 0
    while True:
        ex = make(rng)
        q = ex["question"]
        if split_of(family, q) != split or (split == "test" and q in seen):
            continue
        if split == "test":
            seen.add(q)
        yield {"id": f"{family}/{split}/{seed}/{i}", **ex}
        i += 1


def generate(family: str, split: str, n: int | None = None, seed: int = 0) -> list[dict]:
    """The first `n` examples (default 10,000 for train, 300 for test) of one family's split."""
    _check(family, split)
    n = DEFAULT_N[split] if n is None else n
    if not isinstance(n, int) or n < 0:
        raise TaskError(f"n must be a non-negative integer, got {n!r}")
    return list(itertools.islice(stream(family, split, seed), n))


def check_weights(weights: dict[str, int]) -> None:
    """Mixture weights are non-negative integers keyed by family names, at least one positive."""
    unknown = sorted(set(weights) - set(FAMILIES))
    if unknown or any(not isinstance(w, int) or w < 0 for w in weights.values()) or not any(weights.values()):
        raise TaskError(f"bad mixture weights {weights!r}: non-negative integers keyed by "
                        f"{', '.join(FAMILIES)}, at least one positive")


def mixed_stream(split: str, seed: int = 0, weights: dict[str, int] | None = None) -> Iterator[dict]:
    """The training mixture: each round takes `weights[family]` examples of each family in turn (default
    one of each); families with weight 0 are left out."""
    weights = {f: 1 for f in FAMILIES} if weights is None else weights
    check_weights(weights)
    streams = [(stream(f, split, seed), w) for f, w in weights.items() if w]
    while True:
        for s, w in streams:
            for _ in range(w):
                yield next(s)
