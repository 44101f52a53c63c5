"""The one base class of every user-facing error: bad input, named with its fix.

Every error that a user can cause (an unknown method, a bad config key or value, a missing or damaged
checkpoint, a missing device) derives from `UserError`. The command line prints such an error as one
`error: <message>` line and exits with code 2; anything else is a bug and keeps its traceback. This module
imports nothing from the package, so every room can raise these errors without an arrow running back up.
"""
from __future__ import annotations


class UserError(Exception):
    """Bad input from the user; the message names the problem and the fix."""

    def __str__(self) -> str:  # KeyError-style subclasses would quote their message; show it plainly
        return str(self.args[0]) if self.args else ""
