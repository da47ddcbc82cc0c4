"""What every policy shares: the pending queue, Slurm's multifactor priority, fair-share usage,
"when would this request fit if these jobs released their GPUs", and QOS preemption with requeue.

Priority follows Slurm's ``priority/multifactor`` (slurm.schedmd.com/priority_multifactor.html):
``priority = W_age*age + W_fairshare*fs + W_jobsize*size + W_partition*partition + W_qos*qos - nice``,
each factor in [0, 1], truncated to an integer as Slurm's uint32 is. Age saturates at ``max_age_s``
(PriorityMaxAge, default 7 days). Job size is Slurm's default (not SMALL_RELATIVE_TO_TIME): the mean
of the job's node fraction and its CPU fraction of the cluster; the simulator counts GPUs in place
of CPUs, which is the same number for whole-node jobs. Partition and QOS factors are PriorityJobFactor
and QOS priority normalized to the largest configured. Fair-share is the classic formula
``F = 2**(-U/S)`` with usage decayed by ``PriorityDecayHalfLife`` (7 days) and equal shares per user;
Slurm's default since 19.05 is Fair Tree, which ranks users by the same usage/share ratio.
Queue order is Slurm's: partition PriorityTier, then priority, then submit time, then job id.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import TYPE_CHECKING, ClassVar

from mfukit.sched.job import Job
from mfukit.sched.nodes import Nodes
from mfukit.units import SECONDS_PER_DAY

if TYPE_CHECKING:
    from mfukit.sched.engine import Simulation

INFINITE_S = float("inf")


@dataclass(frozen=True)
class PriorityWeights:
    """Slurm's PriorityWeight* knobs; all zero gives first-come-first-served order."""

    age: int = 0
    fairshare: int = 0
    job_size: int = 0
    partition: int = 0
    qos: int = 0
    max_age_s: float = 7 * SECONDS_PER_DAY
    decay_half_life_s: float = 7 * SECONDS_PER_DAY
    favor_small: bool = False

    @property
    def any(self) -> bool:
        return bool(self.age or self.fairshare or self.job_size or self.partition or self.qos)


class FairShare:
    """Half-life-decayed GPU-seconds per user (usage decays in place; only ratios matter)."""

    def __init__(self, half_life_s: float) -> None:
        self.half_life_s = half_life_s
        self.usage: dict[str, float] = {}
        self.total = 0.0
        self.t_last = 0.0

    def _decay_to(self, now: float) -> None:
        if now > self.t_last and self.total > 0:
            factor = 0.5 ** ((now - self.t_last) / self.half_life_s)
            self.usage = {user: value * factor for user, value in self.usage.items()}
            self.total *= factor
        self.t_last = max(self.t_last, now)

    def charge(self, user: str, gpu_s: float, now: float) -> None:
        self._decay_to(now)
        self.usage[user] = self.usage.get(user, 0.0) + gpu_s
        self.total += gpu_s

    def factor(self, user: str) -> float:
        """Classic fair-share ``2**(-U/S)``: U the user's share of usage, S = 1 / users seen."""
        if self.total <= 0:
            return 1.0
        share = 1.0 / max(1, len(self.usage))
        return float(0.5 ** ((self.usage.get(user, 0.0) / self.total) / share))


