"""The goodput ledger: where the wall-clock time of a run went, from its own event log.

The workers and the launcher of ``mfukit train`` append events (one JSON object per line, written with a
single ``write`` on a file opened in append mode, so concurrent ranks never interleave inside a line) to
``ledger.jsonl``; rank 0 appends one line per step to ``metrics.jsonl``. :func:`account` splits the wall
time of the latest launch into the buckets of Google's goodput taxonomy (ml-goodput-measurement:
productive step time, wasted progress from disruption, infrastructure recovery, checkpoint save time) and
gives the measured ETTR = productive time / wall time (Kokolis et al., HPCA'25: "the ratio of productive
runtime to available wallclock time of a job run").

* productive: the duration of the last execution of every step (the one whose result survived);
* rework: every earlier execution of a step, redone after a restart from an older checkpoint;
* checkpoint blocking: time the training loop waited on saves (the snapshot, or the previous upload);
* recovery: per restart, from the failure (the injected fault or detected hang, a graceful stop, else the
  last event of the failed attempt) to the start of the first resumed step: detection, restart (or a
  requeue's wait), init, load;
* startup: launch to the first step of the first attempt; other: the rest (logging, shutdown).
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mfukit.core.files import append_line


class EventLog:
    """Append-only JSON-lines file shared by every rank and restart of a run."""

    def __init__(self, path: Path, *, attempt: int = 0) -> None:
        self.path = path
        self.attempt = attempt

    def record(self, kind: str, **fields: Any) -> None:
        append_line(
            self.path, json.dumps({"t": time.time(), "kind": kind, "attempt": self.attempt, **fields})
        )


def read_records(path: Path) -> tuple[list[dict[str, Any]], int]:
    """The JSON objects of a JSON-lines file and how many lines were unreadable (a torn last write)."""
    if not path.exists():
        return [], 0
    records: list[dict[str, Any]] = []
    bad = 0
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            bad += 1
            continue
        if isinstance(value, dict):
            records.append(value)
        else:
            bad += 1
    return records, bad


STOPPED = "stopped by a signal (checkpointed, then relaunched)"
"""The cause of a restart that was no failure: the job stopped gracefully (Slurm's USR1 before a time limit or
a preemption) and a new launch (a requeue) resumed it."""


@dataclass(frozen=True)
class Recovery:
    attempt: int
    failure: str
    failure_t: float
    resumed_step: int
    recovery_s: float


@dataclass
class Goodput:
    wall_s: float
    productive_s: float
    rework_s: float
    checkpoint_blocking_s: float
    recovery_s: float
    startup_s: float
    other_s: float
    restarts: int
    recoveries: list[Recovery] = field(default_factory=list)
    steps_executed: int = 0
    steps_reworked: int = 0
    checkpoints_committed: int = 0
    saves: int = 0
    persist_s: float = 0.0
    """background time from the end of each committed save's blocking part to its commit (async saves)"""
    commit_s: float = 0.0
    """start of each committed save to its commit, summed"""

    @property
    def ettr(self) -> float:
        return self.productive_s / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def training_phase_s(self) -> float:
        """The wall time of the training phase: everything but start-up and shutdown."""
        return self.productive_s + self.rework_s + self.checkpoint_blocking_s + self.recovery_s

    @property
    def ettr_steady_state(self) -> float:
        """ETTR of the training phase (start-up and shutdown left out): what ``mfukit ft``'s model predicts."""
        busy = self.training_phase_s
        return self.productive_s / busy if busy > 0 else 0.0

    @property
    def interval_s(self) -> float | None:
        """Productive compute between two saves, on average (None without a save)."""
        return self.productive_s / self.saves if self.saves else None

    @property
    def blocking_per_save_s(self) -> float | None:
        return self.checkpoint_blocking_s / self.saves if self.saves else None

    @property
    def persist_per_save_s(self) -> float:
        return self.persist_s / self.checkpoints_committed if self.checkpoints_committed else 0.0

    @property
    def commit_per_save_s(self) -> float | None:
        return self.commit_s / self.checkpoints_committed if self.checkpoints_committed else None

    @property
    def recovery_per_restart_s(self) -> float | None:
        return self.recovery_s / self.restarts if self.restarts else None

    @property
    def failures(self) -> int:
        """Restarts caused by a failure (not by a graceful stop and relaunch)."""
        return sum(1 for r in self.recoveries if r.failure != STOPPED)

    def buckets(self) -> dict[str, float]:
        return {
            "productive_s": self.productive_s,
            "rework_s": self.rework_s,
            "checkpoint_blocking_s": self.checkpoint_blocking_s,
            "recovery_s": self.recovery_s,
            "startup_s": self.startup_s,
            "other_s": self.other_s,
        }


def _session(records: Iterable[dict[str, Any]], since_t: float) -> list[dict[str, Any]]:
    return sorted((r for r in records if float(r.get("t", r.get("t_start", 0.0))) >= since_t), key=_time)


