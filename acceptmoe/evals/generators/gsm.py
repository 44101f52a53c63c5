"""tiny-gsm: short arithmetic word problems whose reference reply is terse step-by-step reasoning ending in
`#### N`, the GSM8K answer format.

Each story kind draws names, objects, numbers and one of several phrasings; numbers stay small (operands
under 50, sums under 100, products from the single-digit tables) so a few-million-parameter model can learn the arithmetic.
"""
from __future__ import annotations

import random

NAMES = ("Mia", "Leo", "Ava", "Noah", "Emma", "Liam", "Zoe", "Omar", "Lily", "Ivan", "Nina", "Sam",
         "Ruby", "Theo", "Maya", "Kai", "Ella", "Finn", "Aria", "Jack", "Rosa", "Ben", "Iris", "Tom")
ITEMS = ("apples", "pencils", "stickers", "marbles", "cookies", "books", "shells", "stamps", "cards",
         "buttons", "eggs", "beads", "balloons", "crayons", "coins", "flowers")
CONTAINERS = (("box", "boxes"), ("bag", "bags"), ("pack", "packs"), ("jar", "jars"), ("basket", "baskets"))
THINGS = ("notebook", "pen", "toy car", "sandwich", "ticket", "cupcake", "ball", "comic", "plant", "mug")
UNITS = (("pages", "reads"), ("laps", "swims"), ("miles", "runs"), ("words", "writes"), ("songs", "plays"))


def _pronoun(name: str) -> str:
    return "she" if name in ("Mia", "Ava", "Emma", "Zoe", "Lily", "Nina", "Ruby", "Maya", "Ella", "Aria",
                             "Rosa", "Iris") else "he"


def _cap(s: str) -> str:
    return s[0].upper() + s[1:]


def _gain_loss(rng: random.Random) -> tuple[str, list[str], int]:
    name, friend = rng.sample(NAMES, 2)
    item, he = rng.choice(ITEMS), _pronoun(name)
    a, b = rng.randint(5, 49), rng.randint(2, 40)
    c = rng.randint(1, a + b - 1)
    gain = rng.choice(("buys", "finds", "gets", "is given"))
    loss = rng.choice((f"gives {c} to {friend}", f"loses {c}", f"uses {c}", f"sells {c}"))
    ask = rng.choice((f"How many {item} does {name} have now?", f"How many {item} are left?",
                      f"How many {item} does {he} have in the end?"))
    q = f"{name} has {a} {item}. {_cap(he)} {gain} {b} more and then {loss}. {ask}"
    r = a + b - c
    return q, [f"{a} + {b} = {a + b}", f"{a + b} - {c} = {r}"], r


def _groups(rng: random.Random) -> tuple[str, list[str], int]:
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    (one, many), g, p, a = rng.choice(CONTAINERS), rng.randint(2, 9), rng.randint(2, 9), rng.randint(0, 30)
    had = "" if a == 0 else f" {_cap(_pronoun(name))} already had {a} {item}."
    ask = rng.choice((f"How many {item} does {name} have in total?", f"How many {item} does {name} have altogether?"))
    q = f"{name} buys {g} {many} of {item}. Each {one} holds {p} {item}.{had} {ask}"
    steps = [f"{g} * {p} = {g * p}"] + ([] if a == 0 else [f"{g * p} + {a} = {g * p + a}"])
    return q, steps, g * p + a


def _share(rng: random.Random) -> tuple[str, list[str], int]:
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    k, each, keep = rng.randint(2, 9), rng.randint(2, 9), rng.choice((0, 0, rng.randint(1, 20)))
    total = k * each + keep
    who = rng.choice(("friends", "classmates", "cousins", "neighbors"))
    if keep:
        q = (f"{name} has {total} {item}. {_cap(_pronoun(name))} keeps {keep} and shares the rest equally "
             f"among {k} {who}. How many {item} does each of them get?")
        return q, [f"{total} - {keep} = {total - keep}", f"{total - keep} / {k} = {each}"], each
    q = f"{name} shares {total} {item} equally among {k} {who}. How many {item} does each get?"
    return q, [f"{total} / {k} = {each}"], each


def _change(rng: random.Random) -> tuple[str, list[str], int]:
    name, thing = rng.choice(NAMES), rng.choice(THINGS)
    p, n = rng.randint(2, 9), rng.randint(2, 9)
    bill = rng.choice([b for b in (20, 50, 100) if b >= p * n] or [100])
    he = _pronoun(name)
    q = (f"A {thing} costs ${p}. {name} buys {n} of them and pays with a ${bill} bill. "
         f"How much change does {he} get?")
    return q, [f"{n} * {p} = {n * p}", f"{bill} - {n * p} = {bill - n * p}"], bill - n * p


def _compare(rng: random.Random) -> tuple[str, list[str], int]:
    n1, n2 = rng.sample(NAMES, 2)
    item, a, d = rng.choice(ITEMS), rng.randint(3, 40), rng.randint(1, 20)
    more = rng.random() < 0.6 or d >= a
    b = a + d if more else a - d
    rel = f"{d} more {item} than" if more else f"{d} fewer {item} than"
    ask = rng.choice(("How many do they have together?", f"How many {item} do they have in total?"))
    q = f"{n1} has {a} {item}. {n2} has {rel} {n1}. {ask}"
    step = f"{a} + {d} = {b}" if more else f"{a} - {d} = {b}"
    return q, [step, f"{a} + {b} = {a + b}"], a + b


def _rate(rng: random.Random) -> tuple[str, list[str], int]:
    name, (unit, verb) = rng.choice(NAMES), rng.choice(UNITS)
    per, days = rng.randint(2, 9), rng.randint(2, 9)
    extra = rng.choice((0, rng.randint(1, 20)))
    period = rng.choice(("day", "week"))
    q = f"{name} {verb} {per} {unit} every {period}. How many {unit} does {_pronoun(name)} {verb[:-1]} in {days} {period}s?"
    steps = [f"{per} * {days} = {per * days}"]
    if extra:
        q = q[:-1] + f" if {_pronoun(name)} also {verb} {extra} extra {unit}?"
        steps.append(f"{per * days} + {extra} = {per * days + extra}")
    return q, steps, per * days + extra


def _wage(rng: random.Random) -> tuple[str, list[str], int]:
    name = rng.choice(NAMES)
    rate, hours = rng.randint(3, 9), rng.randint(2, 9)
    spend = rng.randint(1, rate * hours - 1)
    what = rng.choice(("lunch", "a book", "a gift", "snacks", "a bus ticket"))
    q = (f"{name} earns ${rate} per hour and works {hours} hours. Then {_pronoun(name)} spends ${spend} on "
         f"{what}. How many dollars does {name} have left?")
    return q, [f"{rate} * {hours} = {rate * hours}", f"{rate * hours} - {spend} = {rate * hours - spend}"], \
        rate * hours - spend


STORIES = (_gain_loss, _groups, _share, _change, _compare, _rate, _wage)


def make(rng: random.Random) -> dict:
    """One tiny-gsm example: question, reference ("step\\nstep\\n#### N") and answer (integer string)."""
    question, steps, answer = rng.choice(STORIES)(rng)
    return {"question": question, "reference": "\n".join(steps + [f"#### {answer}"]), "answer": str(answer)}