class Policy(ABC):
    """A scheduling policy: it keeps the pending queue and starts jobs through the simulation."""

    name: ClassVar[str]

    def __init__(self, weights: PriorityWeights | None = None) -> None:
        self.weights = weights or PriorityWeights()
        self.pending: dict[int, Job] = {}
        self._submit_order = True  # the dict is in (submit, id) order until a job is requeued
        self.fairshare = FairShare(self.weights.decay_half_life_s)
        self.blocked: Job | None = None  # the job that ended the last head-of-line pass

    def attach(self, sim: Simulation) -> None:
        self.sim = sim
        self.nodes: Nodes = sim.nodes
        spec = sim.spec
        self._part_max = max([p.job_factor for p in spec.partitions] + [1])
        self._qos_max = max([q.priority for q in spec.qos] + [1])
        self._tiers = {p.name: p.tier for p in spec.partitions}
        self._one_tier = len(set(self._tiers.values())) <= 1
        self._preempts = any(q.preempts for q in spec.qos)

    def submit(self, job: Job) -> None:
        if job.restarts:
            self._submit_order = False
        self.pending[job.job_id] = job

    def released(self, job: Job, gpu_s: float) -> None:
        if self.weights.fairshare:
            self.fairshare.charge(job.user, gpu_s, self.sim.now)

    def next_tick(self, now: float) -> float | None:
        """When the policy wants ``schedule(tick=True)`` next (periodic work), or None."""
        return None

    @abstractmethod
    def schedule(self, now: float, *, freed: bool, arrived: int, tick: bool) -> None:
        """Start what the policy will, given what happened at ``now``."""

    # ------------------------------------------------------------------------------------- priority
    def priority(self, job: Job, now: float) -> int:
        w = self.weights
        if not w.any:
            return 1
        spec = self.sim.spec
        value = 0.0
        if w.age:
            value += w.age * min(max(now - job.eligible_s, 0.0), w.max_age_s) / w.max_age_s
        if w.job_size:
            size = (job.num_nodes / spec.num_nodes + job.num_gpus / spec.num_gpus) / 2
            value += w.job_size * ((1.0 - size) if w.favor_small else size)
        if w.partition:
            value += w.partition * spec.partition(job.partition).job_factor / self._part_max
        if w.qos:
            value += w.qos * spec.qos_named(job.qos).priority / self._qos_max
        if w.fairshare:
            value += w.fairshare * self.fairshare.factor(job.user)
        return max(1, int(value - job.nice))

    def ordered(self, now: float) -> list[Job]:
        """Pending jobs in Slurm's order: PriorityTier, priority, submit time, job id."""
        jobs = list(self.pending.values())
        if self._in_submit_order():
            return jobs
        return sorted(jobs, key=lambda j: self.sort_key(j, now))

    def _in_submit_order(self) -> bool:
        """Is the pending dict already in queue order (no priorities, no requeues, one tier)?"""
        return not self.weights.any and self._submit_order and self._one_tier

    def sort_key(self, job: Job, now: float) -> tuple[int, int, float, int]:
        return (-self._tiers.get(job.partition, 1), -self.priority(job, now), job.submit_s, job.job_id)

    def start_in_order(self, now: float) -> None:
        """Start jobs in queue order until one neither fits nor can preempt its way in.

        This is Slurm's main scheduler too: a blocked job removes its partition's nodes from the rest
        of the pass (job_scheduler.c: "Do not schedule more jobs in this partition or on nodes in this
        partition"), and every partition here spans every node, so the pass ends there.
        """
        self.blocked = None
        if self._preempts or not self._in_submit_order():
            for job in self.ordered(now):
                if not self.start(job) and not self.preempt_for(job):
                    self.blocked = job
                    break
            return
        # first come, first served without preemption: walk the queue itself (no copy of what may be
        # a very long queue) and remove the started jobs afterwards
        started = []
        for job in self.pending.values():
            picked = self.pick(job)
            if picked is None:
                self.blocked = job
                break
            self.sim.start(job, picked)
            started.append(job.job_id)
        for job_id in started:
            del self.pending[job_id]

    def pick(self, job: Job) -> tuple[int, ...] | None:
        """Take nodes for ``job`` now (best fit), or None when it does not fit."""
        return self.nodes.take(job.num_nodes, job.gpus_per_node, self.switches_now(job))

    def switches_now(self, job: Job) -> int:
        """The job's ``--switches`` limit, lifted once it has waited its ``switch_wait_s``."""
        if job.max_switches and self.sim.now - job.eligible_s >= job.switch_wait_s > 0:
            return 0
        return job.max_switches

    def arrivals_wait(self, now: float, arrived: int) -> bool:
        """After only submissions: do all of the last ``arrived`` jobs queue behind the blocked job?

        Then a head-of-line pass would start nothing, and it is skipped. Priorities are compared at
        ``now``; the age factor grows alike for every job until it saturates.
        """
        if self.blocked is None or self.blocked.job_id not in self.pending:
            return False
        bar = self.sort_key(self.blocked, now)
        newest = islice(reversed(self.pending.values()), arrived)
        return all(self.sort_key(job, now) > bar for job in newest)

    # ----------------------------------------------------------------------------------- placement
    def start(self, job: Job, *, backfilled: bool = False) -> bool:
        """Start ``job`` now if it fits (honouring ``--switches`` until its wait runs out)."""
        picked = self.pick(job)
        if picked is None:
            return False
        del self.pending[job.job_id]
        self.sim.start(job, picked, backfilled=backfilled)
        return True

    def start_on(self, job: Job, nodes: tuple[int, ...], *, backfilled: bool) -> None:
        self.nodes.take_nodes(nodes, job.gpus_per_node)
        del self.pending[job.job_id]
        self.sim.start(job, nodes, backfilled=backfilled)

    def fit_after(self, job: Job, releases: Iterable[tuple[float, Job]]) -> tuple[int, float, int]:
        """Walk ``releases`` (time, job) in order until ``job`` would fit on the freed GPUs.

        Returns (how many releases were needed, the time of the last one, spare nodes then);
        (-1, inf, 0) when it never fits.
        """
        walk = ReleaseWalk(self.nodes, job)
        ordered = [(at, other.job_id, other) for at, other in releases]
        used = walk.advance(ordered, 0, INFINITE_S)
        if not walk.fits:
            return -1, INFINITE_S, 0
        return used, ordered[used - 1][0] if used else self.sim.now, walk.spare

    def preempt_for(self, job: Job) -> bool:
        """QOS preemption with requeue: free room for ``job`` by requeueing the fewest lower-QOS jobs.

        Candidates are running jobs whose QOS the job's QOS lists in ``preempts``, lowest QOS priority
        first and youngest first within one QOS (Slurm's preempt/qos ordering); nothing is preempted
        unless the job then fits.
        """
        spec = self.sim.spec
        allowed = spec.qos_named(job.qos).preempts
        if not allowed:
            return False
        candidates = sorted(
            (j for j in self.sim.running.values() if j.qos in allowed),
            key=lambda j: (spec.qos_named(j.qos).priority, -(j.start_s or 0.0), -j.job_id),
        )
        needed, _, _ = self.fit_after(job, ((0.0, victim) for victim in candidates))
        if needed <= 0:
            return False
        for victim in candidates[:needed]:
            self.sim.preempt(victim)
        return self.start(job)


