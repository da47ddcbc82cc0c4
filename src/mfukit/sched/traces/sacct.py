"""Slurm accounting: ``sacct -P`` (``|``-separated, with its header line) and ``sacct --json``.

One row per allocation (run sacct with ``-X``; step rows such as ``12.batch`` are skipped) and, with
``-D``, one row per attempt of a requeued job. Wanted ``-P`` columns (any order, found by name):
JobID, Submit, Eligible, Start, End, ElapsedRaw, NNodes, AllocTRES (or ReqTRES), TimelimitRaw (or
Timelimit); optional: JobName, Partition, Account, User, QOS, State, NodeList, Flags. A command that
captures all of them::

    sacct -a -X -D -P -S <start> -E <end> --format=JobID,JobName,Partition,Account,User,QOS,State,\\
ExitCode,Submit,Eligible,Start,End,ElapsedRaw,NNodes,AllocTRES,NodeList,TimelimitRaw,Priority,Flags

Every attempt keeps what really happened (start, end, state, nodes, SchedBackfill) for the analytics;
for a simulation each job is submitted when it became eligible, runs as long as its last attempt ran,
and keeps its time limit, partition, QOS and user.
"""

from __future__ import annotations

import calendar
import datetime
import functools
import json
import math
import re
import sys
from pathlib import Path
from typing import Any

import hostlist

from mfukit.errors import InputError
from mfukit.sched.job import COMPLETED, ENDED_STATES, PENDING, RUNNING, Job
from mfukit.sched.traces.common import (
    MAX_TIME_S,
    Rows,
    TraceRead,
    column_index,
    normalize_state,
    parse_timestamp,
)
from mfukit.sched.traces.shape import JobFactory

