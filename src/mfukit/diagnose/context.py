"""What every rule sees: the parsed records, the job (model, layout, cluster), the MFU, earlier findings."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TypeVar

from mfukit.core.cluster import Cluster
from mfukit.core.model import ModelSpec
from mfukit.core.parallelism import Parallelism
from mfukit.core.scenario import FtSection, TrainingSection
from mfukit.diagnose.breakdown import RankSummary, median, summaries
from mfukit.diagnose.findings import Finding, Impact
from mfukit.diagnose.mfu import Expected, MfuEstimate
from mfukit.diagnose.network import GradientLoad, NcclCheck, gradient_load, judge_runs
from mfukit.diagnose.records import NcclTestsResult, RankTrace, Record
from mfukit.perf.step_time import COMPUTE_STREAM_PARTS
from mfukit.units import SECONDS_PER_DAY, SECONDS_PER_HOUR

T = TypeVar("T")


@dataclass
class Context:
    records: list[Record]
    mfu: MfuEstimate
    expected: Expected
    model: ModelSpec | None = None
    training: TrainingSection | None = None
    parallelism: Parallelism | None = None
    cluster: Cluster | None = None
    ft: FtSection | None = None
    unrecognised: list[tuple[str, str]] = field(default_factory=list)
    """(file, why no source read it)"""
    findings: list[Finding] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)

    def of(self, kind: type[T]) -> list[T]:
        return [record for record in self.records if isinstance(record, kind)]

    @cached_property
    def ranks(self) -> list[RankSummary]:
        return summaries(self.of(RankTrace))

    @cached_property
    def nccl_checks(self) -> list[NcclCheck]:
        """Every nccl-tests run judged against comm's collective model on the cluster."""
        return judge_runs(self.of(NcclTestsResult), self.cluster)

    @cached_property
    def gradient(self) -> GradientLoad | None:
        """The job's gradient traffic per step and the compute that hides it (None without a model)."""
        compute = median([r.medians_s["compute_s"] for r in self.ranks]) if self.ranks else None
        return gradient_load(
            self.model,
            self.training,
            self.parallelism,
            self.cluster,
            compute_s_per_step=compute,
            healthy_mfu=self.expected.value,
        )

    @cached_property
    def num_gpus(self) -> int | None:
        """GPUs in the job: the cluster's, else the traces' world size."""
        if self.cluster is not None:
            return self.cluster.num_gpus
        worlds = [t.world_size for t in self.of(RankTrace) if t.world_size]
        return max(worlds) if worlds else None

    def impact(self, step_fraction: float, basis: str) -> Impact:
        """A share of step time, and what it costs the whole job in GPU-hours per day."""
        hours = None
        if self.num_gpus is not None:
            hours = step_fraction * self.num_gpus * SECONDS_PER_DAY / SECONDS_PER_HOUR
        return Impact(step_fraction=step_fraction, gpu_hours_per_day=hours, basis=basis)

    def mfu_after(self, recoverable_fraction: float | None) -> float | None:
        """MFU once ``recoverable_fraction`` of today's step time is gone (MFU scales as 1 / step time),
        never above the expected MFU of the performance model of its layout: removing one cause cannot make
        the job beat it (a typical-MFU stand-in is no such ceiling)."""
        if self.mfu.measured is None or recoverable_fraction is None:
            return None
        remaining = max(1e-9, 1.0 - min(recoverable_fraction, 0.99))
        modelled = self.expected.basis in ("performance_model", "best_fitting_layout")
        ceiling = self.expected.value if modelled and self.expected.value is not None else 1.0
        return min(1.0, max(self.mfu.measured, ceiling), self.mfu.measured / remaining)

    @property
    def step_now_s(self) -> float | None:
        """Today's step time: wall clock per step where the log stamps it, else the median logged step."""
        return self.mfu.effective_step_time_s or self.mfu.step_time_s

    def model_compute_s(self) -> float | None:
        """Compute time of one step in the performance model of the job's layout (its GEMMs, memory-bound
        kernels and recompute), None without one."""
        parts = self.expected.breakdown_s
        if parts is None or self.expected.basis != "performance_model":
            return None
        return sum(parts.get(name, 0.0) for name in COMPUTE_STREAM_PARTS)

    def find(self, finding_id: str) -> Finding | None:
        return next((f for f in self.findings if f.id == finding_id), None)

    def find_first(self, finding_ids: Sequence[str]) -> Finding | None:
        """The first of ``finding_ids`` (in that order) that was found."""
        return next((found for i in finding_ids if (found := self.find(i)) is not None), None)
