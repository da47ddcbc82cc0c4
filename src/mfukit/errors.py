"""The one error hierarchy of mfukit and the exit codes it maps to.

Every error a user can cause is an :class:`InputError` (exit 2) whose message says what was wrong,
where (file and field), what was expected and how to fix it. Code never uses ``assert`` on user input.

====  =====================================================================================
exit  meaning
====  =====================================================================================
0     ran fine
1     ran fine but the answer is negative (infeasible plan, error findings, a failed check)
2     bad input or configuration (:class:`InputError` and subclasses)
3     a needed component is missing (:class:`MissingComponentError`: torch, slurm, ...)
101   internal error (a bug: the traceback is shown with ``--debug``)
====  =====================================================================================
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from enum import IntEnum
from typing import Any


class ExitCode(IntEnum):
    OK = 0
    NEGATIVE = 1
    BAD_INPUT = 2
    MISSING_COMPONENT = 3
    INTERNAL = 101


class MfukitError(Exception):
    """Base of every error mfukit raises on purpose."""

    exit_code: ExitCode = ExitCode.INTERNAL

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def render(self) -> str:
        """The whole message a user sees, on one or two lines."""
        if self.hint:
            return f"{self.message}\n  fix: {self.hint}"
        return self.message


class InputError(MfukitError):
    """A bad value from the user: a flag, a scenario field, a file that cannot be read or parsed.

    ``source`` is the file (or ``"command line"``), ``field`` the dotted field name and ``value``
    the offending value; ``expected`` says what would have been accepted.
    """

    exit_code = ExitCode.BAD_INPUT

    def __init__(
        self,
        message: str,
        *,
        source: str | None = None,
        field: str | None = None,
        value: Any = None,
        expected: str | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message, hint=hint)
        self.source = source
        self.field = field
        self.value = value
        self.expected = expected

    def at(self, *, source: str | None = None, field: str | None = None) -> InputError:
        """Return this error located in ``source`` and under ``field`` (prefixing a nested field)."""
        if source is not None and self.source is None:
            self.source = source
        if field is not None:
            self.field = f"{field}.{self.field}" if self.field else field
        return self

    def render(self) -> str:
        where = ": ".join(part for part in (self.source, self.field) if part)
        head = f"{where}: " if where else ""
        value = f"{self.value!r}: " if self.value is not None else ""
        text = f"{head}{value}{self.message}"
        if self.expected:
            text += f" (expected {self.expected})"
        if self.hint:
            text += f"\n  fix: {self.hint}"
        return text


class UnknownNameError(InputError):
    """A name that is not in a closed set (catalog entries, policies, collectives...)."""

    def __init__(
        self,
        kind: str,
        name: str,
        choices: Iterable[str],
        *,
        source: str | None = None,
        field: str | None = None,
    ) -> None:
        known = sorted(choices)
        close = suggest(name, known)
        hint = (
            f"did you mean {', '.join(close)}?"
            if close
            else f"choose one of: {', '.join(known[:12])}{' ...' if len(known) > 12 else ''}"
        )
        super().__init__(f"unknown {kind} {name!r}", source=source, field=field, hint=hint)
        self.kind = kind
        self.name = name
        self.choices = known
        self.suggestions = close

    def render(self) -> str:
        where = ": ".join(part for part in (self.source, self.field) if part)
        head = f"{where}: " if where else ""
        return f"{head}{self.message} — {self.hint}"


class MissingComponentError(MfukitError):
    """An optional component (torch, Slurm, a system tool) is not installed or not reachable."""

    exit_code = ExitCode.MISSING_COMPONENT

    def __init__(self, component: str, *, purpose: str, install: str) -> None:
        super().__init__(f"{component} is needed {purpose} but is not available", hint=install)
        self.component = component


def suggest(name: str, choices: Iterable[str], limit: int = 4) -> list[str]:
    """Closest valid choices for a mistyped ``name``: prefix and substring matches first, then fuzzy."""
    options = list(choices)
    lowered = name.lower()
    contained = [c for c in options if lowered and (c.lower().startswith(lowered) or lowered in c.lower())]
    fuzzy = difflib.get_close_matches(lowered, [c.lower() for c in options], n=limit, cutoff=0.6)
    by_lower = {c.lower(): c for c in options}
    ranked = sorted(contained, key=lambda c: (not c.lower().startswith(lowered), len(c), c))
    ranked += [by_lower[f] for f in fuzzy if by_lower[f] not in ranked]
    return ranked[:limit]