ALIASES: dict[str, tuple[str, ...]] = {
    "id": ("jobid",),
    "name": ("jobname",),
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


def gpus_in_tres(tres: str) -> int:
    """GPUs in a TRES string (``billing=3,cpu=3,gres/gpu:h100=24,gres/gpu=24,node=3`` -> 24)."""
    match = _GPU_TRES.search(tres) or _GPU_TRES_TYPED.search(tres)
    return int(match.group(1)) if match else 0


@functools.lru_cache(maxsize=1 << 16)
def expand_hostlist(text: str) -> tuple[str, ...]:
    """Slurm hostlist to names: ``gpu[01-03,05],login1`` -> gpu01 gpu02 gpu03 gpu05 login1, by
    python-hostlist (the expander Slurm sites use). Cached: a trace names the same few node sets over and
    over, and every job on one set then shares one tuple of interned names. A list that is not a host
    list (``gpu[a-3]``, or one of more than 100,000 names) is a ValueError naming it."""
    value = text.strip()
    if not value or value in {"None assigned", "(null)"}:
        return ()
    try:
        names = hostlist.expand_hostlist(value)
    except hostlist.BadHostlist as error:
        raise ValueError(f"NodeList {value!r} is not a Slurm host list ({error})") from None
    return tuple(sys.intern(name) for name in names)


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


class _Attempts:
    """Collects attempts (rows) and folds them into one job per JobID for simulation."""

    def __init__(self, factory: JobFactory, rows: Rows) -> None:
        self.factory = factory
        self.rows = rows
        self.attempts: list[Job] = []

    def add(self, line: int, record: dict[str, Any]) -> None:
        raw_id = str(record["id"])
        if "." in raw_id:
            self.rows.skip("job step (use sacct -X)")
            return
        state = normalize_state(str(record.get("state") or "")) or COMPLETED
        gpus = int(record.get("gpus") or 0)
        if gpus <= 0:
            self.rows.skip("no GPUs allocated")
            return
        submit, eligible = record.get("submit"), record.get("eligible")
        start, end = record.get("start"), record.get("end")
        if submit is None and eligible is None:
            self.rows.reject(line, "has neither a Submit nor an Eligible time")
            return
        if state == PENDING or start is None:
            self.rows.skip("never started (pending)")
            return
        elapsed = record.get("elapsed")
        if elapsed is None:
            elapsed = (end - start) if end is not None else 0.0
        numeric = re.match(r"\d+", raw_id)
        queued = eligible if eligible is not None else submit
        assert queued is not None
        job = self.factory.make(
            int(numeric.group(0)) if numeric else line,
            queued,
            max(float(elapsed), 1.0),
            record.get("limit_s"),
            gpus,
            nodes=int(record.get("nodes") or 0) or None,
            user=str(record.get("user") or record.get("account") or ""),
            partition=str(record.get("partition") or "batch"),
            qos=str(record.get("qos") or "normal"),
            name=raw_id,
            exit_state=state if state in ENDED_STATES else COMPLETED,
        )
        if job is None:
            self.rows.reject(line, f"asks for {gpus} GPUs, more than the cluster has")
            return
        job.start_s = job.first_start_s = start
        job.end_s = end
        job.state = state if end is not None else RUNNING
        job.node_names = record["node_names"]
        flags = str(record.get("flags") or "")
        job.backfilled = "SchedBackfill" in flags or "STARTED_ON_BACKFILL" in flags  # -P / --json spelling
        self.attempts.append(job)

    def finish(self, fmt: str) -> TraceRead:
        by_id: dict[str, Job] = {}
        for attempt in self.attempts:
            first = by_id.get(attempt.name)
            if first is not None:
                attempt.restarts = first.restarts + 1
                attempt.submit_s = first.submit_s
                attempt.first_start_s = first.first_start_s
            by_id[attempt.name] = attempt
        read = self.rows.finish(list(by_id.values()), fmt, self.factory.assumptions())
        read.attempts = self.attempts
        return read


def read_sacct_parsable(path: Path, factory: JobFactory, rows: Rows) -> TraceRead:
    """Stream the rows: ``sacct -P`` text is ``|``-separated and never quoted, so a row is one split
    (faster than the csv module, and a ``"`` in a job name stays a character). A job step is dropped
    before any field of it is parsed; each attempt keeps only its Job."""
    attempts = _Attempts(factory, rows)
    expected = "sacct -P output with its header (no -n) and --format as in `mfukit sched analyze --help`"
    try:
        handle = path.open(encoding="utf-8", errors="replace", newline="")
    except OSError as error:
        raise InputError(f"cannot read the trace: {error}", source=str(path)) from None
    with handle:
        columns: dict[str, int] | None = None
        for line_no, line in enumerate(handle, start=1):
            fields = line.rstrip("\r\n").split("|")
            if not line.strip():
                continue
            if columns is None:
                columns = column_index(fields, ALIASES)
                lacking = [key for key in ("id", "submit", "start", "tres") if key not in columns]
                if lacking:
                    raise InputError(
                        f"line {line_no}: the header lacks {', '.join(lacking)}",
                        source=str(path),
                        expected=expected,
                    )
                width = max(columns.values()) + 1
                positions = [(key, columns.get(key)) for key in ALIASES]
                continue
            if len(fields) < width:
                fields += [""] * (width - len(fields))
            get = {key: (fields[at].strip() if at is not None else "") for key, at in positions}
            if "." in get["id"]:
                rows.skip("job step (use sacct -X)")
                continue
            try:
                record = _parsable_record(get)
            except ValueError as error:
                rows.reject(line_no, str(error))
                continue
            attempts.add(line_no, record)
        if columns is None:
            raise InputError("the file is empty", source=str(path), expected=expected)
    return attempts.finish("sacct-p")


def _parsable_record(get: dict[str, str]) -> dict[str, Any]:
    limit_min = get["limit_min"]
    limit_s = float(limit_min) * 60.0 if limit_min.isdigit() else slurm_duration_s(get["limit"])
    elapsed = _count(get["elapsed"], "ElapsedRaw") if get["elapsed"] else None
    return {
        "id": get["id"],
        "name": get["name"],
        "partition": sys.intern(get["partition"]),
        "account": sys.intern(get["account"]),
        "user": sys.intern(get["user"]),
        "qos": sys.intern(get["qos"]),
        "state": get["state"],
        "submit": _sacct_time(get["submit"]),
        "eligible": _sacct_time(get["eligible"]),
        "start": _sacct_time(get["start"]),
        "end": _sacct_time(get["end"]),
        "elapsed": elapsed,
        "nodes": int(_count(get["nodes"], "NNodes")) if get["nodes"] else 0,
        "gpus": gpus_in_tres(get["tres"]),
        "node_names": expand_hostlist(get["nodelist"]),
        "limit_s": limit_s,
        "flags": get["flags"],
    }


@functools.lru_cache(maxsize=1 << 12)
def _day_s(date: str) -> float:
    """Epoch seconds of a ``YYYY-MM-DD`` day at 00:00 UTC (a trace spans a few thousand days at most)."""
    return calendar.timegm(datetime.date.fromisoformat(date).timetuple())


def _sacct_time(text: str) -> float | None:
    """sacct's ``YYYY-MM-DDTHH:MM:SS`` (UTC when the site prints naive times) by slicing, with the day
    cached: four of these per row were the reader's largest cost through datetime; any other spelling
    (epoch, a zone, Unknown) goes through parse_timestamp."""
    if len(text) == 19 and text[10] == "T" and text[13] == ":" and text[16] == ":":
        try:
            hours, minutes, seconds = int(text[11:13]), int(text[14:16]), int(text[17:19])
            if hours < 24 and minutes < 60 and seconds < 60:
                return _day_s(text[:10]) + hours * 3600.0 + minutes * 60.0 + seconds
        except ValueError:
            pass  # parse_timestamp names the field
    return parse_timestamp(text)


def _count(text: str, column: str) -> float:
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
    attempts = _Attempts(factory, rows)
    for index, item in enumerate(document["jobs"], start=1):
        try:
            times = item.get("time", {})
            state = item.get("state", {}).get("current", "")
            if isinstance(state, list):
                state = state[0] if state else ""
            tres = item.get("tres", {})
            limit_min = _number(times.get("limit"))
            start = _number(times.get("start"))
            end = _number(times.get("end"))
            record = {
                "id": str(item.get("job_id")) + (f"_{item['array']['task_id']}" if _array_task(item) else ""),
                "name": item.get("name", ""),
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
                "node_names": expand_hostlist(str(item.get("nodes") or "")),
                "limit_s": limit_min * 60.0 if limit_min else None,
                "flags": ",".join(item.get("flags", [])),
            }
        except (AttributeError, TypeError, ValueError, OverflowError) as error:
            rows.reject(index, f"job entry {index}: {error}")
            continue
        attempts.add(index, record)
    return attempts.finish("sacct-json")


def _array_task(item: dict[str, Any]) -> bool:
    task = _number((item.get("array") or {}).get("task_id"))
    return task is not None
