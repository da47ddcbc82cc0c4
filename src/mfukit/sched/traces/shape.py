"""Turning a trace row into a :class:`~mfukit.sched.job.Job` on the simulated cluster's nodes."""

from __future__ import annotations

import math

from mfukit.sched.job import COMPLETED, Job, shape_for_gpus


class JobFactory:
    """Shapes GPU requests onto ``gpus_per_node``-GPU nodes and fills in missing time limits.

    A row without a time limit gets ``run x missing_limit_factor`` (1.0: perfect estimates), and the
    read says so in its assumptions. Requests larger than ``cluster_gpus`` are refused (None).
    """

    def __init__(self, gpus_per_node: int, cluster_gpus: int, missing_limit_factor: float = 1.0) -> None:
        self.gpus_per_node = gpus_per_node
        self.cluster_gpus = cluster_gpus
        self.missing_limit_factor = missing_limit_factor
        self.missing_limits = 0

    def make(
        self,
        job_id: int,
        submit_s: float,
        run_s: float,
        limit_s: float | None,
        gpus: int,
        *,
        nodes: int | None = None,
        user: str = "",
        partition: str = "batch",
        qos: str = "normal",
        name: str = "",
        exit_state: str = COMPLETED,
    ) -> Job | None:
        if gpus > self.cluster_gpus:
            return None
        if nodes and nodes > 1 and math.ceil(gpus / nodes) <= self.gpus_per_node:
            shape = (nodes, math.ceil(gpus / nodes))
        else:
            shape = shape_for_gpus(gpus, self.gpus_per_node)
        if limit_s is None:
            self.missing_limits += 1
            limit_s = self.assumed_limit_s(run_s)
        return Job(
            job_id,
            submit_s,
            run_s,
            limit_s,
            shape[0],
            shape[1],
            user=user,
            partition=partition or "batch",
            qos=qos or "normal",
            name=name,
            exit_state=exit_state,
        )

    def assumed_limit_s(self, run_s: float) -> float:
        """The time limit of a job the trace gives none: ``run x missing_limit_factor``, whole seconds."""
        return math.ceil(run_s * self.missing_limit_factor)

    def assumptions(self) -> list[str]:
        if not self.missing_limits:
            return []
        return [
            f"{self.missing_limits} job(s) had no time limit in the trace: limit = run time x "
            f"{self.missing_limit_factor:g} (--limit-factor); backfill plans on limits, so this matters"
        ]
