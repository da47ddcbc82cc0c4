"""The discrete-event engine: one hand-rolled heap of timed events over nodes, jobs and a policy.

At each instant the engine applies every event due (job ends, node failures and repairs, drains,
requeued jobs becoming eligible, submissions from the trace), then asks the policy once to start
what it will. Submissions are merged from the time-sorted trace rather than pushed on the heap, so
the heap only holds what is running and what the cluster will do. Job ends are scheduled at
``start + min(run, limit)``: a job past its time limit is killed (TIMEOUT), as Slurm does.

Node failures form a Poisson process at ``failure_rate_per_1000_node_days`` per node (a flat rate, or
one node's rate from a failure model: :mod:`mfukit.sched.failures`); a failed node kills its jobs
(NODE_FAIL; requeued, as Slurm's ``JobRequeue=1`` does) and, with probability ``replacement_frac``,
stays out for ``repair_s`` (else it takes work again at once). Ties at one instant are broken by a
sequence number, so a seed fixes the whole event log.
"""

from __future__ import annotations

import gc
import heapq
import math
import random
import time
from array import array
from bisect import bisect_left, insort
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from mfukit.core.results import ProgressCallback
from mfukit.sched.job import NODE_FAIL, PENDING, PREEMPTED, RUNNING, TIMEOUT, Job
from mfukit.sched.nodes import Nodes
from mfukit.sched.policies.base import Policy
from mfukit.units import SECONDS_PER_DAY


class EventKind(IntEnum):
    """What a heap entry does when its time comes. The heap orders entries by (time, kind), so at one
    instant the kinds apply in this order (then submissions, then the policy)."""

    END = 0
    """a job's attempt ends (its payload is the job, its tag the attempt)"""
    FAIL = 1
    """a random node fails"""
    REPAIR = 2
    """a failed node (the payload) is back"""
    DRAIN = 3
    """a maintenance drain (the payload) starts"""
    UNDRAIN = 4
    """a maintenance drain ends"""
    ELIGIBLE = 5
    """a requeued job (the payload) may be scheduled again"""
    TICK = 6
    """the time the policy asked to run again"""
    WAKE = 7
    """a job's --switches wait ran out"""


# The kinds as module globals, for the event loop: looking up an enum member as a class attribute costs
# about ten times a global's in CPython 3.11.
END, FAIL, REPAIR, DRAIN, UNDRAIN, ELIGIBLE, TICK, WAKE = EventKind
STRUCTURAL = (REPAIR, DRAIN, UNDRAIN, ELIGIBLE, WAKE)
"""Kinds that may let a waiting job start later: while one is pending, the simulation goes on with nothing
running."""
Event = tuple[float, str, int, str]
# After the last submission, with nothing running, give up on waiting jobs after this long without a
# start (node failures can keep a large job from ever finding its nodes up at once).
STALL_S = 30 * SECONDS_PER_DAY


@dataclass(frozen=True)
class Partition:
    """Slurm's PriorityJobFactor (normalized into the partition priority factor) and PriorityTier."""

    name: str
    job_factor: int = 1
    tier: int = 1


@dataclass(frozen=True)
class Qos:
    """A QOS: its priority (normalized into the QOS factor) and the QOS it may preempt (with requeue)."""

    name: str
    priority: int = 0
    preempts: tuple[str, ...] = ()


@dataclass(frozen=True)
class Drain:
    """Nodes taken out of service at ``start_s`` for ``duration_s``: running jobs finish, no new work."""

    nodes: tuple[int, ...]
    start_s: float
    duration_s: float


@dataclass(frozen=True)
class ClusterSpec:
    num_nodes: int
    gpus_per_node: int
    nodes_per_leaf: int = 0  # 0: every node under one switch (no topology constraint can bind)
    failure_rate_per_1000_node_days: float = 0.0
    repair_s: float = 0.0
    replacement_frac: float = 1.0  # the share of node failures after which the node is out for repair_s
    drains: tuple[Drain, ...] = ()
    partitions: tuple[Partition, ...] = (Partition("batch"),)
    qos: tuple[Qos, ...] = (Qos("normal"),)
    requeue_delay_s: float = 0.0
    requeue_on_node_fail: bool = True
    max_batch_requeue: int = 5  # slurm.conf MaxBatchRequeue (default 5): then the job ends NODE_FAIL

    @property
    def num_gpus(self) -> int:
        return self.num_nodes * self.gpus_per_node

    def partition(self, name: str) -> Partition:
        for part in self.partitions:
            if part.name == name:
                return part
        return Partition(name)

    def qos_named(self, name: str) -> Qos:
        for qos in self.qos:
            if qos.name == name:
                return qos
        return Qos(name)


