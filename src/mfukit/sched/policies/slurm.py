"""``slurm``: Slurm's own two schedulers (sched/backfill with select/cons_tres), as documented in
slurm.conf(5) SchedulerParameters and implemented in job_scheduler.c and backfill.c.

* The main scheduler runs on submission and, after a completion or node change, at the controller's
  next background pass (``_slurmctld_background`` wakes once a second: a job that ends frees its
  nodes for the next whole second); it walks pending jobs in priority order, starting each that fits now; the first that does not fit ends the pass,
  since its partition's nodes are withheld from every later job (all partitions span all nodes here).
  A blocked job whose QOS may preempt requeues lower-QOS jobs (PreemptType=preempt/qos,
  PreemptMode=REQUEUE).
* Backfill runs every ``bf_interval`` while jobs wait (on a grid from time 0): it rebuilds a map of future free nodes from
  running jobs' *time limits*, then walks up to ``bf_max_job_test`` jobs in priority order; a job that
  fits now without delaying any reservation starts (flag SchedBackfill), every other job gets a
  reservation if it can start within ``bf_window``, with bounds rounded down to ``bf_resolution``.
  That makes Slurm's backfill conservative, not EASY.

A backfill cycle that would see exactly the state of the previous one (nothing started, ended or
arrived; no age weight to reorder the queue) is skipped: it could only find the same answer.

Not modelled: ``default_queue_depth`` (every event pass tests the whole queue), the periodic
``sched_interval`` pass (it would find nothing the event passes did not), ``bf_continue`` and yields,
node weights, and licences.
"""

from __future__ import annotations

import math

from mfukit.sched.policies.base import PriorityWeights
from mfukit.sched.policies.conservative import ConservativeBackfill

# slurm.conf(5) defaults (SchedulerParameters).
BF_INTERVAL_S = 30.0
BF_RESOLUTION_S = 60.0
BF_WINDOW_S = 1440 * 60.0
BF_MAX_JOB_TEST = 500
BACKGROUND_LOOP_S = 1.0  # _slurmctld_background() wakes once a second


class SlurmPolicy(ConservativeBackfill):
    name = "slurm"

    def __init__(
        self,
        weights: PriorityWeights | None = None,
        *,
        bf_interval_s: float = BF_INTERVAL_S,
        bf_resolution_s: float = BF_RESOLUTION_S,
        bf_window_s: float = BF_WINDOW_S,
        bf_max_job_test: int = BF_MAX_JOB_TEST,
    ) -> None:
        super().__init__(weights)
        self.bf_interval_s = bf_interval_s
        self.bf_resolution_s = bf_resolution_s
        self.bf_window_s = bf_window_s
        self.bf_max_job_test = bf_max_job_test
        self._queued = False
        self._next_backfill = 0.0
        self._last_backfill_state: tuple[int, int] | None = None

    def next_tick(self, now: float) -> float | None:
        """The controller's background loop (once a second) when a main pass is queued; else the
        next backfill cycle, on a ``bf_interval`` grid."""
        backfill = (now // self.bf_interval_s + 1) * self.bf_interval_s
        if self._queued:
            return min(backfill, math.floor(now) + BACKGROUND_LOOP_S)
        return backfill

    def schedule(self, now: float, *, freed: bool, arrived: int, tick: bool) -> None:
        # A submission is tested at once; a completion only queues a pass for the controller's
        # background loop, which wakes once a second.
        self._queued = self._queued or freed
        if (arrived and not self.arrivals_wait(now, arrived)) or (tick and self._queued):
            self._queued = False
            self.start_in_order(now)
        if tick and self.pending and now >= self._next_backfill:
            self._next_backfill = (now // self.bf_interval_s + 1) * self.bf_interval_s
            state = (self.sim.changes, self.nodes.state_changes)
            if state == self._last_backfill_state and not self.weights.age:
                return  # nothing started, ended or arrived since the last cycle: it would start nothing
            self._last_backfill_state = state
            self.plan_and_start(
                now,
                window_s=self.bf_window_s,
                resolution_s=self.bf_resolution_s,
                max_job_test=self.bf_max_job_test,
            )
