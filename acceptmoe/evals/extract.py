"""Turning a model's raw output into the text a task grades: Harmony final channel, fenced code blocks.

GPT-OSS writes Harmony: `<|channel|>analysis<|message|>...<|end|><|start|>assistant<|channel|>final
<|message|>...<|return|>`. Only the final channel is the answer; decode the output with special tokens
kept, or the channel markers are lost. Other models' outputs are graded as they are ("plain").
"""
from __future__ import annotations

import re

RESPONSE_FORMATS = ("plain", "harmony")

_FINAL = re.compile(
    r"<\|channel\|>final[^<]*(?:<\|constrain\|>[^<]*)?<\|message\|>(.*?)(?=<\|end\|>|<\|return\|>|<\|call\|>|<\|start\|>|\Z)",
    re.S)
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+.-]*)[^\n]*\n(.*?)(?:\n[ \t]*```|\Z)", re.S)
_PYTHON_TAGS = ("", "python", "python3", "py", "pycon")


def extract_final_channel(text: str) -> str:
    """Content of the last Harmony final-channel message; "" when the output has none (e.g. cut off
    while still in the analysis channel)."""
    found = _FINAL.findall(text)
    return found[-1] if found else ""


def response_text(raw: str, response_format: str) -> str:
    """The part of a raw model output that is graded: all of it ("plain") or the final channel ("harmony")."""
    if response_format == "plain":
        return raw
    if response_format == "harmony":
        return extract_final_channel(raw)
    raise ValueError(f"unknown response format {response_format!r}; valid: {', '.join(RESPONSE_FORMATS)}")


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """All ``` fenced blocks as (language tag, body); an unclosed last fence runs to the end of the text."""
    return [(tag.lower(), body) for tag, body in _FENCE.findall(text)]


def defines(code: str, name: str) -> bool:
    """True if `code` has a top-level `def name(`."""
    return re.search(rf"^def\s+{re.escape(name)}\s*\(", code, re.M) is not None


def extract_code(text: str, entry_point: str | None = None) -> str:
    """The Python code in a response: the first fenced Python block that defines `entry_point` (if
    given), else the first fenced Python block, else the whole text unchanged (a plain completion, whose
    leading indentation matters)."""
    blocks = [body for tag, body in fenced_blocks(text) if tag in _PYTHON_TAGS]
    if not blocks:
        return text
    if entry_point is not None:
        for body in blocks:
            if defines(body, entry_point):
                return body
    return blocks[0]