def _time(record: dict[str, Any]) -> float:
    return float(record.get("t", record.get("t_start", 0.0)))


def account(events: list[dict[str, Any]], steps: list[dict[str, Any]]) -> Goodput:
    """Split the wall time of the latest launch in ``events`` (with ``steps`` from metrics.jsonl)."""
    launches = [e for e in events if e.get("kind") == "launch"]
    launch_t = max(
        (float(e["t"]) for e in launches), default=min((_time(r) for r in events + steps), default=0.0)
    )
    events = _session(events, launch_t)
    steps = sorted(_session(steps, launch_t), key=lambda s: float(s["t_start"]))
    ends = [float(e["t"]) for e in events if e.get("kind") == "run_end"]
    end_t = (
        max(ends)
        if ends
        else max([_time(e) for e in events] + [float(s["t_end"]) for s in steps] + [launch_t])
    )
    wall = max(0.0, end_t - launch_t)

    final: dict[int, float] = {}
    rework = 0.0
    reworked = 0
    for record in steps:  # in time order: a later execution of a step replaces the earlier one
        number = int(record["step"])
        duration = float(record["step_time_s"])
        if number in final:
            rework += final[number]
            reworked += 1
        final[number] = duration
    productive = sum(final.values())
    saves = [e for e in events if e.get("kind") == "checkpoint"]
    blocking = sum(float(e.get("blocking_s", 0.0)) for e in saves)
    commits = [e for e in events if e.get("kind") == "commit"]
    # the latest save of each step (a save redone after a restart replaces the earlier one)
    blocked = {int(e.get("step", -1)): float(e.get("blocking_s", 0.0)) for e in saves}
    commit_s = sum(float(e.get("save_s", 0.0)) for e in commits)
    persist = sum(
        max(0.0, float(e.get("save_s", 0.0)) - blocked.get(int(e.get("step", -1)), 0.0)) for e in commits
    )

    # the launcher logs with attempt -1; workers with torchrun's TORCHELASTIC_RESTART_COUNT
    attempts = sorted({int(s["attempt"]) for s in steps} | {int(e.get("attempt", -1)) for e in events} - {-1})
    recoveries = _recoveries(attempts, events, steps)
    first_step_t = float(steps[0]["t_start"]) if steps else end_t
    startup = max(0.0, first_step_t - launch_t)
    recovery_total = sum(r.recovery_s for r in recoveries)
    other = wall - productive - rework - blocking - recovery_total - startup
    return Goodput(
        wall_s=wall,
        productive_s=productive,
        rework_s=rework,
        checkpoint_blocking_s=blocking,
        recovery_s=recovery_total,
        startup_s=startup,
        other_s=max(0.0, other),
        restarts=max(0, len(attempts) - 1),
        recoveries=recoveries,
        steps_executed=len(steps),
        steps_reworked=reworked,
        checkpoints_committed=len(commits),
        saves=len(saves),
        persist_s=persist,
        commit_s=commit_s,
    )


def _recoveries(
    attempts: list[int], events: list[dict[str, Any]], steps: list[dict[str, Any]]
) -> list[Recovery]:
    """One entry per attempt that ran steps after an earlier attempt: failure time to first resumed step."""
    recoveries: list[Recovery] = []
    ran = [a for a in attempts if any(int(s["attempt"]) == a for s in steps)]
    for previous, attempt in itertools.pairwise(ran):
        failure_events = [
            e
            for e in events
            if int(e.get("attempt", -1)) in range(previous, attempt) and e.get("kind") in ("fault", "hang")
        ]
        stopped = [
            e
            for e in events
            if int(e.get("attempt", -1)) == previous
            and e.get("kind") == "attempt_end"
            and e.get("status") == "stopped"
        ]
        if failure_events:
            first = min(failure_events, key=_time)
            failure_t = _time(first)
            failure = str(first.get("fault") or first.get("kind"))
        elif stopped:  # a graceful stop (USR1/SIGTERM: preemption, time limit), saved and resumed later
            failure_t = _time(stopped[0])
            failure = STOPPED
        else:
            # the last sign of life of the failed attempt: its last step, or a save logged after it
            last = [float(s["t_end"]) for s in steps if int(s["attempt"]) == previous]
            last += [_time(e) for e in events if int(e.get("attempt", -1)) == previous]
            failure_t = max(last)
            failure = "unknown (last event of the failed attempt)"
        resumed = min((s for s in steps if int(s["attempt"]) == attempt), key=lambda s: float(s["t_start"]))
        recoveries.append(
            Recovery(
                attempt=attempt,
                failure=failure,
                failure_t=failure_t,
                resumed_step=int(resumed["step"]),
                recovery_s=max(0.0, float(resumed["t_start"]) - failure_t),
            )
        )
    return recoveries
