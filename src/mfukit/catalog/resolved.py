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
    node: resolve.ResolvedNode | None
    """None only where the command takes a scenario without a node (:func:`resolve_scenario`'s
    ``node_optional``); :attr:`system`, :attr:`accelerator` and :meth:`cluster` then say it is missing"""

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

    @property
    def system(self) -> System:
        return self._node().system

    @property
    def accelerator(self) -> Accelerator:
        return self._node().accelerator

    @property
    def num_gpus(self) -> int | None:
        """``cluster.num_gpus``, or ``cluster.num_nodes`` x GPUs per node (checked to agree); None: not given
        (or no node to count them on)"""
        return self.node.num_gpus if self.node is not None else None

    @property
    def storage(self) -> StorageTier | None:
        return self.node.storage if self.node is not None else None

    def cluster(self, num_gpus: int | None = None) -> Cluster:
        """The cluster on ``num_gpus`` GPUs (a candidate count of a search), or on the scenario's count."""
        return self._node().cluster(num_gpus)

    def _node(self) -> resolve.ResolvedNode:
        if self.node is None:
            raise resolve.missing_node(self.source)
        return self.node


def resolve_scenario(
    scenario: Scenario, path: Path | None, *, node_optional: bool = False
) -> ResolvedScenario:
    """``scenario`` (loaded from ``path``, or from flags alone when None) with its names looked up in the
    catalog and its counts checked: every error names the scenario field at fault. ``node_optional``: a
    scenario that names neither a system nor a GPU resolves without a node (the commands that run without
    one) instead of being an error."""
    source = str(path) if path is not None else "command line"
    model = resolve.model_spec(scenario.model, source=source, base_dir=path.parent if path else None)
    section = scenario.cluster
    node = (
        resolve.given_node(section, source=source)
        if node_optional
        else resolve.resolve_node(section, source=source)
    )
    return ResolvedScenario(scenario=scenario, source=source, model=model, node=node)


def load_resolved(
    path: Path | None, overrides: Mapping[str, Any] | None = None, *, node_optional: bool = False
) -> ResolvedScenario:
    """:func:`~mfukit.core.scenario.load_scenario` then :func:`resolve_scenario`."""
    return resolve_scenario(load_scenario(path, overrides), path, node_optional=node_optional)
