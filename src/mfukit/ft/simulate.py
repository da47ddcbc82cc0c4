"""A seeded, vectorised Monte-Carlo of a whole training run under failures.

Each replica runs the same :class:`~mfukit.ft.run.RunModel` from the first step to the last. One loop
iteration advances every unfinished replica by one *attempt*: a restart (replacement wait, relaunch)
followed by training until the next failure, planned stop or the end. Within an attempt the job trains
in segments of compute + blocking save; a checkpoint is durable ``persist_s`` after its save blocks, so
a failure during a save, or before an asynchronous save is persisted, loses that save as well.

Failures: the job's time to next failure is exponential with the job's rate (or Weibull of the same
mean, restarted at each relaunch: failures cluster after restarts when the shape is < 1); the category
is drawn in proportion to its rate. Detection is dead time; a failure during the restart that follows
interrupts it again. A failure needing a replacement node takes a free hot spare at once (the failed
node returns to the pool after repair), else waits for a spare back from repair or the replacement
time, whichever is first. Planned maintenance arrives during training at its own rate and stops
gracefully (a synchronous save, then a relaunch). All arrays are numpy; replicas never loop in Python.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from mfukit.core.results import ProgressCallback
from mfukit.errors import InputError
from mfukit.ft.run import RunModel

CAUSES = ("rework", "checkpoint_blocking", "detection", "replacement", "relaunch", "maintenance")
MAX_FAILURES_PER_SEGMENT = 1e3
"""Beyond this many expected failures per segment the run makes (almost) no progress: refuse it."""

Floats = NDArray[np.float64]


@dataclass(frozen=True)
class TimelineEvent:
    time_s: float
    durable_work_s: float
    kind: str
    """'failure:<category>', 'maintenance' or 'finish'"""


@dataclass
class Simulation:
    replicas: int
    seed: int
    ettr: Floats
    wall_s: Floats
    interruptions: NDArray[np.int64]
    planned_stops: NDArray[np.int64]
    lost_s: dict[str, Floats]
    """per cause, per replica: wall seconds that made no durable progress"""
    interruptions_by_category: dict[str, float]
    """mean per replica"""
    timeline: list[TimelineEvent] = field(default_factory=list)
    """replica 0, for the timeline chart"""

    def percentile(self, values: Floats, q: float) -> float:
        return float(np.percentile(values, q))


def _check_progress(run: RunModel) -> None:
    rate = run.failures.failure_rate_per_s
    if rate > 0 and run.segment_s * rate > math.log(MAX_FAILURES_PER_SEGMENT):
        raise InputError(
            f"a checkpoint segment ({run.segment_s:.0f} s) is {run.segment_s * rate:.0f} x the MTBF "
            f"({run.mtbf_s:.0f} s): the run would almost never make progress",
            field="ft.checkpoint_interval",
            hint="checkpoint more often, or make saves cheaper",
        )


def _gaps(rng: np.random.Generator, size: int, mtbf_s: float, shape: float | None) -> Floats:
    """Times to the next failure: exponential, or Weibull with the same mean."""
    if not math.isfinite(mtbf_s):
        return np.full(size, np.inf)
    if shape is None:
        return rng.exponential(mtbf_s, size)
    scale = mtbf_s / math.gamma(1.0 + 1.0 / shape)
    return scale * rng.weibull(shape, size)


def simulate(
    run: RunModel, *, replicas: int, seed: int, progress: ProgressCallback | None = None
) -> Simulation:
    """Simulate ``replicas`` independent runs; the same ``seed`` gives the same result."""
    if replicas < 1:
        raise InputError("must be at least 1", field="--replicas", value=replicas)
    _check_progress(run)
    rng = np.random.default_rng(seed)
    failures = run.failures
    categories = failures.unplanned
    rates = np.array([failures.rate_per_s(c) for c in categories])
    total_rate = float(rates.sum())
    cumulative = np.cumsum(rates) / total_rate if total_rate > 0 else np.ones(len(categories))
    needs_node = np.array([c.needs_replacement for c in categories])
    planned_rate = failures.planned_rate_per_s
    parts = run.restart
    relaunch = parts.relaunch_s
    tau, blocking, persist = run.interval_s, run.blocking_s, run.persist_s
    segment = run.segment_s
    repair = parts.repair_s if parts.repair_s is not None else np.inf

    n = replicas
    clock = np.zeros(n)
    durable = np.zeros(n)
    pending = np.zeros(n)  # vulnerable restart time before the next training stretch
    pending_wait = np.zeros(n)  # of which: waiting for a replacement node
    pending_planned = np.zeros(n, dtype=bool)  # the pending relaunch follows planned maintenance
    spares = np.zeros((n, parts.hot_spares))  # when each spare slot next holds a free node
    lost = {cause: np.zeros(n) for cause in CAUSES}
    interruptions = np.zeros(n, dtype=np.int64)
    planned_stops = np.zeros(n, dtype=np.int64)
    by_category = np.zeros(len(categories), dtype=np.int64)
    timeline: list[TimelineEvent] = []
    active = np.arange(n)
    finished = 0

    def fail(rows: Floats | NDArray[np.int64], at: Floats) -> None:
        """Failures at wall time ``at`` for replicas ``rows``: detection, then a restart to schedule."""
        picked = np.searchsorted(cumulative, rng.random(rows.size), side="right").clip(
            max=len(categories) - 1
        )
        by_category[:] += np.bincount(picked, minlength=len(categories))
        interruptions[rows] += 1
        detected = at + parts.detection_s
        lost["detection"][rows] += parts.detection_s
        wait = np.zeros(rows.size)
        swap = needs_node[picked]
        if swap.any():
            wait[swap] = parts.replacement_s
            if parts.hot_spares:
                swap_rows = rows[swap]
                slot = spares[swap_rows].argmin(axis=1)
                free_at = spares[swap_rows, slot]
                use = free_at - detected[swap] < parts.replacement_s
                wait[swap] = np.where(use, np.maximum(free_at - detected[swap], 0.0), parts.replacement_s)
                spares[swap_rows[use], slot[use]] = np.maximum(detected[swap][use] + repair, free_at[use])
        clock[rows] = detected
        pending[rows] = wait + relaunch
        pending_wait[rows] = wait
        pending_planned[rows] = False
        if rows.size and rows[0] == 0:
            timeline.append(
                TimelineEvent(float(at[0]), float(durable[0]), f"failure:{categories[int(picked[0])].name}")
            )

    while active.size:
        gap = _gaps(rng, active.size, run.mtbf_s, run.weibull_shape)
        restart = pending[active]
        # 1. a failure during the restart: that restart is lost, another follows
        hit = gap < restart
        if hit.any():
            rows = active[hit]
            lost["replacement"][rows] += np.minimum(gap[hit], pending_wait[rows])
            relaunch_part = np.maximum(gap[hit] - pending_wait[rows], 0.0)
            lost["maintenance"][rows] += np.where(pending_planned[rows], relaunch_part, 0.0)
            lost["relaunch"][rows] += np.where(pending_planned[rows], 0.0, relaunch_part)
            fail(rows, clock[rows] + gap[hit])
        # 2. the restart completes and the job trains until a failure, a planned stop or the end
        ok = ~hit
        rows = active[ok]
        planned_now = pending_planned[rows]
        lost["replacement"][rows] += pending_wait[rows]
        relaunch_part = pending[rows] - pending_wait[rows]
        lost["maintenance"][rows] += np.where(planned_now, relaunch_part, 0.0)
        lost["relaunch"][rows] += np.where(planned_now, 0.0, relaunch_part)
        clock[rows] += pending[rows]
        pending[rows] = 0.0
        train = gap[ok] - restart[ok]
        stop = (
            rng.exponential(1.0 / planned_rate, rows.size) if planned_rate > 0 else np.full(rows.size, np.inf)
        )
        remaining = run.work_s - durable[rows]
        segments = np.maximum(np.ceil(remaining / tau - 1e-12), 1.0)
        finish = remaining + (segments - 1.0) * blocking
        # finish
        done = (finish <= train) & (finish <= stop)
        done_rows = rows[done]
        clock[done_rows] += finish[done]
        lost["checkpoint_blocking"][done_rows] += (segments[done] - 1.0) * blocking
        durable[done_rows] = run.work_s
        # failure while training
        failed = ~done & (train < stop)
        if failed.any():
            f_rows, at = rows[failed], train[failed]
            whole = np.floor(at / segment)
            phase = at - whole * segment
            kept = whole - ((phase < persist) & (whole >= 1))
            durable[f_rows] += kept * tau
            lost["checkpoint_blocking"][f_rows] += kept * blocking
            lost["rework"][f_rows] += at - kept * segment
            fail(f_rows, clock[f_rows] + at)
        # planned maintenance: save where the job stands, relaunch later
        graceful = ~done & ~failed
        if graceful.any():
            g_rows, at = rows[graceful], stop[graceful]
            whole = np.floor(at / segment)
            phase = at - whole * segment
            durable[g_rows] += whole * tau + np.minimum(phase, tau)
            lost["checkpoint_blocking"][g_rows] += whole * blocking + np.maximum(phase - tau, 0.0)
            lost["maintenance"][g_rows] += run.save_s
            clock[g_rows] += at + run.save_s
            pending[g_rows] = relaunch
            pending_wait[g_rows] = 0.0
            pending_planned[g_rows] = True
            planned_stops[g_rows] += 1
        if rows.size and rows[0] == 0:
            if done[0]:
                timeline.append(TimelineEvent(float(clock[0]), run.work_s, "finish"))
            elif graceful[0]:
                timeline.append(TimelineEvent(float(clock[0]), float(durable[0]), "maintenance"))
        active = np.concatenate([active[hit], rows[~done]])
        active.sort()
        if progress is not None and done.any():
            finished += int(done.sum())
            progress(finished, n)
    productive = run.productive_s
    lost["straggler"] = np.full(n, run.work_s - productive)
    return Simulation(
        replicas=n,
        seed=seed,
        ettr=productive / clock,
        wall_s=clock,
        interruptions=interruptions,
        planned_stops=planned_stops,
        lost_s=lost,
        interruptions_by_category={c.name: float(by_category[i]) / n for i, c in enumerate(categories)},
        timeline=timeline,
    )
