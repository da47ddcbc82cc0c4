"""Scheduling metrics, with one definition for simulated and real (sacct) clusters.

* utilization: allocated GPU-seconds inside a window / (GPUs x window length), from the step function
  of allocated GPUs (every attempt counts, including ones later killed);
* wait: first start minus submission (eligibility, for sacct), p50/p95/p99 overall and per size class;
* bounded slowdown: max(1, (wait + run) / max(run, 10 s)) (Feitelson, Rudolph, Schwiegelshohn,
  Sevcik & Wong, "Theory and practice in parallel job scheduling", JSSPP 1997; tau = 10 s);
* GPU idle gap between jobs: for every job end on a node, the time until the next job starts on that
  node (sacct has no per-GPU index, so this is per node, as in the reference recipe);
* fragmentation (stranded GPUs): free GPUs on nodes with fewer free than any waiting job asks per
  node, so no queued job can use them, integrated over time; and all free GPUs while jobs wait
  (:func:`queue_idle_gpu_s`, the same quantities the simulator integrates as it runs);
* the MFU-first scheduling gate: mean idle gap under 5 min and utilization above 85 %.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mfukit.sched import job as states
from mfukit.sched.job import SIZE_CLASSES, Job, size_class
from mfukit.units import SECONDS_PER_HOUR

SLOWDOWN_TAU_S = 10.0
# The MFU-first gate for scheduling (the project's gate, stated in the scheduling issue).
GATE_IDLE_GAP_S = 300.0
GATE_UTILIZATION = 0.85
PERCENTILES = (50, 95, 99)
# a job's final state -> the count it adds to
_COUNTED_AS = {
    states.COMPLETED: "completed",
    states.FAILED: "failed",
    states.OUT_OF_MEMORY: "failed",
    states.TIMEOUT: "timeout",
    states.CANCELLED: "cancelled",
    states.NODE_FAIL: "node_fail",
    states.PREEMPTED: "preempted",
    states.RUNNING: "running",
}


@dataclass
class Timeline:
    """Allocated GPUs as a step function: ``gpus[i]`` holds from ``t[i]`` to ``t[i+1]``."""

    t: np.ndarray[Any, np.dtype[np.float64]]
    gpus: np.ndarray[Any, np.dtype[np.float64]]

    @classmethod
    def from_steps(cls, t: Sequence[float], gpus: Sequence[float]) -> Timeline:
        return cls(np.asarray(t, dtype=np.float64), np.asarray(gpus, dtype=np.float64))

    @classmethod
    def from_attempts(cls, attempts: Sequence[Job], now_s: float) -> Timeline:
        """The allocation of every attempt (running ones up to ``now_s``)."""
        times, deltas = [], []
        for attempt in attempts:
            if attempt.start_s is None:
                continue
            end = attempt.end_s if attempt.end_s is not None else now_s
            times += [attempt.start_s, end]
            deltas += [attempt.num_gpus, -attempt.num_gpus]
        if not times:
            return cls(np.zeros(0), np.zeros(0))
        order = np.argsort(np.asarray(times), kind="stable")
        t = np.asarray(times)[order]
        level = np.cumsum(np.asarray(deltas, dtype=np.float64)[order])
        last = np.r_[t[1:] != t[:-1], True]  # one step per distinct time
        return cls(t[last], level[last])

    def gpu_seconds(self, start_s: float, end_s: float) -> float:
        if self.t.size == 0 or end_s <= start_s:
            return 0.0
        edges = np.clip(np.r_[self.t, end_s], start_s, end_s)
        return float(np.sum(self.gpus * np.diff(edges)))

    def sampled(self, start_s: float, end_s: float, points: int = 400) -> tuple[list[float], list[float]]:
        """Mean allocated GPUs in ``points`` equal bins of the window (for plots)."""
        edges = np.linspace(start_s, end_s, points + 1)
        values = [self.gpu_seconds(a, b) / (b - a) if b > a else 0.0 for a, b in itertools.pairwise(edges)]
        return [float(x) for x in edges[:-1]], values


def _percentiles(values: Sequence[float]) -> dict[str, float | None]:
    stats: dict[str, float | None] = {f"p{p}": None for p in PERCENTILES}
    stats["mean"] = None
    if values:
        array = np.asarray(values, dtype=np.float64)
        for p, v in zip(PERCENTILES, np.percentile(array, PERCENTILES), strict=True):
            stats[f"p{p}"] = float(v)
        stats["mean"] = float(array.mean())
    return stats


def idle_gaps_s(attempts: Sequence[Job]) -> list[float]:
    """For every attempt's end on every node, the wait until the next start on that node."""
    starts: dict[Hashable, list[float]] = defaultdict(list)
    ends: dict[Hashable, list[float]] = defaultdict(list)
    for attempt in attempts:
        if attempt.start_s is None:
            continue
        nodes: Sequence[Hashable] = attempt.node_names or attempt.nodes
        for node in nodes:
            starts[node].append(attempt.start_s)
            if attempt.end_s is not None:
                ends[node].append(attempt.end_s)
    gaps: list[float] = []
    for node, node_ends in ends.items():
        node_starts = np.sort(np.asarray(starts[node]))
        at = np.asarray(node_ends)
        index = np.searchsorted(node_starts, at, side="left")
        found = index < node_starts.size
        gaps.extend((node_starts[index[found]] - at[found]).tolist())
    return gaps


