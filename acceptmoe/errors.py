"""The one base class of every user-facing error: bad input, named with its fix.

Every error that a user can cause (an unknown method, a bad config key or value, a missing or damaged
checkpoint, a missing device) derives from `UserError`. The command line prints such an error as one
`error: <message>` line and exits with code 2; anything else is a bug and keeps its traceback. This module
imports nothing from the package, so every room can raise these errors without an arrow running back up.
"""
from __future__ import annotations

import reprlib

SHOWN_CHARS = 300      # a value quoted in a message, at most
MESSAGE_CHARS = 2000   # a whole message, at most (its middle cut: the problem leads, the fix ends it)


def shown(value, limit: int = SHOWN_CHARS) -> str:
    """`repr(value)` in at most `limit` characters, without rendering more of a large or nested value
    than that (reprlib's per-level limits)."""
    brief = reprlib.Repr()
    brief.maxstring = brief.maxother = brief.maxlong = limit
    brief.maxlevel, brief.maxlist, brief.maxdict, brief.maxtuple, brief.maxset = 4, 8, 8, 8, 8
    text = brief.repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


class UserError(Exception):
    """Bad input from the user; the message names the problem and the fix (at most MESSAGE_CHARS)."""

    def __str__(self) -> str:  # KeyError-style subclasses would quote their message; show it plainly
        text = str(self.args[0]) if self.args else ""
        if len(text) <= MESSAGE_CHARS:
            return text
        cut = len(text) - MESSAGE_CHARS + 40
        return f"{text[:MESSAGE_CHARS * 2 // 3]} [... {cut} characters cut ...] {text[-(MESSAGE_CHARS // 3 - 40):]}"
