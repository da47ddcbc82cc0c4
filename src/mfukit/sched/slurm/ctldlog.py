"""What a real slurmctld decided, read from its log (Slurm 22.05 with ``SlurmctldDebug=debug`` and
``DebugFlags=Backfill,TraceJobs``; :func:`mfukit.sched.slurm.replay.trace_scheduler` turns them on).

Lines read (all others are ignored)::

    [..T..] debug:  sched: Running job scheduler for full queue.          a main pass begins
    [..T..] sched: Allocate JobId=4 NodeList=gpu01 #CPUs=1 Partition=prio  ... and starts a job
    [..T..] sched/backfill: _attempt_backfill: beginning                   a backfill cycle begins
    [..T..] sched/backfill: _attempt_backfill: BACKFILL: test for JobId=21 Prio=950 ...
    [..T..] sched/backfill: _start_job: Started JobId=21 in prio on gpu07
    [..T..] sched/backfill: _attempt_backfill: BACKFILL: JobId=3 overlaps with existing reservation ...
    [..T..] sched/backfill: _attempt_backfill: BACKFILL: Try later JobId=79 later_start ...
    [..T..] sched/backfill: _dump_job_sched: JobId=2 to start at T1, end at T2 on nodes gpu[03,05-07] ...
    [..T..] sched/backfill: _attempt_backfill: completed testing 23(23) jobs, usec=143840
    [..T..] _job_complete: JobId=26 done
    [..T..] TRACE_JOBS: cleanup_completing: JobId=26                       (DebugFlags=TraceJobs)

Times are the log's local time stamps, read as sacct's are (naive times as UTC: the offset of any
time zone is a whole number of minutes, so whole-minute and 30 s phases are kept). Events in the same
millisecond keep the log's order: each is placed a microsecond after the one before it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from mfukit.errors import InputError
from mfukit.sched.policies.slurm import BACKFILL, MAIN
from mfukit.sched.traces.common import parse_timestamp
from mfukit.sched.traces.hostlists import expand_hostlist

_STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)\] (.*)$")
_MAIN = re.compile(r"sched: Running job scheduler for (?:full queue|default depth)\.")
_ALLOCATE = re.compile(r"sched: Allocate JobId=(\d+) NodeList=(\S+)")
_BACKFILL = re.compile(r"_attempt_backfill: beginning")
_TEST = re.compile(r"_attempt_backfill: BACKFILL: test for JobId=(\d+) ")
_STARTED = re.compile(r"_start_job: Started JobId=(\d+) in \S+ on (\S+)")
_PLANNED = re.compile(r"_dump_job_sched: JobId=(\d+) to start at (\S+), end at (\S+) on nodes (\S+) ")
_RETRY = re.compile(r"BACKFILL: (?:JobId=(\d+) overlaps with existing reservation|Try later JobId=(\d+) )")
_END = re.compile(r"_attempt_backfill: completed testing")
_DONE = re.compile(r"_job_complete: JobId=(\d+) done")
_RELEASED = re.compile(r"TRACE_JOBS: cleanup_completing: JobId=(\d+)")
STEP_S = 1e-6


@dataclass
class LoggedPass:
    """One pass of the main scheduler or of backfill, and what it did."""

    at_s: float
    kind: str
    line: int = 0  # where it begins in the log (1-based)
    job_clock_s: dict[int, list[float]] = field(default_factory=dict)  # when it looked at each job
    started: dict[int, tuple[str, ...]] = field(default_factory=dict)
    planned: dict[int, tuple[float, float, tuple[str, ...]]] = field(default_factory=dict)
    end_s: float | None = None


@dataclass
class ControllerLog:
    passes: list[LoggedPass]
    started_s: dict[int, float]  # job -> when it was allocated
    completed_s: dict[int, float]  # job -> when slurmctld saw it end
    released_s: dict[int, float]  # job -> when its nodes stopped COMPLETING

    def started_in(self, job_id: int) -> LoggedPass | None:
        """The pass that started ``job_id``."""
        return next((p for p in self.passes if job_id in p.started), None)


_READ = (_MAIN, _ALLOCATE, _BACKFILL, _TEST, _RETRY, _STARTED, _PLANNED, _END, _DONE, _RELEASED)


def scheduler_lines(text: str) -> list[str]:
    """The lines of a slurmctld log that :func:`read_controller_log` reads (with their newlines)."""
    return [line for line in text.splitlines(keepends=True) if any(kind.search(line) for kind in _READ)]


def _nodes(hosts: str, path: Path, line: int) -> tuple[str, ...]:
    try:
        return expand_hostlist(hosts)
    except ValueError as error:
        raise InputError(f"line {line}: {error}", source=str(path)) from None


def read_controller_log(path: Path) -> ControllerLog:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as error:
        raise InputError(f"cannot read the slurmctld log: {error}", source=str(path)) from None
    passes: list[LoggedPass] = []
    started: dict[int, float] = {}
    completed: dict[int, float] = {}
    released: dict[int, float] = {}
    last = float("-inf")
    for number, line in enumerate(lines, start=1):
        match = _STAMP.match(line)
        if match is None:
            continue
        text = match.group(2)
        hit = next(((kind, m) for kind in _READ if (m := kind.search(text)) is not None), None)
        if hit is None:
            continue
        stamp = parse_timestamp(match.group(1))
        assert stamp is not None
        last = at = max(stamp, last + STEP_S)
        kind, found = hit
        current = passes[-1] if passes else None
        if kind is _MAIN or kind is _BACKFILL:
            passes.append(LoggedPass(at, MAIN if kind is _MAIN else BACKFILL, number))
        elif kind is _DONE:
            completed[int(found.group(1))] = at
        elif kind is _RELEASED:
            released[int(found.group(1))] = at
        elif current is None:
            continue  # the pass began before the log does
        elif kind is _ALLOCATE or kind is _STARTED:
            job_id = int(found.group(1))
            current.started[job_id] = _nodes(found.group(2), path, number)
            current.job_clock_s.setdefault(job_id, [at])
            started[job_id] = at
        elif kind is _TEST:
            current.job_clock_s[int(found.group(1))] = [at]
        elif kind is _RETRY:
            current.job_clock_s.setdefault(int(found.group(1) or found.group(2)), [at]).append(at)
        elif kind is _END:
            current.end_s = at
        else:
            begin, end = parse_timestamp(found.group(2)), parse_timestamp(found.group(3))
            assert begin is not None and end is not None
            current.planned[int(found.group(1))] = (begin, end, _nodes(found.group(4), path, number))
    if not passes:
        raise InputError(
            "no scheduler pass found: is it a slurmctld log with SlurmctldDebug=debug and DebugFlags=Backfill?",
            source=str(path),
        )
    return ControllerLog(passes, started, completed, released)
