"""tiny-math: small expressions and equations (fractions, powers, order of operations, linear solve) whose
reference reply is a short LaTeX derivation ending in `\\boxed{answer}`, the MATH answer format.

The `answer` field is the LaTeX of the exact value (an integer or a reduced `\\frac{p}{q}`, sign in front).
"""
from __future__ import annotations

import random
from fractions import Fraction

ASK = ("Compute", "Evaluate", "Simplify", "Find the value of", "What is")


def latex(v: Fraction) -> str:
    """Exact LaTeX of a rational: `7`, `-3`, `\\frac{5}{6}`, `-\\frac{1}{2}`."""
    if v.denominator == 1:
        return str(v.numerator)
    sign = "-" if v < 0 else ""
    return f"{sign}\\frac{{{abs(v.numerator)}}}{{{v.denominator}}}"


def _frac(p: int, q: int) -> str:
    return f"\\frac{{{p}}}{{{q}}}"


def _power(rng: random.Random) -> tuple[str, list[str], Fraction]:
    exp = rng.choice((2, 2, 3))
    base = rng.randint(2, 9 if exp == 2 else 5)
    val = base ** exp
    chain = [f"{base ** i} \\cdot {base} = {base ** (i + 1)}" for i in range(1, exp)]
    c = rng.choice((0, 0, rng.randint(1, 20)))
    if c == 0:
        return f"{rng.choice(ASK)} ${base}^{{{exp}}}$.", [f"${s}$" for s in chain], Fraction(val)
    op = rng.choice(("+", "-"))
    res = val + c if op == "+" else val - c
    q = f"{rng.choice(ASK)} ${base}^{{{exp}}} {op} {c}$."
    return q, [f"${s}$" for s in chain] + [f"${val} {op} {c} = {res}$"], Fraction(res)


def _frac_add(rng: random.Random) -> tuple[str, list[str], Fraction]:
    b, d = rng.randint(2, 9), rng.randint(2, 6)
    if rng.random() < 0.5:
        d = b
    a, c = rng.randint(1, b - 1 if b > 2 else 1), rng.randint(1, 6)
    op = rng.choice(("+", "-"))
    x, y = Fraction(a, b), Fraction(c, d)
    res = x + y if op == "+" else x - y
    q = f"{rng.choice(ASK)} ${_frac(a, b)} {op} {_frac(c, d)}$."
    den = b if b == d else b * d
    if b == d:
        num = a + c if op == "+" else a - c
        steps = [f"${_frac(a, b)} {op} {_frac(c, d)} = {_frac(num, den)}$"]
    else:
        num = a * d + c * b if op == "+" else a * d - c * b
        steps = [f"${_frac(a, b)} {op} {_frac(c, d)} = {_frac(a * d, den)} {op} {_frac(c * b, den)} = {_frac(num, den)}$"]
    if _frac(num, den) != latex(res):
        steps.append(f"${_frac(num, den)} = {latex(res)}$")
    return q, steps, res


def _frac_mul(rng: random.Random) -> tuple[str, list[str], Fraction]:
    a, b, c, d = rng.randint(1, 6), rng.randint(2, 6), rng.randint(1, 6), rng.randint(2, 6)
    res = Fraction(a, b) * Fraction(c, d)
    q = f"{rng.choice(ASK)} ${_frac(a, b)} \\cdot {_frac(c, d)}$."
    steps = [f"${_frac(a, b)} \\cdot {_frac(c, d)} = {_frac(a * c, b * d)}$"]
    if res.denominator != b * d:
        steps.append(f"${_frac(a * c, b * d)} = {latex(res)}$")
    return q, steps, res


def _order(rng: random.Random) -> tuple[str, list[str], Fraction]:
    a, b, c = rng.randint(2, 12), rng.randint(2, 9), rng.randint(2, 9)
    kind = rng.randrange(3)
    if kind == 0:
        s = a + b
        return (f"{rng.choice(ASK)} $({a} + {b}) \\times {c}$.",
                [f"${a} + {b} = {s}$", f"${s} \\times {c} = {s * c}$"], Fraction(s * c))
    if kind == 1:
        p = b * c
        return (f"{rng.choice(ASK)} ${a} + {b} \\times {c}$.",
                [f"${b} \\times {c} = {p}$", f"${a} + {p} = {a + p}$"], Fraction(a + p))
    p = a * c
    return (f"{rng.choice(ASK)} ${a} \\times {c} - {b}$.",
            [f"${a} \\times {c} = {p}$", f"${p} - {b} = {p - b}$"], Fraction(p - b))


def _linear(rng: random.Random) -> tuple[str, list[str], Fraction]:
    a, b = rng.randint(2, 9), rng.randint(1, 20)
    var = rng.choice("xyntk")
    x = Fraction(rng.randint(1, 9)) if rng.random() < 0.75 else Fraction(rng.randint(1, 20), a)
    op = rng.choice(("+", "-"))
    c = a * x + b if op == "+" else a * x - b
    c = int(c)
    inv = "-" if op == "+" else "+"
    rhs = c - b if op == "+" else c + b
    ask = rng.choice((f"Solve for ${var}$: ${a}{var} {op} {b} = {c}$.",
                      f"Find ${var}$ if ${a}{var} {op} {b} = {c}$.",
                      f"If ${a}{var} {op} {b} = {c}$, what is ${var}$?"))
    steps = [f"${a}{var} = {c} {inv} {b} = {rhs}$", f"${var} = {_frac(rhs, a)} = {latex(Fraction(rhs, a))}$"]
    return ask, steps, Fraction(rhs, a)


KINDS = (_power, _frac_add, _frac_mul, _order, _linear)


def make(rng: random.Random) -> dict:
    """One tiny-math example: question, reference (LaTeX steps, last line `\\boxed{...}`), answer (LaTeX)."""
    question, steps, value = rng.choice(KINDS)(rng)
    answer = latex(value)
    return {"question": question, "reference": "\n".join(steps + [f"The answer is \\boxed{{{answer}}}"]),
            "answer": answer}