@dataclass
class SimResult:
    jobs: list[Job]
    spec: ClusterSpec
    policy: str
    wall_s: float
    events: list[Event] | None
    # (time, allocated GPUs) after every instant at which the allocation changed
    timeline_t: array[float] = field(default_factory=lambda: array("d"))
    timeline_gpus: array[float] = field(default_factory=lambda: array("d"))
    allocated_gpu_s: float = 0.0  # every attempt, including ones killed by failures or preemption
    lost_gpu_s: float = 0.0  # GPU-seconds of attempts killed by node failures or preemption
    stranded_gpu_s: float = 0.0  # free GPUs that no queued job could use, integrated over time
    idle_with_queue_gpu_s: float = 0.0  # free GPUs while jobs waited, integrated over time
    down_node_s: float = 0.0
    node_failures: int = 0
    preemptions: int = 0
    rejected: list[Job] = field(default_factory=list)
    never_started: list[Job] = field(default_factory=list)


class Simulation:
    """Run ``jobs`` (any order; they are reset) on ``spec`` under ``policy``."""

    def __init__(
        self,
        jobs: Sequence[Job],
        spec: ClusterSpec,
        policy: Policy,
        *,
        seed: int = 0,
        record_events: bool = False,
    ) -> None:
        self.spec = spec
        self.policy = policy
        self.nodes = Nodes(spec.num_nodes, spec.gpus_per_node, spec.nodes_per_leaf or spec.num_nodes)
        self.rng = random.Random(seed)
        self.now = 0.0
        # (time, kind, sequence, payload, attempt): the payload's type follows the kind
        self.heap: list[tuple[float, EventKind, int, Any, int]] = []
        self._seq = 0
        self.running: dict[int, Job] = {}
        # running jobs by expected end (start + time limit): what planners see, as Slurm's will-run does
        self.by_limit_end: list[tuple[float, int, Job]] = []
        self.pending_per_gpus = [0] * (spec.gpus_per_node + 1)
        self.pending_count = 0
        self.events: list[Event] | None = [] if record_events else None
        self.result = SimResult([], spec, policy.name, 0.0, self.events)
        self._allocated = 0
        self._down_since: dict[int, float] = {}
        self._structural = 0  # repairs, drains and deferred requeues still to come
        self._last_start_s = 0.0
        self.changes = 0  # bumped at every start, end and enqueue: policies skip work on an unchanged state
        fits = []
        for job in sorted(jobs, key=lambda j: (j.submit_s, j.job_id)):
            job.reset()
            if job.num_nodes > spec.num_nodes or job.gpus_per_node > spec.gpus_per_node:
                self.result.rejected.append(job)
            else:
                fits.append(job)
        self.trace = fits
        self.result.jobs = fits
        policy.attach(self)

    # ------------------------------------------------------------------------------------ bookkeeping
    def _push(self, at: float, kind: EventKind, payload: Job | int | Drain | None, tag: int = 0) -> None:
        if kind in STRUCTURAL:
            self._structural += 1
        self._seq += 1
        heapq.heappush(self.heap, (at, kind, self._seq, payload, tag))

    def log(self, what: str, job_id: int, detail: str = "") -> None:
        if self.events is not None:
            self.events.append((self.now, what, job_id, detail))

    def expected_ends(self) -> Iterator[tuple[float, Job]]:
        """Running jobs by expected end (start + time limit), earliest first (lazily)."""
        return ((end, job) for end, _, job in self.by_limit_end)

    # ------------------------------------------------------------------------------------- job moves
    def start(self, job: Job, nodes: tuple[int, ...], *, backfilled: bool = False) -> None:
        """Start ``job`` on ``nodes`` (already taken from :attr:`nodes` by the policy)."""
        now = self.now
        self._last_start_s = now
        self.changes += 1
        job.start_s = now
        if job.first_start_s is None:
            job.first_start_s = now
        job.nodes = nodes
        job.state = RUNNING
        job.backfilled = backfilled
        job.attempt += 1
        run = job.run_s if job.run_s < job.limit_s else job.limit_s
        self._seq += 1
        heapq.heappush(self.heap, (now + run, END, self._seq, job, job.attempt))
        self.running[job.job_id] = job
        insort(self.by_limit_end, (now + job.limit_s, job.job_id, job))
        self.pending_per_gpus[job.gpus_per_node] -= 1
        self.pending_count -= 1
        self._allocated += job.num_nodes * job.gpus_per_node
        if self.events is not None:
            self.events.append((now, "start", job.job_id, ",".join(map(str, nodes))))

    def _release(self, job: Job) -> None:
        self.changes += 1
        del self.running[job.job_id]
        assert job.start_s is not None
        # (end, id) is unique, so the search never compares two Job objects
        del self.by_limit_end[bisect_left(self.by_limit_end, (job.start_s + job.limit_s, job.job_id))]
        self.nodes.give(job.nodes, job.gpus_per_node)
        gpus = job.num_nodes * job.gpus_per_node
        self._allocated -= gpus
        used = (self.now - job.start_s) * gpus
        self.result.allocated_gpu_s += used
        self.policy.released(job, used)

    def _finish(self, job: Job) -> None:
        self._release(job)
        job.end_s = self.now
        job.state = TIMEOUT if job.run_s > job.limit_s else job.exit_state
        self.log("end", job.job_id, job.state)

    def enqueue(self, job: Job) -> None:
        self.changes += 1
        job.state = PENDING
        job.eligible_s = self.now
        self.pending_per_gpus[job.gpus_per_node] += 1
        self.pending_count += 1
        if job.max_switches and 0 < job.switch_wait_s < math.inf:
            self._push(self.now + job.switch_wait_s, WAKE, job)
        self.policy.submit(job)

    def kill(self, job: Job, state: str) -> None:
        """End ``job``'s attempt as NODE_FAIL or PREEMPTED; requeue it when the cluster does."""
        assert job.start_s is not None
        self._release(job)
        lost = (self.now - job.start_s) * job.num_gpus
        job.lost_gpu_s += lost
        self.result.lost_gpu_s += lost
        self.log("kill", job.job_id, state)
        job.node_fail_requeues += state == NODE_FAIL
        requeue = state == PREEMPTED or (
            self.spec.requeue_on_node_fail and job.node_fail_requeues <= self.spec.max_batch_requeue
        )
        if not requeue:
            job.end_s = self.now
            job.state = state
            return
        job.restarts += 1
        job.state = state
        delay = self.spec.requeue_delay_s if state == PREEMPTED else 0.0
        if delay > 0:
            self._push(self.now + delay, ELIGIBLE, job)
        else:
            self.enqueue(job)

    def preempt(self, victim: Job) -> None:
        self.result.preemptions += 1
        self.kill(victim, PREEMPTED)

    # ------------------------------------------------------------------------------------ node events
    def _fail_node(self, node: int) -> None:
        if not self.nodes.accepting[node] and node in self._down_since:
            return  # already down
        self.result.node_failures += 1
        self.log("node_fail", -1, str(node))
        for job in [j for j in self.running.values() if node in j.nodes]:
            self.kill(job, NODE_FAIL)
        self.nodes.stop_accepting(node)
        self._down_since[node] = self.now
        replaced = self.spec.replacement_frac >= 1.0 or self.rng.random() < self.spec.replacement_frac
        self._push(self.now + (self.spec.repair_s if replaced else 0.0), REPAIR, node)

    def _repair_node(self, node: int) -> None:
        self.result.down_node_s += self.now - self._down_since.pop(node)
        self.log("node_up", -1, str(node))
        if not any(
            node in d.nodes and d.start_s <= self.now < d.start_s + d.duration_s for d in self.spec.drains
        ):
            self.nodes.resume(node)

    def _next_failure(self) -> None:
        rate_per_s = (
            self.spec.failure_rate_per_1000_node_days / 1000.0 / SECONDS_PER_DAY * self.spec.num_nodes
        )
        if rate_per_s > 0:
            self._push(self.now + self.rng.expovariate(rate_per_s), FAIL, None)

    # ------------------------------------------------------------------------------------------- run
    def run(self, progress: ProgressCallback | None = None) -> SimResult:
        # The event loop makes no reference cycles; the cyclic collector would only rescan millions
        # of live jobs and tuples again and again (half the run time at a million jobs).
        collecting = gc.isenabled()
        gc.disable()
        try:
            return self._run(progress)
        finally:
            if collecting:
                gc.enable()

    def _run(self, progress: ProgressCallback | None) -> SimResult:
        started = time.perf_counter()
        result = self.result
        policy = self.policy
        heap = self.heap
        trace = self.trace
        total = len(trace)
        nodes = self.nodes
        next_submit = 0
        self._next_failure()
        for drain in self.spec.drains:
            self._push(drain.start_s, DRAIN, drain)
        tick_at: float | None = None  # the one TICK the policy asked for (earlier ones are stale)
        last_t = trace[0].submit_s if trace else 0.0
        self.now = last_t
        timeline_t, timeline_gpus = result.timeline_t, result.timeline_gpus
        progress_every = max(1, total // 200)
        reported = 0
        events = self.events
        pending_per_gpus = self.pending_per_gpus
        heappop = heapq.heappop
        ticking = type(policy).next_tick is not Policy.next_tick
        while True:
            has_event = bool(heap)
            if next_submit < total:
                t_submit = trace[next_submit].submit_s
                now = heap[0][0] if has_event and heap[0][0] < t_submit else t_submit
            elif (self.running or self.pending_count or self._structural) and has_event:
                now = heap[0][0]
            else:
                break
            # integrate the state that held since the last instant
            dt = now - last_t
            if dt > 0:
                if self.pending_count:
                    result.idle_with_queue_gpu_s += nodes.free_gpus() * dt
                    if not pending_per_gpus[1]:  # with 1-GPU jobs waiting, no free GPU is stranded
                        smallest = next(g for g, n in enumerate(pending_per_gpus) if n)
                        result.stranded_gpu_s += nodes.stranded_gpus(smallest) * dt
                last_t = now
            self.now = now
            allocated_before = self._allocated
            freed = False
            tick = False
            while heap and heap[0][0] == now:
                _, kind, _, payload, tag = heappop(heap)
                if kind == END:
                    if payload.attempt == tag and payload.state == RUNNING:
                        self._finish(payload)
                        freed = True
                    continue
                if kind in STRUCTURAL:
                    self._structural -= 1
                if kind == FAIL:
                    self._fail_node(self.rng.randrange(self.spec.num_nodes))
                    self._next_failure()
                    freed = True
                elif kind == REPAIR:
                    assert isinstance(payload, int)
                    self._repair_node(payload)
                    freed = True
                elif kind == DRAIN:
                    assert isinstance(payload, Drain)
                    for node in payload.nodes:
                        nodes.stop_accepting(node)
                    self.log("drain", -1, ",".join(map(str, payload.nodes)))
                    self._push(now + payload.duration_s, UNDRAIN, payload)
                elif kind == UNDRAIN:
                    assert isinstance(payload, Drain)
                    for node in payload.nodes:
                        if node not in self._down_since:
                            nodes.resume(node)
                    self.log("undrain", -1, ",".join(map(str, payload.nodes)))
                    freed = True
                elif kind == ELIGIBLE:
                    assert isinstance(payload, Job)
                    self.enqueue(payload)
                    freed = True
                elif kind == WAKE:
                    freed = True  # a job's --switches wait ran out: it may now take any nodes
                elif tick_at is not None and tick_at == now:
                    tick = True
                    tick_at = None
            arrived = 0
            while next_submit < total and trace[next_submit].submit_s == now:
                job = trace[next_submit]
                next_submit += 1
                arrived += 1
                if events is not None:
                    events.append((now, "submit", job.job_id, ""))
                self.enqueue(job)
            if self.pending_count:
                policy.schedule(now, freed=freed, arrived=arrived, tick=tick)
                wanted = policy.next_tick(now) if ticking and self.pending_count else None
                if wanted is not None and (tick_at is None or wanted < tick_at):
                    tick_at = wanted
                    self._push(wanted, TICK, None)
            if self._allocated != allocated_before:
                timeline_t.append(now)
                timeline_gpus.append(self._allocated)
            if not self.running and next_submit >= total:
                if not self._structural and tick_at is None:
                    break  # nothing left that could change: what still waits can never start
                if now - self._last_start_s > STALL_S:
                    break  # failures keep too many nodes down for what still waits: give up on it
            if progress is not None and next_submit >= reported + progress_every:
                reported = next_submit
                progress(next_submit, total)
        for node, since in self._down_since.items():
            result.down_node_s += self.now - since
            del node
        result.never_started = [job for job in trace if job.state == PENDING]
        result.wall_s = time.perf_counter() - started
        if progress is not None:
            progress(total, total)
        return result


def simulate(
    jobs: Sequence[Job],
    spec: ClusterSpec,
    policy: Policy,
    *,
    seed: int = 0,
    record_events: bool = False,
    progress: ProgressCallback | None = None,
) -> SimResult:
    return Simulation(jobs, spec, policy, seed=seed, record_events=record_events).run(progress)
