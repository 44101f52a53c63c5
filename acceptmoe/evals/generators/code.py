"""tiny-humaneval and tiny-mbpp examples built from the `code_ops` library.

tiny-humaneval: the prompt is a signature plus a docstring with `>>>` examples; the reply is the indented
body; `test` is a `check(candidate)` with three hidden asserts on inputs not shown in the prompt.
tiny-mbpp: a task sentence plus three example asserts; the reply is the whole function as plain code.
"""
from __future__ import annotations

import random

from . import code_ops as ops

MBPP_LEADS = ("Write a function to", "Write a python function to", "Write a Python function to",
              "Create a function to", "Implement a function to")


def _draw(rng: random.Random, n_calls: int):
    op = rng.choice(ops.OPS)
    k = ops.draw_constant(op, rng)
    name, arg_names = rng.choice(op.names), ops.arg_names_for(op, rng)
    body = ops.body(op, arg_names, k)
    source = ops.function_source(name, arg_names, body)
    calls = [(args, ops.evaluate(source, name, args)) for args in ops.distinct_args(op, rng, k, n_calls)]
    return op, k, name, arg_names, body, source, calls


def make_humaneval(rng: random.Random) -> dict:
    """One tiny-humaneval example (question == prompt; reference = indented body)."""
    n_shown = rng.choice((1, 2))
    op, k, name, arg_names, body, _, calls = _draw(rng, n_shown + 3)
    shown, hidden = calls[:n_shown], calls[n_shown:]
    examples = "".join(f"    >>> {ops.call_text(name, a)}\n    {out!r}\n" for a, out in shown)
    doc = op.doc.format(a=arg_names[0], b=arg_names[-1], k=k)
    prompt = f"def {name}({', '.join(arg_names)}):\n    \"\"\"{doc}\n{examples}    \"\"\"\n"
    asserts = "".join(f"    assert {ops.call_text('candidate', a)} == {out!r}\n" for a, out in hidden)
    return {"question": prompt, "reference": body, "prompt": prompt, "entry_point": name,
            "test": f"def check(candidate):\n{asserts}"}


def make_mbpp(rng: random.Random) -> dict:
    """One tiny-mbpp example (question = text + the three asserts; reference = the whole function)."""
    op, k, name, _, _, source, calls = _draw(rng, 3)
    text = f"{rng.choice(MBPP_LEADS)} {op.task.format(k=k)}."
    test_list = [f"assert {ops.call_text(name, a)} == {out!r}" for a, out in calls]
    question = text + "\nYour code should pass these tests:\n" + "\n".join(test_list)
    return {"question": question, "reference": source.rstrip("\n"), "text": text, "test_list": test_list,
            "test_setup_code": ""}
