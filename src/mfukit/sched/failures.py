"""Node failures for the scheduling simulator, from the fault-tolerance model (:mod:`mfukit.ft.failures`).

The simulator fails each node as a Poisson process. A failure model's unplanned categories give one
node's rate: per-GPU rates times the GPUs in a node plus per-node rates (failures of a node are a
series system, as for a job: Kokolis et al., HPCA 2025). Categories that need the node replaced
(GPU, NIC, PSU faults) take it out for the repair time; the others (a software bug, an NCCL
timeout) kill its jobs and leave it in service. Per-job categories (planned maintenance in the
shipped presets) are not node failures and are left out. ``[cluster] failure_rate_per_1000_node_days``
(``--failure-rate``) replaces the preset's unplanned categories, as it does in ``mfukit ft``.
"""

from __future__ import annotations

from dataclasses import dataclass

from mfukit import units
from mfukit.ft.failures import job_failures, load_failure_model


@dataclass(frozen=True)
class NodeFailures:
    rate_per_1000_node_days: float
    replacement_frac: float  # the share of failures after which the node must be repaired
    basis: str  # where the rate comes from, for the assumptions
    left_out: tuple[str, ...] = ()  # unplanned per-job categories, which are not node failures


def node_failures(
    *,
    model: str | None,
    rates: dict[str, float],
    node_rate_per_s: float | None,
    gpus_per_node: int,
    source: str,
) -> NodeFailures | None:
    """One node's failure process, from a failure model (a preset name or file), a flat rate, or
    both (the rate replaces the model's unplanned categories); None when neither is given. ``rates`` and
    ``node_rate_per_s`` are per second per unit, as the scenario holds them."""
    if model is None:
        if not node_rate_per_s:
            return None
        return NodeFailures(
            units.per_1000_unit_days(node_rate_per_s),
            1.0,
            "[cluster] failure_rate_per_1000_node_days (--failure-rate)",
        )
    spec = load_failure_model(model, source=source)
    failures = job_failures(
        spec,
        num_gpus=gpus_per_node,
        num_nodes=1,
        overrides=rates,
        node_rate_per_s=node_rate_per_s,
        source=source,
    )
    per_node = [c for c in failures.unplanned if c.per != "job"]
    rate_per_s = sum(failures.rate_per_s(c) for c in per_node)
    replaced_per_s = sum(failures.rate_per_s(c) for c in per_node if c.needs_replacement)
    basis = f"failure model {spec.name} ({spec.display_name}; {spec.source.url})"
    if node_rate_per_s is not None:
        basis = "[cluster] failure_rate_per_1000_node_days (--failure-rate), replacing " + basis
    return NodeFailures(
        units.per_1000_unit_days(rate_per_s),
        replaced_per_s / rate_per_s if rate_per_s > 0 else 1.0,
        basis,
        tuple(c.name for c in failures.unplanned if c.per == "job"),
    )
