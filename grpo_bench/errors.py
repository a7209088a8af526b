"""User-facing errors: one line, no traceback from the CLI (exit code 2)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class UserError(ValueError):
    """A mistake in the user's input (a name, a value, a file). The CLI prints it on one line."""


def unknown(kind: str, name: object, allowed: Iterable[str], where: str = "") -> UserError:
    """Error for a name outside an allowed set, with a did-you-mean hint and the full list."""
    allowed = sorted(allowed)
    hint = difflib.get_close_matches(str(name), allowed, n=1)
    msg = f"{where}unknown {kind} {name!r}"
    if hint:
        msg += f" (did you mean {hint[0]!r}?)"
    return UserError(f"{msg}; allowed: {', '.join(allowed)}")
