"""Conservative backfill (Mu'alem & Feitelson, IEEE TPDS 12(6), 2001): every waiting job, in priority
order, gets the earliest reservation that delays no job ahead of it; a job whose reservation starts
now is started. Reservations are planned on time limits and rebuilt from scratch at every pass (as
Slurm's backfill does), so they can only move earlier as jobs end before their limits.
"""

from __future__ import annotations

from mfukit.sched.job import Job
from mfukit.sched.policies.base import INFINITE_S, Policy, PriorityWeights
from mfukit.sched.policies.plan import Plan, consecutive_best_fit, eligible_mask


class ConservativeBackfill(Policy):
    name = "conservative"

    def __init__(self, weights: PriorityWeights | None = None, max_job_test: int = 0) -> None:
        super().__init__(weights)
        self.max_job_test = max_job_test

    def pick(self, job: Job) -> tuple[int, ...] | None:
        """The nodes Slurm would pick now (consecutive best fit); topology requests as the base."""
        if self.switches_now(job) and self.nodes.num_leaves > 1:
            return super().pick(job)
        if not self.nodes.can_fit(job.num_nodes, job.gpus_per_node):
            return None
        picked = consecutive_best_fit(eligible_mask(self.nodes, job.gpus_per_node), job.num_nodes)
        if picked is not None:
            self.nodes.take_nodes(picked, job.gpus_per_node)
        return picked

    def plan_and_start(
        self, now: float, *, window_s: float = INFINITE_S, resolution_s: float = 0.0, max_job_test: int = 0
    ) -> None:
        """One backfill cycle: reserve for each job in order, start the ones whose slot is now.

        ``resolution_s`` > 0 rounds reservation bounds down to that grid (Slurm's ``bf_resolution``);
        ``window_s`` drops jobs that could only start later than ``now + window_s`` (``bf_window``);
        ``max_job_test`` > 0 stops after that many jobs (``bf_max_job_test``).
        """
        plan = Plan(now, self.nodes, self.sim.expected_ends())
        jumped = False  # once a job waits with a reservation, every later start is a backfill
        for tested, job in enumerate(self.ordered(now), start=1):
            if max_job_test and tested > max_job_test:
                break
            found = plan.find(job, job.limit_s, now + window_s, self.switches_now(job))
            if found is None:
                continue
            start, picked = found
            if start <= now:
                self.start_on(job, picked, backfilled=jumped)
                plan.reserve(now, now + job.limit_s, picked, job.gpus_per_node)
                continue
            jumped = True
            end = start + job.limit_s
            if resolution_s > 0:
                start = start // resolution_s * resolution_s
                end = max(end // resolution_s * resolution_s, start + resolution_s)
            plan.reserve(start, end, picked, job.gpus_per_node)

    def schedule(self, now: float, *, freed: bool, arrived: int, tick: bool) -> None:
        self.plan_and_start(now, max_job_test=self.max_job_test)
