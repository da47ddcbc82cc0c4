"""First come, first served, and strict priority order: start from the head, stop at the first job
that does not fit (no backfill). ``priority`` is the same walk in multifactor order, with QOS
preemption for a blocked job whose QOS may preempt."""

from __future__ import annotations

from mfukit.sched.policies.base import Policy, PriorityWeights

# The example weights of Slurm's multifactor documentation (slurm.schedmd.com/priority_multifactor.html,
# "Configuration"): PriorityWeightAge=1000, Fairshare=10000, JobSize=1000, Partition=10000, QOS=0.
SLURM_DOC_WEIGHTS = PriorityWeights(age=1000, fairshare=10000, job_size=1000, partition=10000, qos=0)


class Fifo(Policy):
    name = "fifo"

    def __init__(self, weights: PriorityWeights | None = None) -> None:
        super().__init__(weights)

    def schedule(self, now: float, *, freed: bool, arrived: int, tick: bool) -> None:
        if not freed and self.arrivals_wait(now, arrived):
            return  # nothing was freed and no new job outranks the blocked head
        self.start_in_order(now)


class StrictPriority(Fifo):
    name = "priority"

    def __init__(self, weights: PriorityWeights | None = None) -> None:
        super().__init__(weights or SLURM_DOC_WEIGHTS)
