"""What the diagnosis knows about a job besides its artifacts: the model, training settings, layout,
cluster and failure model of a scenario file and/or the command's scenario flags (each may be absent;
:mod:`.job` completes them from what the job printed). Names and counts are resolved by the one resolver,
:mod:`mfukit.catalog.resolved`."""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

from mfukit.catalog.resolve import ResolvedNode, given_node
from mfukit.catalog.resolved import load_resolved
from mfukit.core.cluster import Cluster
from mfukit.core.model import ModelSpec
from mfukit.core.parallelism import Parallelism
from mfukit.core.scenario import ClusterSection, FtSection, TrainingSection, by_section
from mfukit.core.schema import validate_as


class Job(NamedTuple):
    """What the diagnosis knows about the job besides its artifacts (each part may be absent)."""

    model: ModelSpec | None
    training: TrainingSection | None
    parallelism: Parallelism | None
    cluster: Cluster | None
    ft: FtSection | None
    node: ResolvedNode | None = None
    """the node or GPU given, resolved; without a size the job's own world size completes it"""


def job(scenario_path: Path | None, overrides: dict[str, Any]) -> Job:
    """The model, training settings, layout, cluster and failure model from a scenario and/or flags."""
    if scenario_path is not None or "model.preset" in overrides:
        scene = load_resolved(scenario_path, overrides, node_optional=True)
        return Job(scene.model, scene.training, scene.parallelism, _sized(scene.node), scene.ft, scene.node)
    sections = by_section(overrides)
    training = validate_as(
        TrainingSection, sections.get("training", {}), source="command line", prefix="training"
    )
    layout_fields = sections.get("parallelism", {})
    layout = (
        validate_as(Parallelism, layout_fields, source="command line", prefix="parallelism")
        if layout_fields
        else None
    )
    section = validate_as(
        ClusterSection, sections.get("cluster", {}), source="command line", prefix="cluster"
    )
    node = given_node(section, source="command line")
    return Job(None, training, layout, _sized(node), None, node)


def _sized(node: ResolvedNode | None) -> Cluster | None:
    """The cluster where the node and its GPU count are both given."""
    return node.cluster() if node is not None and node.num_gpus is not None else None