class ReleaseWalk:
    """How many nodes could host a request as running jobs hand back their GPUs one by one.

    Starts from the free GPUs now; :meth:`advance` hands back the GPUs of jobs in the order given
    until the request fits.
    """

    __slots__ = ("accepting", "free", "gpus", "have", "need")

    def __init__(self, nodes: Nodes, job: Job) -> None:
        self.need = job.num_nodes
        self.gpus = job.gpus_per_node
        self.have = nodes.count_fit(self.gpus)
        self.free = list(nodes.free)  # free GPUs per node at the walk's position
        self.accepting = nodes.accepting

    @property
    def fits(self) -> bool:
        return self.have >= self.need

    @property
    def spare(self) -> int:
        """Nodes with room beyond what the request needs."""
        return self.have - self.need

    def advance(self, releases: Sequence[tuple[float, int, Job]], position: int, before_s: float) -> int:
        """Apply releases from ``position`` on while their time is before ``before_s``, stopping at the
        first one after which the request fits; return the position after the last one applied."""
        gpus = self.gpus
        free = self.free
        accepting = self.accepting
        have = self.have
        need = self.need
        count = len(releases)
        while have < need and position < count:
            at, _, job = releases[position]
            if at >= before_s:
                break
            position += 1
            add = job.gpus_per_node
            for node in job.nodes:
                if accepting[node]:
                    before = free[node]
                    free[node] = before + add
                    if before < gpus <= before + add:
                        have += 1
        self.have = have
        return position