def queue_idle_gpu_s(
    attempts: Sequence[Job],
    waits: Sequence[tuple[float, float, int]],
    node_gpus: dict[Hashable, int],
    window_s: tuple[float, float],
    *,
    unseen_free_gpus: int = 0,
) -> tuple[float, float]:
    """(stranded GPU-seconds, free-while-jobs-wait GPU-seconds) inside ``window_s``.

    ``attempts`` hold GPUs on their nodes (``node_names`` or ``nodes``; a job's GPUs split evenly
    over them) from start to end; ``waits`` are (from, until, GPUs asked per node) of every wait of
    a job; ``node_gpus`` the nodes' GPU counts, plus ``unseen_free_gpus`` on nodes no job used
    (whole free nodes: never stranded). Between events the free GPUs are kept as a histogram over
    the free count, so a step costs O(GPUs per node), not O(nodes).
    """
    # (time, order, node or None for a wait, GPUs: per node held, or asked, delta); at one instant
    # releases come first (order 0), so a job that starts as another ends never overfills a node
    events: list[tuple[float, int, Hashable | None, int, int]] = []
    for attempt in attempts:
        nodes: Sequence[Hashable] = attempt.node_names or attempt.nodes
        if attempt.start_s is None or attempt.end_s is None or not nodes:
            continue
        per_node = attempt.num_gpus // len(nodes)
        for node in nodes:
            events.append((attempt.start_s, 1, node, per_node, -1))
            events.append((attempt.end_s, 0, node, per_node, 1))
    for begin, until, ask in waits:
        if until > begin:
            events.append((begin, 1, None, ask, 1))
            events.append((until, 1, None, ask, -1))
    events.sort(key=lambda e: (e[0], e[1]))
    top = max(node_gpus.values(), default=0)
    free = dict(node_gpus)
    nodes_with = [0] * (top + 1)  # nodes with f free GPUs
    for gpus in free.values():
        nodes_with[gpus] += 1
    waiting = [0] * (top + 2)  # waits asking g GPUs per node (asks above any node's size land at top+1)
    start, end = window_s
    stranded = idle = 0.0
    last = start
    for at, _, node, gpus, delta in events:
        if at > last and any(waiting):
            span = min(at, end) - last
            if span > 0:
                smallest = next(g for g, n in enumerate(waiting) if n)
                stranded += span * sum(f * nodes_with[f] for f in range(min(smallest, top + 1)))
                idle += span * (sum(f * n for f, n in enumerate(nodes_with)) + unseen_free_gpus)
        last = max(last, min(at, end))
        if node is not None:
            before = free[node]
            nodes_with[before] -= 1
            free[node] = min(max(before + delta * gpus, 0), node_gpus[node])
            nodes_with[free[node]] += 1
        else:
            waiting[min(gpus, top + 1)] += delta
    return stranded, idle


