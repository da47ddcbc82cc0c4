"""Conservative backfill (Mu'alem & Feitelson, IEEE TPDS 12(6), 2001): every waiting job, in priority
order, gets the earliest reservation that delays no job ahead of it; a job whose reservation starts
now is started. Reservations are planned on time limits and rebuilt from scratch at every pass (as
Slurm's backfill does), so they can only move earlier as jobs end before their limits.
"""

from __future__ import annotations

from mfukit.sched.job import Job
from mfukit.sched.policies.base import Policy, PriorityWeights
from mfukit.sched.policies.plan import Plan, take_best_fit


class ConservativeBackfill(Policy):
    name = "conservative"

    def __init__(self, weights: PriorityWeights | None = None, max_job_test: int = 0) -> None:
        super().__init__(weights)
        self.max_job_test = max_job_test

    def pick(self, job: Job) -> tuple[int, ...] | None:
        """The nodes Slurm would pick now (consecutive best fit; leaves for ``--switches``)."""
        return take_best_fit(self.nodes, job, self.switches_now(job))

    def plan_and_start(self, now: float) -> None:
        """One pass: reserve for each job in order (the first ``max_job_test`` if > 0), start the ones
        whose slot is now."""
        plan = Plan(now, self.nodes, self.sim.expected_ends())
        jumped = False  # once a job waits with a reservation, every later start is a backfill
        for tested, job in enumerate(self.ordered(now), start=1):
            if self.max_job_test and tested > self.max_job_test:
                break
            found = plan.find(job, job.limit_s, self.switches_now(job))
            if found is None:
                continue
            start, picked = found
            if start <= now:
                self.start_on(job, picked, backfilled=jumped)
                plan.reserve(now, now + job.limit_s, picked, job.gpus_per_node)
                continue
            jumped = True
            plan.reserve(start, start + job.limit_s, picked, job.gpus_per_node)

    def schedule(self, now: float, *, freed: bool, arrived: int, tick: bool) -> None:
        self.plan_and_start(now)
