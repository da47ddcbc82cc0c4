"""What every trace reader shares: the result type, bad-row handling, timestamps and states.

A bad row stops the read with an :class:`~mfukit.errors.InputError` naming the file and line, unless
the user asked to skip bad rows; then each is skipped with a warning (line number and reason). Rows
that are fine but describe nothing to schedule (job steps, CPU-only jobs, jobs that never ran) are
counted in a note, not treated as errors.
"""

from __future__ import annotations

import csv
import functools
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from mfukit.errors import InputError
from mfukit.sched import job as states
from mfukit.sched.job import Job

MAX_LISTED = 10
MAX_TIME_S = 1e11
"""Largest time a trace may give (seconds: epoch year ~5100, or ~3,000 years after a trace's start):
beyond it a number is a corrupted field, and sums over such times overflow or lose every second."""


@dataclass
class TraceRead:
    jobs: Sequence[Job]
    source: str
    format: str
    warnings: list[str] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> rows, for rows that are not errors
    attempts: Sequence[Job] | None = None  # sacct: every attempt (row) with what really happened


class Rows:
    """Bad-row policy for one file: raise at the first, or skip each with a warning."""

    def __init__(self, source: str, skip_bad: bool) -> None:
        self.source = source
        self.skip_bad = skip_bad
        self.bad: list[str] = []
        self.skipped: dict[str, int] = {}

    def reject(self, line: int, message: str) -> None:
        if not self.skip_bad:
            raise InputError(
                f"line {line}: {message}",
                source=self.source,
                hint="fix the row, or pass --skip-bad-rows to skip bad rows with a warning",
            )
        self.bad.append(f"line {line}: {message}")

    def skip(self, reason: str, count: int = 1) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + count

    def finish(self, jobs: Sequence[Job], fmt: str, assumptions: list[str]) -> TraceRead:
        warnings = []
        if self.bad:
            listed = "; ".join(self.bad[:MAX_LISTED])
            more = f"; and {len(self.bad) - MAX_LISTED} more" if len(self.bad) > MAX_LISTED else ""
            warnings.append(f"{self.source}: skipped {len(self.bad)} bad row(s): {listed}{more}")
        if not jobs:
            raise InputError(
                "no job in the trace could be scheduled",
                source=self.source,
                hint=f"rows skipped: {self.skipped or 'none'}; bad rows: {len(self.bad)}",
            )
        return TraceRead(jobs, self.source, fmt, warnings, assumptions, dict(self.skipped))


def parse_timestamp(text: str) -> float | None:
    """Seconds from an epoch number or an ISO date-time (naive times are read as UTC); None if unset."""
    value = text.strip()
    if not value or value in {"Unknown", "None", "N/A", "nan", "NaN", "-1"}:
        return None
    try:
        number = float(value)
    except ValueError:
        pass
    else:
        if math.isnan(number):
            return None
        if not abs(number) <= MAX_TIME_S:
            raise ValueError(f"time {value!r} is out of range (|t| <= {MAX_TIME_S:g} s)")
        return number
    try:
        moment = datetime.fromisoformat(value.replace(" ", "T"))
    except ValueError:
        raise ValueError(f"not a time: {value!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


_STATE_WORDS = {
    "COMPLETED": states.COMPLETED,
    "CD": states.COMPLETED,
    "PASS": states.COMPLETED,
    "TERMINATED": states.COMPLETED,
    "SUCCEEDED": states.COMPLETED,
    "FAILED": states.FAILED,
    "F": states.FAILED,
    "FAIL": states.FAILED,
    "TIMEOUT": states.TIMEOUT,
    "TO": states.TIMEOUT,
    "CANCELLED": states.CANCELLED,
    "CA": states.CANCELLED,
    "KILLED": states.CANCELLED,
    "NODE_FAIL": states.NODE_FAIL,
    "NF": states.NODE_FAIL,
    "PREEMPTED": states.PREEMPTED,
    "PR": states.PREEMPTED,
    "OUT_OF_MEMORY": states.OUT_OF_MEMORY,
    "OOM": states.OUT_OF_MEMORY,
    "RUNNING": states.RUNNING,
    "R": states.RUNNING,
    "PENDING": states.PENDING,
    "PD": states.PENDING,
    "REQUEUED": states.PENDING,
}


def normalize_state(text: str) -> str | None:
    """A sacct-style state from any trace's spelling (``CANCELLED by 0`` -> CANCELLED); None if unknown."""
    word = text.strip().split(" ")[0].upper() if text.strip() else ""
    return _STATE_WORDS.get(word)


def csv_records(path: Path, delimiter: str = ",") -> Iterator[tuple[int, list[str]]]:
    """(line number, fields) of every non-empty row of a delimited text file."""
    try:
        with path.open(encoding="utf-8", errors="replace", newline="") as handle:
            reader = csv.reader(handle, delimiter=delimiter)
            try:
                for fields in reader:
                    if fields and any(field.strip() for field in fields):
                        yield reader.line_num, fields
            except csv.Error as error:  # a field past the csv module's limit (128 KiB), a NUL byte
                raise InputError(
                    f"line {reader.line_num}: not a CSV row: {error}", source=str(path)
                ) from None
    except OSError as error:
        raise InputError(f"cannot read the trace: {error}", source=str(path)) from None


def column_index(header: list[str], aliases: dict[str, tuple[str, ...]]) -> dict[str, int]:
    """Map each wanted column (key) to its position in ``header``, trying each alias in turn."""
    lowered = [name.strip().lower() for name in header]
    found = {}
    for key, names in aliases.items():
        for name in names:
            if name in lowered:
                found[key] = lowered.index(name)
                break
    return found


def named_records(
    path: Path,
    aliases: dict[str, tuple[str, ...]],
    required: Callable[[set[str]], list[str]],
    expected: str,
    delimiter: str = ",",
) -> Iterator[tuple[int, Callable[[str], str]]]:
    """(line number, column getter) for every row after a header line that names the columns.

    ``required(found)`` lists what the header lacks; a header that lacks anything, or a file without
    one, is an InputError that says what was ``expected``.
    """
    columns: dict[str, int] | None = None
    for line_no, fields in csv_records(path, delimiter):
        if columns is None:
            columns = column_index(fields, aliases)
            lacking = required(set(columns))
            if lacking:
                raise InputError(
                    f"line {line_no}: the header lacks {', '.join(lacking)}",
                    source=str(path),
                    expected=expected,
                )
            continue
        yield line_no, functools.partial(cell, columns, fields)
    if columns is None:
        raise InputError("the file is empty", source=str(path), expected=expected)


def cell(columns: dict[str, int], fields: list[str], key: str) -> str:
    """The stripped value of column ``key`` in ``fields`` ("" when the column is absent or short)."""
    position = columns.get(key)
    return fields[position].strip() if position is not None and position < len(fields) else ""