@dataclass
class Metrics:
    window_s: tuple[float, float]
    capacity_gpus: int
    utilization: float
    wait_s: dict[str, float | None]
    wait_s_by_size: dict[str, dict[str, float | None]]
    wait_s_by_partition: dict[str, dict[str, float | None]]
    bounded_slowdown_mean: float | None
    idle_gap_s: dict[str, float | None]
    makespan_s: float
    counts: dict[str, int]
    backfill_share: float | None
    gpu_hours_lost_to_failures: float
    timeline: Timeline
    jobs: Sequence[Job]  # what the figures were measured on, for the report
    stranded_gpu_frac: float | None = None
    idle_with_queue_gpu_frac: float | None = None

    @property
    def gate_pass(self) -> bool:
        gap = self.idle_gap_s.get("mean")
        return self.utilization >= GATE_UTILIZATION and (gap is None or gap <= GATE_IDLE_GAP_S)

    def gate(self) -> dict[str, Any]:
        return {
            "pass": self.gate_pass,
            "utilization": self.utilization,
            "utilization_min": GATE_UTILIZATION,
            "idle_gap_s_mean": self.idle_gap_s.get("mean"),
            "idle_gap_s_max": GATE_IDLE_GAP_S,
        }


def measure(
    jobs: Sequence[Job],
    attempts: Sequence[Job],
    timeline: Timeline,
    capacity_gpus: int,
    window_s: tuple[float, float],
    *,
    lost_gpu_s: float = 0.0,
) -> Metrics:
    """Metrics of ``jobs`` (one per job, final attempt) and ``attempts`` (every allocation).

    ``lost_gpu_s`` adds GPU-seconds of attempts killed by failures that ``attempts`` does not list
    (the simulator keeps only final attempts); attempts that ended FAILED, NODE_FAIL or OUT_OF_MEMORY
    count in full.
    """
    start, end = window_s
    span = max(end - start, 1e-9)
    utilization = timeline.gpu_seconds(start, end) / (capacity_gpus * span)
    waits: list[float] = []
    by_size: dict[str, list[float]] = defaultdict(list)
    by_partition: dict[str, list[float]] = defaultdict(list)
    slowdowns: list[float] = []
    counts = {
        "jobs": len(jobs),
        "started": 0,
        "completed": 0,
        "failed": 0,
        "timeout": 0,
        "cancelled": 0,
        "node_fail": 0,
        "preempted": 0,
        "requeued": 0,
        "running": 0,
        "never_started": 0,
    }
    backfilled = 0
    for job in jobs:
        wait = job.wait_s
        if wait is None:
            counts["never_started"] += 1
            continue
        counts["started"] += 1
        backfilled += job.backfilled
        waits.append(wait)
        by_size[size_class(job.num_gpus)].append(wait)
        by_partition[job.partition].append(wait)
        if job.restarts:
            counts["requeued"] += 1
        key = _COUNTED_AS.get(job.state)
        if key:
            counts[key] += 1
        if job.end_s is not None and job.start_s is not None:
            run = job.end_s - job.start_s
            slowdowns.append(max(1.0, (wait + run) / max(run, SLOWDOWN_TAU_S)))
    failed_gpu_s = lost_gpu_s + sum(
        a.num_gpus * (a.end_s - a.start_s)
        for a in attempts
        if a.state in states.FAILURE_STATES and a.end_s is not None and a.start_s is not None
    )
    ends = [j.end_s for j in jobs if j.end_s is not None]
    submits = [j.submit_s for j in jobs]
    return Metrics(
        window_s=window_s,
        capacity_gpus=capacity_gpus,
        utilization=utilization,
        wait_s=_percentiles(waits),
        wait_s_by_size={name: _percentiles(by_size[name]) for name, _, _ in SIZE_CLASSES if by_size[name]},
        wait_s_by_partition={name: _percentiles(values) for name, values in sorted(by_partition.items())},
        bounded_slowdown_mean=float(np.mean(slowdowns)) if slowdowns else None,
        idle_gap_s=_percentiles(idle_gaps_s(attempts)),
        makespan_s=(max(ends) - min(submits)) if ends and submits else 0.0,
        counts=counts,
        backfill_share=backfilled / counts["started"] if counts["started"] else None,
        gpu_hours_lost_to_failures=failed_gpu_s / SECONDS_PER_HOUR,
        timeline=timeline,
        jobs=jobs,
    )
