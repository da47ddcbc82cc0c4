"""``slurm``: Slurm 22.05's two schedulers (job_scheduler.c ``_schedule`` and sched/backfill with
select/cons_tres), as implemented, with slurmctld's clock deciding when each runs.

* The **main scheduler** walks pending jobs in priority order and starts each that fits now on the
  nodes of :func:`~mfukit.sched.policies.plan.consecutive_best_fit`; the first that does not fit
  ends the pass, since its partition's nodes are withheld from every later job (all partitions span
  all nodes here). A blocked job whose QOS may preempt requeues lower-QOS jobs first
  (PreemptType=preempt/qos, PreemptMode=REQUEUE).
* **Backfill** (:mod:`~mfukit.sched.policies.slurm_backfill`) plans every waiting job on the running
  jobs' *time limits* with Slurm's will-run grouping, ``bf_resolution``, ``bf_window`` and
  ``bf_max_job_test``, and starts the jobs whose planned start is now (flag SchedBackfill).

When they run (:class:`PeriodicController`; controller.c ``_slurmctld_background``, backfill.c
``backfill_agent``, checked on the dev cluster's log): the background loop wakes every whole second
and runs a full main pass every ``sched_interval``, and one that a submission or a job's end asked
for (``queue_job_scheduler``) once ``batch_sched_delay`` (3 s) has passed since the last pass. The
backfill thread checks ``bf_interval`` after a cycle and then every second, and runs when anything
(a start, an end, a submission, a node) changed since the whole second its last cycle ended. Slurm's arithmetic is in whole epoch seconds; ``clock_origin_s`` is the
epoch of the simulation's time 0 (0 for traces in epoch seconds, as sacct's are), which sets the
phase of the 30 s will-run windows and of ``bf_resolution``. :class:`LogController` instead replays
the instants of a real slurmctld's passes.

Not modelled: ``--exclusive`` jobs, licences, advance reservations, ``bf_continue`` and lock yields,
node weights and features.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field

from mfukit.sched.job import Job
from mfukit.sched.policies.base import Policy, PriorityWeights
from mfukit.sched.policies.plan import take_best_fit
from mfukit.sched.policies.slurm_backfill import Planned, backfill_cycle

# slurm.conf(5) defaults (SchedulerParameters).
BF_INTERVAL_S = 30.0
BF_RESOLUTION_S = 60.0
BF_WINDOW_S = 1440 * 60.0
BF_MAX_JOB_TEST = 500
SCHED_INTERVAL_S = 60.0
BATCH_SCHED_DELAY_S = 3.0
MAIN, BACKFILL = "main", "backfill"


@dataclass(frozen=True)
class BackfillSettings:
    """The SchedulerParameters of slurm.conf(5) that the ``slurm`` policy models (defaults as Slurm's)."""

    sched_interval_s: float = SCHED_INTERVAL_S
    bf_interval_s: float = BF_INTERVAL_S
    bf_resolution_s: float = BF_RESOLUTION_S
    bf_window_s: float = BF_WINDOW_S
    bf_max_job_test: int = BF_MAX_JOB_TEST


@dataclass(frozen=True)
class ControllerPass:
    """One pass of a real slurmctld: when, which scheduler, and when it tested each job."""

    at_s: float
    kind: str  # MAIN or BACKFILL
    job_clock_s: dict[int, tuple[float, ...]] = field(default_factory=dict)
    end_s: float | None = None  # when the pass ended
    # the whole epoch second slurmctld's time(2) read for the pass, where it is not the second of
    # at_s: time(2) reads the kernel's coarse clock, up to one tick behind the log's stamp
    clock_s: int | None = None

    def clock(self, job: Job, attempt: int = 0) -> float:
        """When this pass looked at ``job`` (``attempt``: its n-th retry in a backfill cycle); a job
        the pass never reached is looked at when it ended. A simulated pass takes no time."""
        times = self.job_clock_s.get(job.job_id)
        if times is None:
            return self.at_s if self.end_s is None else self.end_s
        return times[min(attempt, len(times) - 1)]


class Controller(ABC):
    """When slurmctld runs its main scheduler and its backfill cycle (times in epoch seconds)."""

    @abstractmethod
    def next_pass(self, now: float) -> float | None:
        """The next instant after ``now`` at which a pass may run, or None."""

    @abstractmethod
    def due(self, now: float) -> list[ControllerPass]:
        """The passes to run at ``now``, in order."""

    @abstractmethod
    def changed(self, now: float, *, queue_pass: bool) -> None:
        """Something changed at ``now`` (a start, an end, a submission, a node); ``queue_pass``: one
        that asks for a main pass (a submission, an end, a node back: ``queue_job_scheduler``)."""

    def released_s(self, job: Job, now: float) -> float:
        """When the nodes of ``job``, which ended at ``now``, stop COMPLETING and take work again."""
        return now


class PeriodicController(Controller):
    """slurmctld's own timers (module docstring), on a grid of whole epoch seconds."""

    def __init__(self, sched_interval_s: float, bf_interval_s: float, batch_sched_delay_s: float) -> None:
        self.sched_interval_s = sched_interval_s
        self.bf_interval_s = bf_interval_s
        self.batch_sched_delay_s = batch_sched_delay_s
        self.last_main_s = -math.inf
        self.requested_s: float | None = None  # when a submission's main pass is due
        self.last_backfill_s: float | None = None
        self.last_change_s = -math.inf

    def changed(self, now: float, *, queue_pass: bool) -> None:
        self.last_change_s = now
        if queue_pass and (self.requested_s is None or self.requested_s < now):
            self.requested_s = math.floor(now) + 1.0  # the background loop's next wake
            if self.last_main_s > -math.inf:
                self.requested_s = max(
                    self.requested_s, math.ceil(self.last_main_s + self.batch_sched_delay_s)
                )

    @staticmethod
    def _grid(now: float, interval_s: float, *, after: bool) -> float:
        """The first multiple of ``interval_s`` at ``now`` or later (strictly later with ``after``: not
        ``now`` nudged up by an ulp, which underflows to 0 at epoch 0)."""
        return (math.floor(now / interval_s) + 1 if after else math.ceil(now / interval_s)) * interval_s

    def _next_full(self, now: float, *, after: bool = False) -> float:
        return self._grid(now, self.sched_interval_s, after=after)

    def _next_backfill(self, now: float, *, after: bool = False) -> float | None:
        last = self.last_backfill_s
        if last is None:
            return self._grid(now, self.bf_interval_s, after=after)
        if self.last_change_s < math.floor(last):
            return None  # nothing new since the last cycle: the thread only keeps checking
        first = last + self.bf_interval_s
        return first + max(0.0, math.floor(now - first) + 1 if after else math.ceil(now - first))

    def next_pass(self, now: float) -> float | None:
        candidates = [self._next_full(now, after=True), self.requested_s]
        backfill = self._next_backfill(now, after=True)
        return min(t for t in [*candidates, backfill] if t is not None)

    def due(self, now: float) -> list[ControllerPass]:
        passes = []
        if now == self._next_full(now) or (self.requested_s is not None and now >= self.requested_s):
            passes.append(ControllerPass(now, MAIN))
            self.last_main_s = now
            self.requested_s = None
        if now == self._next_backfill(now):
            passes.append(ControllerPass(now, BACKFILL))
            self.last_backfill_s = now
        return passes


class LogController(Controller):
    """The passes of a real controller (read from its log), replayed at their instants."""

    def __init__(self, passes: Sequence[ControllerPass], released_s: dict[int, float] | None = None) -> None:
        self.passes = sorted(passes, key=lambda p: p.at_s)
        self.position = 0
        self._released_s = released_s or {}

    def changed(self, now: float, *, queue_pass: bool) -> None:
        """The log fixes when passes ran: nothing the simulation does moves them."""

    def released_s(self, job: Job, now: float) -> float:
        return max(now, self._released_s.get(job.job_id, now))

    def next_pass(self, now: float) -> float | None:
        while self.position < len(self.passes) and self.passes[self.position].at_s <= now:
            self.position += 1  # passes while nothing waited are not run
        return self.passes[self.position].at_s if self.position < len(self.passes) else None

    def due(self, now: float) -> list[ControllerPass]:
        passes = []
        while self.position < len(self.passes) and self.passes[self.position].at_s <= now:
            if self.passes[self.position].at_s == now:
                passes.append(self.passes[self.position])
            self.position += 1
        return passes


class SlurmPolicy(Policy):
    name = "slurm"

    def __init__(
        self,
        weights: PriorityWeights | None = None,
        *,
        bf_interval_s: float = BF_INTERVAL_S,
        bf_resolution_s: float = BF_RESOLUTION_S,
        bf_window_s: float = BF_WINDOW_S,
        bf_max_job_test: int = BF_MAX_JOB_TEST,
        bf_max_time_s: float | None = None,
        sched_interval_s: float = SCHED_INTERVAL_S,
        batch_sched_delay_s: float = BATCH_SCHED_DELAY_S,
        clock_origin_s: int = 0,
        controller: Controller | None = None,
    ) -> None:
        super().__init__(weights)
        self.bf_resolution_s = int(bf_resolution_s)
        self.bf_window_s = int(bf_window_s)
        self.bf_max_job_test = bf_max_job_test
        self.bf_max_time_s = int(bf_interval_s if bf_max_time_s is None else bf_max_time_s)
        self.clock_origin_s = clock_origin_s
        self.controller = controller or PeriodicController(
            sched_interval_s, bf_interval_s, batch_sched_delay_s
        )
        self.planned: list[Planned] = []  # the last backfill cycle's plan for the jobs left waiting
        self._pass = ControllerPass(0.0, MAIN)  # the pass running now
        self._slurm_start_s: dict[int, int] = {}  # running job -> its Slurm start (whole epoch s)
        self.completing_until: dict[int, float] = {}  # node -> when it stops COMPLETING (simulation s)

    # --------------------------------------------------------------------------------- the clock
    def _epoch(self, now: float) -> float:
        return now + self.clock_origin_s

    def next_tick(self, now: float) -> float | None:
        at = self.controller.next_pass(self._epoch(now))
        return None if at is None else at - self.clock_origin_s

    def schedule(self, now: float, *, freed: bool, arrived: int, tick: bool) -> None:
        epoch = self._epoch(now)
        if freed or arrived:
            self.controller.changed(epoch, queue_pass=True)
        for due in self.controller.due(epoch):
            self.run_pass(due, now)

    def run_pass(self, due: ControllerPass, now: float) -> None:
        """Run one pass of the main scheduler or of backfill at ``now`` (simulation time)."""
        self._pass = due
        if due.kind == MAIN:
            self.main_pass(now)
        else:
            self.backfill_pass(now)

    def _second(self, job: Job, attempt: int = 0) -> int:
        return math.floor(self._pass.clock(job, attempt))

    def slurm_end_s(self, job: Job) -> int:
        """A running job's end as Slurm plans it: its start (whole seconds) + its time limit."""
        assert job.start_s is not None
        start = self._slurm_start_s.get(job.job_id)
        if start is None:
            start = math.floor(self._epoch(job.start_s))
        return start + math.ceil(job.limit_s)

    def released(self, job: Job, gpu_s: float) -> None:
        super().released(job, gpu_s)
        self._slurm_start_s.pop(job.job_id, None)
        now = self.sim.now
        until = self.controller.released_s(job, self._epoch(now)) - self.clock_origin_s
        if until > now:
            for node in job.nodes:
                self.completing_until[node] = until

    def completing(self, now: float) -> int:
        """Nodes still COMPLETING at ``now``."""
        mask = 0
        for node, until in list(self.completing_until.items()):
            if until > now:
                mask |= 1 << node
            else:
                del self.completing_until[node]
        return mask

    # ------------------------------------------------------------------------------ main scheduler
    def pick(self, job: Job) -> tuple[int, ...] | None:
        return take_best_fit(self.nodes, job, self.switches_now(job), self.completing(self.sim.now))

    def _started(self, job: Job, nodes: tuple[int, ...], at_s: int, *, backfilled: bool) -> None:
        del self.pending[job.job_id]
        self._slurm_start_s[job.job_id] = at_s
        self.sim.start(job, nodes, backfilled=backfilled)
        self.controller.changed(self._epoch(self.sim.now), queue_pass=False)

    def start(self, job: Job, *, backfilled: bool = False) -> bool:
        picked = self.pick(job)
        if picked is None:
            return False
        self._started(job, picked, self._second(job), backfilled=backfilled)
        return True

    def _pass_second(self, now: float) -> int:
        """The whole epoch second the running pass read: the logged one's ``clock_s``, else ``now``'s."""
        second = self._pass.clock_s
        return math.floor(self._epoch(now)) if second is None else second

    def _eligible(self, now: float) -> list[Job]:
        """The waiting jobs in priority order; a job whose begin time is after the second the pass
        read is not yet eligible (``job_independent``: ``begin_time > now``). A simulated pass reads
        its own instant, which every queued job has reached: nothing to filter."""
        jobs = self.ordered(now)
        if self._pass.clock_s is None:
            return jobs
        second = self._pass_second(now)
        return [job for job in jobs if self._epoch(job.submit_s) <= second]

    def main_pass(self, now: float) -> None:
        self.blocked = None
        for job in self._eligible(now):
            if not self.start(job) and not self.preempt_for(job):
                self.blocked = job
                break

    # ------------------------------------------------------------------------------------ backfill
    def backfill_pass(self, now: float) -> None:
        def start_now(job: Job, nodes: tuple[int, ...], at_s: int) -> None:
            self.nodes.take_nodes(nodes, job.gpus_per_node)
            self._started(job, nodes, at_s, backfilled=True)

        self.planned = backfill_cycle(
            self._eligible(now),
            self.nodes,
            [(self.slurm_end_s(job), job) for job in self.sim.running.values()],
            now_s=self._pass_second(now),
            clock=self._second,
            resolution_s=self.bf_resolution_s,
            window_s=self.bf_window_s,
            max_job_test=self.bf_max_job_test,
            max_time_s=self.bf_max_time_s,
            completing=self.completing(now),
            switches=self.switches_now,
            start=start_now,
        )
