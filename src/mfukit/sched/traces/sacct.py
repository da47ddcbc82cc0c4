"""Slurm accounting: ``sacct -P`` (``|``-separated, with its header line) and ``sacct --json``.

One row per allocation (run sacct with ``-X``; step rows such as ``12.batch`` are skipped) and, with
``-D``, one row per attempt of a requeued job. Wanted ``-P`` columns (any order, found by name):
JobID, Submit, Eligible, Start, End, ElapsedRaw, NNodes, AllocTRES (or ReqTRES), TimelimitRaw (or
Timelimit); optional: Partition, Account, User, QOS, State, NodeList, Flags. A command that captures
all of them::

    sacct -a -X -D -P -S <start> -E <end> --format=JobID,JobName,Partition,Account,User,QOS,State,\\
ExitCode,Submit,Eligible,Start,End,ElapsedRaw,NNodes,AllocTRES,NodeList,TimelimitRaw,Priority,Flags

Every attempt keeps what really happened (start, end, state, nodes, SchedBackfill) for the analytics;
for a simulation each job is submitted when it became eligible, runs as long as its last attempt ran,
and keeps its time limit, partition, QOS and user. This module parses one field at a time (the
``--json`` reader, and the ``-P`` reader's values in an unusual spelling);
:mod:`~mfukit.sched.traces.sacct_parsable` reads ``-P`` text a column at a time, and
:mod:`~mfukit.sched.traces.attempts` turns both into attempts and jobs.
"""

from __future__ import annotations

import calendar
import datetime
import functools
import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from mfukit.errors import InputError
from mfukit.sched.job import COMPLETED
from mfukit.sched.traces.attempts import STATE_CODE, Attempts, Fields, Strings
from mfukit.sched.traces.columns import integers
from mfukit.sched.traces.common import MAX_TIME_S, Rows, TraceRead, normalize_state, parse_timestamp
from mfukit.sched.traces.hostlists import expand_hostlist
from mfukit.sched.traces.shape import JobFactory

ALIASES: dict[str, tuple[str, ...]] = {
    "id": ("jobid",),
    "partition": ("partition",),
    "account": ("account",),
    "user": ("user",),
    "qos": ("qos",),
    "state": ("state",),
    "submit": ("submit",),
    "eligible": ("eligible",),
    "start": ("start",),
    "end": ("end",),
    "elapsed": ("elapsedraw",),
    "nodes": ("nnodes",),
    "tres": ("alloctres", "reqtres"),
    "nodelist": ("nodelist",),
    "limit_min": ("timelimitraw",),
    "limit": ("timelimit",),
    "flags": ("flags",),
}
_GPU_TRES = re.compile(r"(?:^|,)gres/gpu=(\d+)")
_GPU_TRES_TYPED = re.compile(r"(?:^|,)gres/gpu:[^=,]+=(\d+)")
_LEADING_NUMBER = re.compile(r"\d+")


def gpus_in_tres(tres: str) -> int:
    """GPUs in a TRES string (``billing=3,cpu=3,gres/gpu:h100=24,gres/gpu=24,node=3`` -> 24)."""
    match = _GPU_TRES.search(tres) or _GPU_TRES_TYPED.search(tres)
    return int(match.group(1)) if match else 0


def slurm_duration_s(text: str) -> float | None:
    """A Slurm time (``[D-]HH:MM:SS``, ``MM:SS``, minutes) in seconds; None for UNLIMITED/unknown."""
    value = text.strip()
    if not value or value.upper() in {"UNLIMITED", "PARTITION_LIMIT", "INVALID", "NONE"}:
        return None
    days, _, clock = value.rpartition("-")
    parts = [float(p) for p in clock.split(":")]
    if len(parts) == 1:
        seconds = parts[0] * 60.0  # a bare number is minutes
    elif len(parts) == 2:
        seconds = parts[0] * 60.0 + parts[1]
    else:
        seconds = parts[0] * 3600.0 + parts[1] * 60.0 + parts[2]
    total = seconds + (float(days) * 86400.0 if days else 0.0)
    if not (math.isfinite(total) and total >= 0):
        raise ValueError(f"time limit {text!r} is not a duration")
    return total


