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
74    an output could not be written: disk full, quota, I/O error (EX_IOERR of sysexits.h);
      an output path that cannot be created (no such directory, read-only, permission) is exit 2
101   internal error (a bug: the traceback is shown with ``--debug``)
====  =====================================================================================
"""

from __future__ import annotations

import difflib
import errno
from collections.abc import Iterable
from enum import IntEnum
from typing import Any


class ExitCode(IntEnum):
    OK = 0
    NEGATIVE = 1
    BAD_INPUT = 2
    MISSING_COMPONENT = 3
    IO_ERROR = 74
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


class OutputError(MfukitError):
    """The disk refused an output (full, over quota, I/O error): exit 74, EX_IOERR of sysexits.h."""

    exit_code = ExitCode.IO_ERROR


_DEVICE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EFBIG})


def from_os_error(error: OSError, *, stream: str = "standard output") -> MfukitError:
    """An OSError that reached the command line as an error naming the path (``stream`` when it has
    none, as when stdout is on a full disk): a full disk or an I/O error is an :class:`OutputError`
    (exit 74); anything else (no such directory, read-only, permission) a bad path, exit 2."""
    path = error.filename if error.filename is not None else stream
    reason = error.strerror or str(error)
    if error.errno in _DEVICE_ERRNOS:
        return OutputError(
            f"cannot write {path}: {reason}",
            hint="free space (or quota) on that filesystem, or write elsewhere",
        )
    return InputError(
        f"cannot use {path}: {reason}",
        hint="give a path in a directory that exists and that you can write to",
    )


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
