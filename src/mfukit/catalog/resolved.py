"""The scenario of one command, resolved once: the model spec, the node and accelerator, the GPU count
(checked against the node count), the storage tier, beside the typed sections (training with its batch in
sequences and tokens, parallelism, ft with its intervals and rates already in SI units).

Every capability takes a :class:`ResolvedScenario`, or plain values from it; none derives these facts
from the raw :class:`~mfukit.core.scenario.Scenario` again. A search over GPU counts passes the count to
:meth:`ResolvedScenario.cluster`, not a copy of the scenario.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mfukit.catalog import resolve
from mfukit.core.cluster import Cluster
from mfukit.core.hardware import Accelerator, StorageTier, System
from mfukit.core.model import ModelSpec
from mfukit.core.parallelism import Parallelism
from mfukit.core.scenario import ClusterSection, FtSection, Scenario, TrainingSection, load_scenario


@dataclass(frozen=True)
class ResolvedScenario:
    scenario: Scenario
    source: str
    """the scenario file, or "command line" when there is none"""
    model: ModelSpec
    system: System
    accelerator: Accelerator
    num_gpus: int | None
    """``cluster.num_gpus``, or ``cluster.num_nodes`` x GPUs per node (checked to agree); None: not given"""
    storage: StorageTier | None

    @property
    def base_dir(self) -> Path | None:
        """The folder relative paths in the scenario start from (None on the command line)."""
        return Path(self.source).parent if self.source != "command line" else None

    @property
    def training(self) -> TrainingSection:
        return self.scenario.training

    @property
    def ft(self) -> FtSection:
        return self.scenario.ft

    @property
    def parallelism(self) -> Parallelism | None:
        return self.scenario.parallelism

    @property
    def cluster_section(self) -> ClusterSection:
        return self.scenario.cluster

    def cluster(self, num_gpus: int | None = None) -> Cluster:
        """The cluster on ``num_gpus`` GPUs (a candidate count of a search), or on the scenario's count."""
        count = num_gpus if num_gpus is not None else self.num_gpus
        if count is None:
            raise resolve.missing_count(self.source)
        return Cluster(
            system=self.system,
            accelerator=self.accelerator,
            num_gpus=count,
            storage=self.storage,
            failure_rate_per_1000_node_days=self.scenario.cluster.failure_rate_per_1000_node_days,
        )


def resolve_scenario(scenario: Scenario, path: Path | None) -> ResolvedScenario:
    """``scenario`` (loaded from ``path``, or from flags alone when None) with its names looked up in the
    catalog and its counts checked: every error names the scenario field at fault."""
    source = str(path) if path is not None else "command line"
    model = resolve.model_spec(scenario.model, source=source, base_dir=path.parent if path else None)
    system, accelerator = resolve.node(scenario.cluster, source=source)
    return ResolvedScenario(
        scenario=scenario,
        source=source,
        model=model,
        system=system,
        accelerator=accelerator,
        num_gpus=resolve.gpu_count(scenario.cluster, system, source=source),
        storage=resolve.storage(scenario.cluster, source=source),
    )


def load_resolved(path: Path | None, overrides: Mapping[str, Any] | None = None) -> ResolvedScenario:
    """:func:`~mfukit.core.scenario.load_scenario` then :func:`resolve_scenario`."""
    return resolve_scenario(load_scenario(path, overrides), path)