def raw_limit_s(minutes: str) -> float | None:
    """TimelimitRaw (whole minutes) in seconds; None when it is not a number (Timelimit decides)."""
    return float(minutes) * 60.0 if minutes.isdigit() else None


def job_number(job_id: str, line: int) -> int:
    """The number a JobID starts with (``123_4`` -> 123), else ``line`` (also for a number of more
    digits than int() reads)."""
    digits = _LEADING_NUMBER.match(job_id)
    try:
        return int(digits.group(0)) if digits else line
    except ValueError:
        return line


def is_number(job_id: str, number: int) -> bool:
    """Whether ``job_id`` is ``number`` as Python prints it, within int64: the number alone tells
    such JobIDs apart."""
    return number < 2**63 and str(number) == job_id


def state_code(text: str) -> int:
    """The row's state (an unknown spelling counts as COMPLETED), as a code in attempts.STATES."""
    return STATE_CODE[normalize_state(text) or COMPLETED]


def started_by_backfill(flags: str) -> bool:
    return "SchedBackfill" in flags or "STARTED_ON_BACKFILL" in flags  # the -P and --json spellings


@functools.lru_cache(maxsize=1 << 12)
def _day_s(date: str) -> float:
    """Epoch seconds of a ``YYYY-MM-DD`` day at 00:00 UTC (a trace spans a few thousand days at most)."""
    return calendar.timegm(datetime.date.fromisoformat(date).timetuple())


def sacct_time(text: str) -> float | None:
    """sacct's ``YYYY-MM-DDTHH:MM:SS`` (UTC when the site prints naive times) by slicing, with the day
    cached; any other spelling (epoch, a zone, Unknown) goes through parse_timestamp."""
    if len(text) == 19 and text[10] == "T" and text[13] == ":" and text[16] == ":":
        try:
            hours, minutes, seconds = int(text[11:13]), int(text[14:16]), int(text[17:19])
            if hours < 24 and minutes < 60 and seconds < 60:
                return _day_s(text[:10]) + hours * 3600.0 + minutes * 60.0 + seconds
        except ValueError:
            pass  # parse_timestamp names the field
    return parse_timestamp(text)


def count(text: str, column: str) -> float:
    """A non-negative finite number from a numeric column; anything else is a ValueError naming it."""
    value = float(text)
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{column} {text!r} is not a non-negative number")
    return value


