"""Scheduling policies as plug-ins: each is a :class:`~mfukit.sched.policies.base.Policy` subclass
registered here by name."""

from __future__ import annotations

from mfukit.errors import UnknownNameError
from mfukit.sched.policies.base import Policy, PriorityWeights
from mfukit.sched.policies.conservative import ConservativeBackfill
from mfukit.sched.policies.easy import EasyBackfill
from mfukit.sched.policies.fifo import Fifo, StrictPriority
from mfukit.sched.policies.slurm import BackfillSettings, SlurmPolicy

POLICIES: dict[str, type[Policy]] = {
    cls.name: cls for cls in (Fifo, StrictPriority, EasyBackfill, ConservativeBackfill, SlurmPolicy)
}


def make_policy(name: str, weights: PriorityWeights, backfill: BackfillSettings) -> Policy:
    """The policy registered as ``name``; ``backfill`` sets the ``slurm`` policy's scheduler timers and
    limits, and the other policies use ``weights`` only when any is set (strict order otherwise)."""
    if name not in POLICIES:
        raise UnknownNameError("policy", name, POLICIES, field="--policy")
    if name == "slurm":
        return SlurmPolicy(
            weights,
            bf_interval_s=backfill.bf_interval_s,
            bf_resolution_s=backfill.bf_resolution_s,
            bf_window_s=backfill.bf_window_s,
            bf_max_job_test=backfill.bf_max_job_test,
            sched_interval_s=backfill.sched_interval_s,
        )
    return POLICIES[name](weights if weights.any else None)


__all__ = ["POLICIES", "BackfillSettings", "Policy", "PriorityWeights", "make_policy"]
