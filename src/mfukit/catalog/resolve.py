"""Turn the names in a scenario into catalog objects: the model spec, the node, the cluster."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mfukit import catalog
from mfukit.core.cluster import Cluster
from mfukit.core.hardware import Accelerator, StorageTier, System
from mfukit.core.model import ModelSpec, from_hf_config
from mfukit.core.scenario import ClusterSection
from mfukit.core.schema import si, validate_as
from mfukit.errors import InputError, UnknownNameError


def model_spec(section: dict[str, Any], *, source: str, base_dir: Path | None = None) -> ModelSpec:
    """The ``[model]`` section: a catalog ``preset``, an ``hf_config`` path, or inline HF fields,
    with any inline fields overriding the preset or config."""
    fields = dict(section)
    preset = fields.pop("preset", None)
    hf_config = fields.pop("hf_config", None)
    if isinstance(preset, str) and preset.endswith(".json"):
        hf_config, preset = preset, None
    unknown = [key for key in fields if key not in ModelSpec.model_fields]
    if unknown:
        raise UnknownNameError(
            "model field", unknown[0], ModelSpec.model_fields, source=source, field="model"
        )
    if preset is not None and hf_config is not None:
        raise InputError("give preset or hf_config, not both", source=source, field="model")
    if preset is not None:
        base = catalog.model(str(preset), field="model.preset", source=source)
        if not fields:
            return base
        merged = base.model_dump(by_alias=True, exclude={"source"}, exclude_none=True) | fields
        return validate_as(ModelSpec, merged, source=source, prefix="model")
    if hf_config is not None:
        path = Path(str(hf_config))
        if base_dir is not None and not path.is_absolute():
            path = base_dir / path
        spec = _read_hf_config(path)
        if not fields:
            return spec
        merged = spec.model_dump(by_alias=True, exclude={"source"}, exclude_none=True) | fields
        return validate_as(ModelSpec, merged, source=source, prefix="model")
    if not fields:
        raise InputError(
            "is empty",
            source=source,
            field="model",
            hint='set preset = "llama-65b" (see `mfukit catalog list models`), hf_config = "config.json", '
            "or the HF fields inline",
        )
    return validate_as(ModelSpec, {"name": "custom", **fields}, source=source, prefix="model")


def _read_hf_config(path: Path) -> ModelSpec:
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError("HF config file not found", source=str(path), field="model.hf_config") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise InputError(
            f"cannot read HF config: {error}", source=str(path), field="model.hf_config"
        ) from None
    if not isinstance(config, dict):
        raise InputError("is not a JSON object", source=str(path))
    name = path.parent.name if path.name == "config.json" else path.stem
    return from_hf_config(config, name=name or "custom", source=str(path))


def node(section: ClusterSection, *, source: str) -> tuple[System, Accelerator]:
    """The node and accelerator of ``[cluster]`` (``system``, or ``gpu`` with its default node),
    with NIC overrides applied."""
    if section.system is not None:
        system = catalog.system(section.system, field="cluster.system", source=source)
        accelerator = catalog.accelerator(system.accelerator, field=f"{system.name}.accelerator")
        if section.gpu is not None and section.gpu != system.accelerator:
            raise InputError(
                f"system {system.name} carries {system.accelerator}, not {section.gpu}",
                source=source,
                field="cluster.gpu",
                value=section.gpu,
                hint="drop gpu, or choose a system that carries it",
            )
    elif section.gpu is not None:
        accelerator = catalog.accelerator(section.gpu, field="cluster.gpu", source=source)
        if accelerator.default_system is None:
            raise InputError(
                f"{accelerator.name} has no default node in the catalog",
                source=source,
                field="cluster.system",
                hint="set cluster.system",
            )
        system = catalog.system(accelerator.default_system, field=f"{accelerator.name}.default_system")
    else:
        raise missing_node(source)
    update: dict[str, Any] = {}
    if section.nics_per_node is not None:
        update["nics_per_node"] = section.nics_per_node
    if section.nic_bytes_per_s is not None:
        update["nic_bytes_per_s"] = si(section.nic_bytes_per_s)
    if update:
        system = system.model_copy(update=update)
    return system, accelerator


def gpu_count(section: ClusterSection, system: System, *, source: str) -> int | None:
    """The job's GPUs: ``num_gpus``, or ``num_nodes`` x the node's GPUs; when both are given they must agree.
    None when neither is given. The one place the count is derived from the scenario."""
    if section.num_gpus is None:
        return section.num_nodes * system.gpus_per_node if section.num_nodes is not None else None
    if section.num_nodes is not None and section.num_nodes * system.gpus_per_node != section.num_gpus:
        raise InputError(
            f"num_nodes x {system.gpus_per_node} GPUs/node = {section.num_nodes * system.gpus_per_node}, "
            f"not num_gpus = {section.num_gpus}",
            source=source,
            field="cluster.num_nodes",
            value=section.num_nodes,
            hint="give one of num_gpus and num_nodes",
        )
    return section.num_gpus


def storage(section: ClusterSection, *, source: str) -> StorageTier | None:
    """The ``[cluster] storage`` tier, or None when not given."""
    if section.storage is None:
        return None
    return catalog.storage(section.storage, field="cluster.storage", source=source)


@dataclass(frozen=True)
class ResolvedNode:
    """The ``[cluster]`` section resolved: the node and accelerator, the GPU count (checked against the node
    count), the storage tier and the flat failure rate."""

    source: str
    system: System
    accelerator: Accelerator
    num_gpus: int | None
    """``cluster.num_gpus``, or ``cluster.num_nodes`` x GPUs per node (checked to agree); None: not given"""
    storage: StorageTier | None
    node_failure_rate_per_s: float | None

    def cluster(self, num_gpus: int | None = None) -> Cluster:
        """The cluster on ``num_gpus`` GPUs (a candidate count of a search, or the job's own world size), or
        on the scenario's count."""
        count = num_gpus if num_gpus is not None else self.num_gpus
        if count is None:
            raise missing_count(self.source)
        return Cluster(
            system=self.system,
            accelerator=self.accelerator,
            num_gpus=count,
            storage=self.storage,
            node_failure_rate_per_s=self.node_failure_rate_per_s,
        )


def resolve_node(section: ClusterSection, *, source: str) -> ResolvedNode:
    """The node of ``[cluster]`` (``system``, or ``gpu`` with its default node), its GPU count and storage;
    every error names the field at fault."""
    system, accelerator = node(section, source=source)
    return ResolvedNode(
        source=source,
        system=system,
        accelerator=accelerator,
        num_gpus=gpu_count(section, system, source=source),
        storage=storage(section, source=source),
        node_failure_rate_per_s=section.node_failure_rate_per_s,
    )


def given_node(section: ClusterSection, *, source: str) -> ResolvedNode | None:
    """:func:`resolve_node` where ``[cluster]`` names a system or a GPU; None where it names neither (the
    commands that run without a node: ``train``, ``diagnose``, ``watch``)."""
    if section.system is None and section.gpu is None:
        return None
    return resolve_node(section, source=source)


def cluster(section: ClusterSection, *, source: str) -> Cluster:
    """A whole cluster: the node, how many GPUs (``num_gpus`` or ``num_nodes``), storage and failure rate."""
    return resolve_node(section, source=source).cluster()


def missing_count(source: str) -> InputError:
    return InputError(
        "needs num_gpus or num_nodes", source=source, field="cluster", hint="give cluster.num_gpus, e.g. 1024"
    )


def missing_node(source: str) -> InputError:
    return InputError(
        "needs a system or a gpu",
        source=source,
        field="cluster",
        hint="set cluster.system (see `mfukit catalog list systems`) or cluster.gpu",
    )