def _number(value: Any) -> float | None:
    """A number from sacct --json, which wraps some in {"set", "infinite", "number"} since 23.02."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    if not (math.isfinite(number) and abs(number) <= MAX_TIME_S):  # a count or a time: both far below
        raise ValueError(f"{value!r} is not a finite number within +-{MAX_TIME_S:g}")
    return number


def _gpus_json(tres: Any) -> int:
    for item in tres or []:
        if item.get("type") == "gres" and str(item.get("name", "")).split(":")[0] == "gpu":
            return int(_number(item.get("count")) or 0)
    return 0


def read_sacct_json(path: Path, factory: JobFactory, rows: Rows) -> TraceRead:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"cannot read the trace: {error}", source=str(path)) from None
    except json.JSONDecodeError as error:
        raise InputError(f"malformed JSON at line {error.lineno}: {error.msg}", source=str(path)) from None
    except RecursionError:
        raise InputError(
            "nests arrays or objects too deeply to be sacct --json output", source=str(path)
        ) from None
    if not isinstance(document, dict) or not isinstance(document.get("jobs"), list):
        raise InputError("is not `sacct --json` output (no top-level 'jobs' list)", source=str(path))
    attempts = Attempts(factory, rows)
    entries: list[dict[str, Any] | str] = []
    for index, item in enumerate(document["jobs"], start=1):
        try:
            entries.append(_json_entry(item))
        except (AttributeError, TypeError, ValueError, OverflowError) as error:
            entries.append(f"job entry {index}: {error}")
    attempts.add(_json_fields(entries, attempts.strings))
    return attempts.finish("sacct-json")


def _json_entry(item: Any) -> dict[str, Any]:
    """One job entry's fields (raises where one is not what sacct writes)."""
    times = item.get("time", {})
    state = item.get("state", {}).get("current", "")
    if isinstance(state, list):
        state = state[0] if state else ""
    tres = item.get("tres", {})
    limit_min = _number(times.get("limit"))
    start = _number(times.get("start"))
    end = _number(times.get("end"))
    return {
        "id": str(item.get("job_id")) + (f"_{item['array']['task_id']}" if _array_task(item) else ""),
        "partition": item.get("partition", ""),
        "account": item.get("account", ""),
        "user": item.get("user", ""),
        "qos": item.get("qos", ""),
        "state": str(state),
        "submit": _number(times.get("submission")),
        "eligible": _number(times.get("eligible")),
        "start": start if start else None,
        "end": end if end else None,
        "elapsed": _number(times.get("elapsed")),
        "nodes": int(_number(item.get("allocation_nodes")) or 0),
        "gpus": _gpus_json(tres.get("allocated")) or _gpus_json(tres.get("requested")),
        "nodelist": str(item.get("nodes") or ""),
        "node_names": expand_hostlist(str(item.get("nodes") or "")),  # a bad list is a bad entry
        "limit_s": limit_min * 60.0 if limit_min else None,
        "flags": ",".join(item.get("flags", [])),
    }


def _json_fields(entries: list[dict[str, Any] | str], strings: Strings) -> Fields:
    """The entries as one batch of fields (an entry that did not parse: its error, zeros elsewhere)."""
    good = [entry if isinstance(entry, dict) else {} for entry in entries]

    def times(key: str) -> np.ndarray[Any, np.dtype[np.float64]]:
        return np.array([math.nan if e.get(key) is None else e[key] for e in good], dtype=np.float64)

    names = [str(e.get("id", "")) for e in good]
    numbers = [job_number(name, row) for row, name in enumerate(names, start=1)]
    named = {
        row: name for row, (name, n) in enumerate(zip(names, numbers, strict=True)) if not is_number(name, n)
    }
    return Fields(
        line=np.arange(1, len(entries) + 1, dtype=np.int64),
        errors={row: entry for row, entry in enumerate(entries) if isinstance(entry, str)},
        step=np.array(["." in name for name in names], dtype=bool),
        job_id=integers(numbers),
        numbered=np.array([row not in named for row in range(len(names))], dtype=bool),
        names=named,
        state=np.array([state_code(str(e.get("state") or "")) for e in good], dtype=np.int8),
        gpus=integers([int(e.get("gpus") or 0) for e in good]),
        nodes=np.array([int(e.get("nodes") or 0) for e in good], dtype=np.float64),
        submit=times("submit"),
        eligible=times("eligible"),
        start=times("start"),
        end=times("end"),
        elapsed=times("elapsed"),
        limit_s=times("limit_s"),
        user=np.array(
            [strings.code(str(e.get("user") or e.get("account") or "")) for e in good], dtype=np.int32
        ),
        partition=np.array([strings.code(str(e.get("partition") or "batch")) for e in good], dtype=np.int32),
        qos=np.array([strings.code(str(e.get("qos") or "normal")) for e in good], dtype=np.int32),
        nodelist=pa.array(
            [_utf8(str(e.get("nodelist", ""))).encode() for e in good], pa.binary()
        ).dictionary_encode(),
        backfilled=np.array([started_by_backfill(str(e.get("flags", ""))) for e in good], dtype=bool),
    )


def _utf8(text: str) -> str:
    """``text`` with any lone surrogate (JSON may escape one: ``"\\ud800"``) as U+FFFD, for Arrow."""
    return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def _array_task(item: dict[str, Any]) -> bool:
    task = _number((item.get("array") or {}).get("task_id"))
    return task is not None
