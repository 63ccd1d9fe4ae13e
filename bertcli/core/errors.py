"""User-facing errors.

A `UserError` is a mistake the user can fix (a missing file, a bad recipe key, an empty corpus).
The CLI renders it as one message -- what is wrong, where, how to fix it -- on stderr and exits
with code 2, without a traceback unless `--debug` is given. Anything else is a bug in bertcli
and keeps its traceback.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable


class UserError(Exception):
    """A mistake in the user's input, reported without a traceback (exit code 2)."""

    def __init__(self, what: str, *, where: str | None = None, fix: str | None = None):
        super().__init__(what)
        self.what = what
        self.where = where
        self.fix = fix

    def __str__(self) -> str:
        parts = [f"{self.where}: {self.what}" if self.where else self.what]
        if self.fix:
            parts.append(f"fix: {self.fix}")
        return "\n".join(parts)


class Diverged(UserError):
    """Training diverged (non-finite losses, gradients or model outputs). Raised as the user's
    one message, exit 2; a sweep over learning rates catches it, counts the run as diverged
    and goes on with the next run."""


def closest(word: str, choices: Iterable[str]) -> str | None:
    """The closest of `choices` to `word`, or None when nothing is close enough to suggest."""
    found = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return found[0] if found else None


def did_you_mean(word: str, choices: Iterable[str], prefix: str = "") -> str:
    """`"; did you mean X?"` when one of `choices` is close to `word`, else the list of choices."""
    choices = list(choices)
    best = closest(word, choices)
    if best is not None:
        return f"; did you mean {prefix}{best}?"
    if len(choices) <= 12:
        return "; valid: " + ", ".join(prefix + c for c in choices)
    return ""


def require_finite(value: float, what: str, where: str | None = None) -> float:
    """`value` when it is a finite number; a UserError naming `what` and `where` for nan and inf
    (a NaN label or setting would otherwise be trained on, or skipped, without a word)."""
    if not math.isfinite(value):
        raise UserError(f"{what} is {value}, not a finite number", where=where,
                        fix="fix or remove that value: labels and settings must be finite numbers")
    return value
