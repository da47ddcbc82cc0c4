"""What the diagnosis knows about a job besides its artifacts: the model, training settings, layout,
cluster and failure model of a scenario file and/or the command's scenario flags (each may be absent;
:mod:`.job` completes them from what the job printed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

from mfukit.catalog import resolve
from mfukit.core.cluster import Cluster
from mfukit.core.model import ModelSpec
from mfukit.core.parallelism import Parallelism
from mfukit.core.scenario import ClusterSection, FtSection, TrainingSection, by_section, load_scenario
from mfukit.core.schema import validate_as


class Job(NamedTuple):
    """What the diagnosis knows about the job besides its artifacts (each part may be absent)."""

    model: ModelSpec | None
    training: TrainingSection | None
    parallelism: Parallelism | None
    cluster: Cluster | None
    ft: FtSection | None
    cluster_flags: ClusterSection | None = None
    """the node or GPU given without a size: the job's own world size completes it"""


def job(scenario_path: Path | None, overrides: dict[str, Any]) -> Job:
    """The model, training settings, layout, cluster and failure model from a scenario and/or flags."""
    if scenario_path is not None or "model.preset" in overrides:
        scenario = load_scenario(scenario_path, overrides)
        source = str(scenario_path) if scenario_path else "command line"
        base = scenario_path.parent if scenario_path else None
        model = resolve.model_spec(scenario.model, source=source, base_dir=base)
        section = scenario.cluster
        cluster = None
        if (section.system or section.gpu) and (section.num_gpus or section.num_nodes):
            cluster = resolve.cluster(section, source=source)
        return Job(model, scenario.training, scenario.parallelism, cluster, scenario.ft, section)
    training = validate_as(
        TrainingSection, by_section(overrides).get("training", {}), source="command line", prefix="training"
    )
    layout_fields = by_section(overrides).get("parallelism", {})
    layout = (
        validate_as(Parallelism, layout_fields, source="command line", prefix="parallelism")
        if layout_fields
        else None
    )
    section = validate_as(
        ClusterSection, by_section(overrides).get("cluster", {}), source="command line", prefix="cluster"
    )
    cluster = None
    if (section.system or section.gpu) and (section.num_gpus or section.num_nodes):
        cluster = resolve.cluster(section, source="command line")
    return Job(None, training, layout, cluster, None, section)
