"""Scheduling policies as plug-ins: each is a :class:`~mfukit.sched.policies.base.Policy` subclass
registered here by name."""

from __future__ import annotations

from mfukit.sched.policies.base import Policy, PriorityWeights
from mfukit.sched.policies.conservative import ConservativeBackfill
from mfukit.sched.policies.easy import EasyBackfill
from mfukit.sched.policies.fifo import Fifo, StrictPriority
from mfukit.sched.policies.slurm import SlurmPolicy

POLICIES: dict[str, type[Policy]] = {
    cls.name: cls for cls in (Fifo, StrictPriority, EasyBackfill, ConservativeBackfill, SlurmPolicy)
}

__all__ = ["POLICIES", "Policy", "PriorityWeights"]
