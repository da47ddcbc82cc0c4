"""EASY backfill (Lifka 1995, "The ANL/IBM SP scheduling system"; Mu'alem & Feitelson, IEEE TPDS
12(6), 2001): only the first job that cannot start gets a reservation. Its *shadow time* is when
enough GPUs will be free if running jobs end at their time limits; a later job may start now if it
ends (by its limit) before the shadow time, or if it only uses the *extra* nodes the reserved job
will not need then.

Speed: the pending queue is an insertion-ordered dict (FIFO order needs no sort); job shapes
(nodes, GPUs per node) that did not fit are skipped for the rest of a pass, since a pass only ever
takes GPUs; the shadow is kept between events and, when only submissions happened, only the new jobs
are tried. This is what lets one core simulate a million jobs in seconds, not hours.
Topology (``--switches``) is honoured when a job starts; the shadow counts nodes, not switches.
"""

from __future__ import annotations

from itertools import islice
from typing import TYPE_CHECKING

import numpy as np

from mfukit.sched.job import Job
from mfukit.sched.policies.base import Policy, PriorityWeights, ReleaseWalk

if TYPE_CHECKING:
    from mfukit.sched.engine import Simulation


class EasyBackfill(Policy):
    name = "easy"

    def __init__(self, weights: PriorityWeights | None = None) -> None:
        super().__init__(weights)
        self._head: Job | None = None  # the first job that could not start: it holds the reservation
        self._shadow_known = False
        self._shadow_s = 0.0
        self._extra_nodes = 0
        self._walk: ReleaseWalk | None = None
        self._releases: list[tuple[float, int, Job]] = []
        self._position = 0
        self._shapes: dict[tuple[int, int], int] = {}

    def attach(self, sim: Simulation) -> None:
        super().attach(sim)
        count = sim.spec.num_nodes
        # For whole-node reservations: when each node will be entirely free (max expected end of its
        # jobs, -inf when idle). The shadow is then the need-th smallest of these: one partition.
        self._node_ends: list[list[float]] = [[] for _ in range(count)]
        self._free_at = np.full(count, -np.inf)
        self._mask_version = -1
        self._mask = np.ones(count, dtype=bool)

    def released(self, job: Job, gpu_s: float) -> None:
        super().released(job, gpu_s)
        assert job.start_s is not None
        end = job.start_s + job.limit_s
        for node in job.nodes:
            ends = self._node_ends[node]
            ends.remove(end)
            self._free_at[node] = max(ends) if ends else -np.inf

    def _whole_node_shadow(self, head: Job, now: float) -> None:
        nodes = self.nodes
        if self._mask_version != nodes.state_changes:
            self._mask = np.asarray(nodes.accepting, dtype=bool)
            self._mask_version = nodes.state_changes
        free_at = self._free_at[self._mask]
        need = head.num_nodes
        self._shadow_known = True
        if free_at.size < need:
            self._shadow_s, self._extra_nodes = float("inf"), 0
            return
        shadow = max(float(np.partition(free_at, need - 1)[need - 1]), now)
        self._shadow_s = shadow
        self._extra_nodes = int(np.count_nonzero(free_at <= shadow)) - need

    def submit(self, job: Job) -> None:
        super().submit(job)
        shape = (job.num_nodes, job.gpus_per_node)
        self._shapes[shape] = self._shapes.get(shape, 0) + 1

    def _started(self, job: Job) -> None:
        shape = (job.num_nodes, job.gpus_per_node)
        left = self._shapes[shape] - 1
        if left:
            self._shapes[shape] = left
        else:
            del self._shapes[shape]

    def _try(self, job: Job, backfilled: bool) -> bool:
        switches = job.max_switches
        if switches and self.sim.now - job.eligible_s >= job.switch_wait_s > 0:
            switches = 0
        picked = self.nodes.take(job.num_nodes, job.gpus_per_node, switches)
        if picked is None:
            return False
        self.sim.start(job, picked, backfilled=backfilled)
        self._started(job)
        end = self.sim.now + job.limit_s
        free_at = self._free_at
        for node in picked:
            self._node_ends[node].append(end)
            if end > free_at[node]:
                free_at[node] = end
        return True

    def _backfill_one(self, job: Job, now: float) -> int:
        """1: started as a backfill; 0: fits but would delay the reserved job; -1: does not fit now."""
        if not self.nodes.can_fit(job.num_nodes, job.gpus_per_node):
            return -1
        head = self._head
        if head is None:
            return 1 if self._try(job, False) else -1
        if self._shadow_beyond(now + job.limit_s):
            return 1 if self._try(job, True) else -1
        if job.num_nodes <= self._extra_nodes:
            if self._try(job, True):
                self._extra_nodes -= job.num_nodes
                return 1
            return -1
        return 0

    def _shadow_beyond(self, at: float) -> bool:
        """Is the reserved job's shadow time at or after ``at``? Walks expected ends only that far.

        The walk is resumable: it stops at the first expected end past ``at`` and picks up from there
        for the next candidate. Jobs backfilled meanwhile end before the shadow (or use spare nodes,
        which are counted down), so they never change what the walk sees at or after its position.
        """
        head = self._head
        if not self._shadow_known and head is not None and head.gpus_per_node == self.nodes.gpus_per_node:
            self._whole_node_shadow(head, self.sim.now)
        if self._shadow_known:
            return self._shadow_s >= at
        walk = self._walk
        if walk is None:
            assert self._head is not None
            walk = self._walk = ReleaseWalk(self.nodes, self._head)
            self._releases = list(self.sim.by_limit_end)
            self._position = 0
        releases = self._releases
        self._position = walk.advance(releases, self._position, at)
        if walk.fits:
            self._shadow_known = True
            self._shadow_s = releases[self._position - 1][0]
            self._extra_nodes = walk.spare
        elif self._position >= len(releases):
            self._shadow_known = True  # it never fits: nothing it could be delayed by
            self._shadow_s = float("inf")
            self._extra_nodes = 0
        return self._shadow_s >= at if self._shadow_known else True

    def schedule(self, now: float, *, freed: bool, arrived: int, tick: bool) -> None:
        pending = self.pending
        if not freed and self._head is not None and self._submit_order and not self.weights.any:
            # Only submissions since the last pass: the reserved job and its shadow are unchanged.
            for job in list(islice(reversed(pending.values()), arrived)):
                if self._backfill_one(job, now) == 1:
                    del pending[job.job_id]
            return
        queue = self.ordered(now) if (self.weights.any or not self._submit_order) else pending.values()
        done: list[int] = []
        self._head = None
        self._shadow_known = False
        self._walk = None
        blocked: set[int] = set()  # shapes (nodes * 1024 + GPUs per node) that do not fit now
        at_least = self.nodes.at_least
        shapes = len(self._shapes)
        for job in queue:
            need, gpus = job.num_nodes, job.gpus_per_node
            shape = need * 1024 + gpus
            if shape in blocked:
                continue
            if at_least[gpus] < need:
                if self._head is None:
                    self._head = job
                blocked.add(shape)
                if len(blocked) >= shapes:
                    break
                continue
            if self._head is None:
                if self._try(job, False):
                    done.append(job.job_id)
                else:
                    self._head = job  # fits by count but not by topology: it holds the reservation
                continue
            # inline of _backfill_one (this loop runs millions of times)
            if self._shadow_beyond(now + job.limit_s):
                started = self._try(job, True)
            elif need <= self._extra_nodes:
                started = self._try(job, True)
                if started:
                    self._extra_nodes -= need
            else:
                continue
            if started:
                done.append(job.job_id)
                if at_least[1] == 0:
                    break
            else:
                blocked.add(shape)
        for job_id in done:
            del pending[job_id]
