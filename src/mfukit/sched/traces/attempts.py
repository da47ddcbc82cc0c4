"""sacct attempts in columns: what each row becomes, decided for a whole batch of rows at once.

A batch is the parsed fields of many rows (:class:`Fields`: numpy arrays and Arrow strings, one entry
per row). In order, a row is: a bad row if a field does not parse; a job step (``12.batch``, skipped);
skipped if it has no GPUs; a bad row if it has neither a Submit nor an Eligible time; skipped if it
never started; a bad row if it asks for more GPUs than the cluster has; else an attempt. Batches come
in file order and bad rows are reported in line order, so the read stops at the first bad row (or
skips each with a warning) as a row-by-row reader would.

Attempts stay in columns: the :class:`~mfukit.sched.job.Job` objects, and the node names in them, are
built when a consumer first looks at ``jobs`` or ``attempts`` (their length needs no objects). Attempts
of one JobID (sacct -D: a requeued job) fold into one job: its last attempt, counting the restarts,
submitted when the first was and first started when the first did.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, overload

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from mfukit.sched.job import (
    CANCELLED,
    COMPLETED,
    ENDED_STATES,
    FAILED,
    NODE_FAIL,
    OUT_OF_MEMORY,
    PENDING,
    PREEMPTED,
    RUNNING,
    TIMEOUT,
    Job,
)
from mfukit.sched.traces.columns import Bools, Codes, Floats, Ints
from mfukit.sched.traces.common import Rows, TraceRead
from mfukit.sched.traces.hostlists import expand_hostlist
from mfukit.sched.traces.shape import JobFactory

STATES = (COMPLETED, FAILED, TIMEOUT, CANCELLED, NODE_FAIL, PREEMPTED, OUT_OF_MEMORY, RUNNING, PENDING)
"""The states a row can be in (codes in :attr:`Fields.state`)."""
STATE_CODE = {state: code for code, state in enumerate(STATES)}
STEP, NO_GPUS, NEVER_STARTED = "job step (use sacct -X)", "no GPUs allocated", "never started (pending)"
# what a row becomes, by precedence: each only where none after it applies
_ATTEMPT, _TOO_LARGE, _NEVER_STARTED, _NO_TIME, _NO_GPUS, _STEP, _BAD = range(7)
_SKIPPED = {_STEP: STEP, _NO_GPUS: NO_GPUS, _NEVER_STARTED: NEVER_STARTED}


class Strings:
    """Distinct strings (users, partitions, QOS) and their codes; "" is code 0."""

    def __init__(self) -> None:
        self.values: list[str] = [""]
        self._codes: dict[str, int] = {"": 0}

    def code(self, value: str) -> int:
        code = self._codes.get(value)
        if code is None:
            code = self._codes[value] = len(self.values)
            self.values.append(value)
        return code


@dataclass
class Fields:
    """The fields of a batch of rows, one entry per row (NaN: a time or number the row does not give)."""

    line: Ints  # line of the -P file, or entry of the --json list
    errors: dict[int, str]  # row -> why it is a bad row (its first field that does not parse)
    step: Bools
    job_id: npt.NDArray[Any]  # JobID's leading number, else the line (int64, or object for larger)
    numbered: Bools  # JobID is job_id as Python prints it: job_id alone tells JobIDs apart
    names: dict[int, str]  # row -> JobID as written, stripped, where it is not numbered
    state: npt.NDArray[np.int8]  # code in STATES
    gpus: npt.NDArray[Any]
    nodes: Floats  # NNodes as float() reads it (a job's nodes: int() of it), 0 if not given
    submit: Floats
    eligible: Floats
    start: Floats
    end: Floats
    elapsed: Floats
    limit_s: Floats
    user: Codes  # in the read's Strings: User, else Account
    partition: Codes
    qos: Codes
    nodelist: pa.Array  # NodeList as written (dictionary of binary); a bad one is in errors
    backfilled: Bools


class Attempts:
    """Settles batches of rows, in file order, into the attempts of one read."""

    def __init__(self, factory: JobFactory, rows: Rows) -> None:
        self.factory = factory
        self.rows = rows
        self.strings = Strings()
        self._columns: list[dict[str, Any]] = []  # the attempts of each batch
        self._attempts = 0
        self._named: dict[str, int] = {}  # JobIDs that are not their number -> key
        self._names: list[str] = []  # of the attempts whose JobID is not its number, in order

    def add(self, fields: Fields, steps: Ints | None = None) -> None:
        """Settle a batch; ``steps``: the lines of job steps its reader dropped before parsing them."""
        outcome = np.full(fields.line.size, _ATTEMPT, dtype=np.int8)
        outcome[np.asarray(fields.gpus > self.factory.cluster_gpus, dtype=bool)] = _TOO_LARGE
        outcome[(fields.state == STATE_CODE[PENDING]) | np.isnan(fields.start)] = _NEVER_STARTED
        outcome[np.isnan(fields.submit) & np.isnan(fields.eligible)] = _NO_TIME
        outcome[np.asarray(fields.gpus <= 0, dtype=bool)] = _NO_GPUS
        outcome[fields.step] = _STEP
        outcome[np.fromiter(fields.errors, dtype=np.int64, count=len(fields.errors))] = _BAD
        bad = [(int(fields.line[row]), why) for row, why in fields.errors.items()]
        bad += [
            (int(at), "has neither a Submit nor an Eligible time") for at in fields.line[outcome == _NO_TIME]
        ]
        for row in np.flatnonzero(outcome == _TOO_LARGE).tolist():
            bad.append(
                (int(fields.line[row]), f"asks for {fields.gpus[row]} GPUs, more than the cluster has")
            )
        for at, why in sorted(bad):
            self.rows.reject(at, why)
        skipped = [(fields.line[outcome == kind], reason) for kind, reason in _SKIPPED.items()]
        skipped.append((steps if steps is not None else np.zeros(0, dtype=np.int64), STEP))
        for lines, reason in sorted((s for s in skipped if s[0].size), key=lambda s: int(s[0][0])):
            self.rows.skip(reason, int(lines.size))
        chosen = np.flatnonzero(outcome == _ATTEMPT)
        columns = _attempt_columns(fields, chosen)
        named = np.flatnonzero(~fields.numbered[chosen])
        if named.size:  # keyed by their text, below every number
            texts = [fields.names[row] for row in chosen[named].tolist()]
            columns["key"][named] = [-1 - self._named.setdefault(text, len(self._named)) for text in texts]
            self._names += texts
        self._columns.append(columns)
        self._attempts += chosen.size
        self.factory.missing_limits += int(np.isnan(columns["limit_s"]).sum())

    def finish(self, fmt: str) -> TraceRead:
        """The read: its attempts and jobs are built on first use (the count of attempts needs none,
        that of jobs one sort of the attempts' keys)."""
        built = _Built(self.factory, self.strings.values, self._names, self._columns)
        count = self._attempts
        jobs = LazyJobs(built.jobs, lambda: built.fold()[2].size, any_job=count > 0)
        read = self.rows.finish(jobs, fmt, self.factory.assumptions())  # raises if there is none
        read.attempts = LazyJobs(built.attempts, lambda: count, any_job=count > 0)
        return read


_COLUMNS = (
    "job_id",
    "key",
    "queued",
    "start",
    "end",
    "run_s",
    "limit_s",
    "gpus",
    "nodes",
    "user",
    "partition",
    "qos",
    "state",
    "backfilled",
)


def _attempt_columns(fields: Fields, rows: Ints) -> dict[str, Any]:
    """The columns an attempt keeps: queued from eligibility (else submission), run time from
    ElapsedRaw (else end - start, else 0), at least 1 s; a key equal for attempts of one JobID (its
    number; the caller keys the other JobIDs)."""
    start, end, elapsed = fields.start[rows], fields.end[rows], fields.elapsed[rows]
    ran = np.where(np.isnan(elapsed), np.where(np.isnan(end), 0.0, end - start), elapsed)
    eligible = fields.eligible[rows]
    return {
        "job_id": fields.job_id[rows],
        "key": np.where(fields.numbered[rows], fields.job_id[rows], 0).astype(np.int64),
        "queued": np.where(np.isnan(eligible), fields.submit[rows], eligible),
        "start": start,
        "end": end,
        "run_s": np.maximum(ran, 1.0),
        "limit_s": fields.limit_s[rows],
        "gpus": fields.gpus[rows],
        "nodes": fields.nodes[rows],
        "user": fields.user[rows],
        "partition": fields.partition[rows],
        "qos": fields.qos[rows],
        "state": fields.state[rows],
        "backfilled": fields.backfilled[rows],
        "nodelist": fields.nodelist.take(pa.array(rows)),
    }


def _fold(key: Ints) -> tuple[Ints, Ints, Ints]:
    """(restarts, first attempt, last attempt of each job) of attempts by JobID key: a job's attempts
    in file order, jobs in the order of their first attempts."""
    order = np.argsort(key, kind="stable")  # attempts by job, each job's in file order
    ordered = key[order]
    opens = np.r_[True, ordered[1:] != ordered[:-1]] if key.size else np.zeros(0, dtype=bool)
    starts = np.flatnonzero(opens)
    group = np.cumsum(opens) - 1  # each sorted attempt's job
    restarts = np.empty(key.size, dtype=np.int64)
    restarts[order] = np.arange(key.size) - starts[group]
    first = np.empty(key.size, dtype=np.int64)
    first[order] = order[starts][group]
    lasts = order[np.r_[starts[1:], key.size] - 1] if key.size else starts
    return restarts, first, lasts[np.argsort(order[starts], kind="stable")]


class _Built:
    """The attempts of a read in columns, one set per batch, and what is built from them on first use:
    the columns joined, the fold by JobID, the Job objects."""

    def __init__(
        self, factory: JobFactory, strings: list[str], names: list[str], batches: list[dict[str, Any]]
    ) -> None:
        self.factory = factory
        self.strings = strings
        self.names = names
        self.batches = batches
        self._columns: dict[str, Any] | None = None
        self._fold: tuple[Ints, Ints, Ints] | None = None
        self._attempts: list[Job] | None = None

    def columns(self) -> dict[str, Any]:
        if self._columns is None:
            self._columns = {key: np.concatenate([c[key] for c in self.batches]) for key in _COLUMNS}
            self._columns["nodelist"] = pa.chunked_array([c["nodelist"] for c in self.batches])
        return self._columns

    def fold(self) -> tuple[Ints, Ints, Ints]:
        if self._fold is None:
            self._fold = _fold(self.columns()["key"])
        return self._fold

    def attempts(self) -> list[Job]:
        if self._attempts is None:
            self._attempts = list(self._make())
        return self._attempts

    def jobs(self) -> list[Job]:
        attempts = self.attempts()
        return [attempts[row] for row in self.fold()[2].tolist()]

    def _make(self) -> Iterator[Job]:
        c, strings, factory = self.columns(), self.strings, self.factory
        restarts, first, _ = self.fold()
        named = iter(self.names)
        rows = zip(
            c["job_id"].tolist(),
            (c["key"] >= 0).tolist(),
            c["queued"].tolist(),
            c["run_s"].tolist(),
            c["limit_s"].tolist(),
            c["gpus"].tolist(),
            c["nodes"].tolist(),
            c["user"].tolist(),
            c["partition"].tolist(),
            c["qos"].tolist(),
            c["state"].tolist(),
            c["start"].tolist(),
            c["end"].tolist(),
            c["queued"][first].tolist(),
            c["start"][first].tolist(),
            restarts.tolist(),
            _nodelists(c["nodelist"]),
            c["backfilled"].tolist(),
            strict=True,
        )
        for (
            job_id, numbered, queued, run_s, limit_s, gpus, nodes, user, partition, qos, state, start, end,
            submit_s, first_start_s, restarts, node_names, backfilled,
        ) in rows:  # fmt: skip
            state_name = STATES[state]
            job = factory.make(
                job_id,
                queued,
                run_s,
                factory.assumed_limit_s(run_s) if math.isnan(limit_s) else limit_s,
                gpus,
                nodes=int(nodes) or None,
                user=strings[user],
                partition=strings[partition],
                qos=strings[qos],
                name=str(job_id) if numbered else next(named),
                exit_state=state_name if state_name in ENDED_STATES else COMPLETED,
            )
            assert job is not None  # a row asking for more GPUs than the cluster has is a bad row
            job.submit_s, job.start_s, job.first_start_s = submit_s, start, first_start_s
            job.restarts = restarts
            job.end_s = None if math.isnan(end) else end
            job.state = state_name if job.end_s is not None else RUNNING
            job.node_names = node_names
            job.backfilled = backfilled
            yield job


def _nodelists(lists: pa.ChunkedArray) -> Iterator[tuple[str, ...]]:
    """Each attempt's node names, from chunks of dictionary-encoded NodeLists (a dictionary may hold
    lists of rows that are no attempts); each distinct list expanded once."""
    expanded: dict[bytes, tuple[str, ...]] = {}
    for chunk in lists.chunks:
        texts = chunk.dictionary.to_pylist()
        for code in chunk.indices.to_pylist():
            text = texts[code]
            names = expanded.get(text)
            if names is None:
                names = expanded[text] = expand_hostlist(text.decode("utf-8", "replace"))
            yield names


class LazyJobs(Sequence[Job]):
    """Jobs that are built on first use; neither ``len`` nor truth builds them."""

    def __init__(self, build: Callable[[], list[Job]], size: Callable[[], int], *, any_job: bool) -> None:
        self._build = build
        self._size = size
        self._any = any_job
        self._jobs: list[Job] | None = None

    def __bool__(self) -> bool:
        return self._any

    def __len__(self) -> int:
        return self._size()

    @overload
    def __getitem__(self, index: int) -> Job: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Job]: ...
    def __getitem__(self, index: int | slice) -> Job | Sequence[Job]:
        return self._built()[index]

    def __iter__(self) -> Iterator[Job]:
        return iter(self._built())

    def _built(self) -> list[Job]:
        if self._jobs is None:
            self._jobs = self._build()
        return self._jobs
