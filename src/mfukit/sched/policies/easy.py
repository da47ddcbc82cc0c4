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

import math
from bisect import bisect_left, bisect_right, insort
from itertools import islice
from typing import TYPE_CHECKING

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
        self._shapes: dict[int, int] = {}

    def attach(self, sim: Simulation) -> None:
        super().attach(sim)
        count = sim.spec.num_nodes
        # For whole-node reservations: when each node will be entirely free (the latest expected end
        # of its jobs, -inf when idle), and those times sorted over the nodes that take work. The
        # shadow of a k-node request is then the k-th smallest: one index, kept up to date with
        # O(log nodes) per job start and end.
        self._node_ends: list[list[float]] = [[] for _ in range(count)]
        self._free_at: list[float] = [-math.inf] * count
        self._sorted_free_at: list[float] = [-math.inf] * count
        self._sorted_version = sim.nodes.state_changes

    def _move(self, node: int, value: float) -> None:
        before = self._free_at[node]
        if before == value:
            return
        self._free_at[node] = value
        if self._sorted_version == self.nodes.state_changes and self.nodes.accepting[node]:
            # (after a node state change the sorted list is rebuilt at its next use instead)
            ordered = self._sorted_free_at
            del ordered[bisect_left(ordered, before)]
            insort(ordered, value)

    def released(self, job: Job, gpu_s: float) -> None:
        super().released(job, gpu_s)
        assert job.start_s is not None
        end = job.start_s + job.limit_s
        for node in job.nodes:
            ends = self._node_ends[node]
            ends.remove(end)
            self._move(node, max(ends) if ends else -math.inf)

    def _whole_node_shadow(self, head: Job, now: float) -> None:
        nodes = self.nodes
        if self._sorted_version != nodes.state_changes:  # a node went down or came back: rebuild
            self._sorted_free_at = sorted(
                f for f, ok in zip(self._free_at, nodes.accepting, strict=True) if ok
            )
            self._sorted_version = nodes.state_changes
        ordered = self._sorted_free_at
        need = head.num_nodes
        self._shadow_known = True
        if len(ordered) < need:
            self._shadow_s, self._extra_nodes = math.inf, 0
            return
        shadow = max(ordered[need - 1], now)
        self._shadow_s = shadow
        self._extra_nodes = bisect_right(ordered, shadow) - need

    def submit(self, job: Job) -> None:
        super().submit(job)
        self._shapes[job.shape] = self._shapes.get(job.shape, 0) + 1

    def _started(self, job: Job) -> None:
        left = self._shapes[job.shape] - 1
        if left:
            self._shapes[job.shape] = left
        else:
            del self._shapes[job.shape]

    def _try(self, job: Job, backfilled: bool) -> bool:
        picked = self.nodes.take(job.num_nodes, job.gpus_per_node, self.switches_now(job))
        if picked is None:
            return False
        self.sim.start(job, picked, backfilled=backfilled)
        self._started(job)
        end = self.sim.now + job.limit_s
        free_at = self._free_at
        for node in picked:
            self._node_ends[node].append(end)
            if end > free_at[node]:
                self._move(node, end)
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
            self._shadow_s = math.inf
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
        blocked: set[int] = set()  # shapes that do not fit now
        at_least = self.nodes.at_least
        shapes = len(self._shapes)
        # Once the shadow is known and no spare nodes are left, only jobs whose limit ends by the
        # shadow can start: a single comparison rejects the rest without further work.
        limit_ok = -1.0
        head: Job | None = None
        try_start = self._try
        shadow_beyond = self._shadow_beyond
        for job in queue:
            if limit_ok >= 0.0 and job.limit_s > limit_ok:
                continue
            shape = job.shape
            if shape in blocked:
                continue
            need, gpus = job.num_nodes, job.gpus_per_node
            if at_least[gpus] < need:
                if head is None:
                    head = self._head = job
                blocked.add(shape)
                if len(blocked) >= shapes:
                    break
                continue
            if head is None:
                if try_start(job, False):
                    done.append(job.job_id)
                else:
                    head = self._head = job  # fits by count but not by topology: it holds the reservation
                continue
            # inline of _backfill_one (this loop runs millions of times)
            if shadow_beyond(now + job.limit_s):
                started = try_start(job, True)
            elif need <= self._extra_nodes:
                started = try_start(job, True)
                if started:
                    self._extra_nodes -= need
            else:
                started = False
            if self._shadow_known and self._extra_nodes <= 0:
                limit_ok = self._shadow_s - now
            if started:
                done.append(job.job_id)
                if at_least[1] == 0:
                    break
            elif at_least[gpus] < need:
                blocked.add(shape)
        for job_id in done:
            del pending[job_id]
