"""The network a collective runs on, as explicit tiers: the scale-up domain (NVLink) and the scale-out
fabric (NICs per node, leaf groups, oversubscription, switch tiers), built from the system catalog.

Every bandwidth here is per direction and *effective*: the line rate times the fraction NCCL moves as
busbw (NVLink: NCCL's per-link constant over the line rate, 0.80-0.82; NICs: 0.96).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

from mfukit import catalog
from mfukit.comm.tuning import Arch, CpuVendor, constants
from mfukit.core.hardware import Accelerator, Switch, System
from mfukit.errors import InputError
from mfukit.fabric.fat_tree import leaf_split, levels_needed, max_endpoints

ScaleUpKind = Literal["nvlink", "pci"]
_ARCHES: dict[str, Arch] = {
    "volta": "volta",
    "ampere": "ampere",
    "hopper": "hopper",
    "blackwell": "blackwell",
}


@dataclass(frozen=True)
class CommTopology:
    """Everything the collective model needs to know about one cluster's network."""

    name: str
    arch: Arch | None
    gpus_per_node: int
    domain_gpus: int
    scale_up_kind: ScaleUpKind
    scale_up_link: str  # the scale-up link's name as people say it (NVLink 4, AMD Infinity Fabric 4 / xGMI)
    scale_up_line_bytes_per_s: float
    scale_up_efficiency: float
    nvls_efficiency: float
    nics_per_node: int
    nic_line_bytes_per_s: float
    net_efficiency: float
    rail_optimized: bool = True
    nodes_per_leaf: int | None = None
    oversubscription: float = 1.0
    fabric_levels: int = 2
    switch_latency_s: float = 0.0
    net_step_latency_s: float = 0.0  # extra per network step, for transports slower than NCCL's IB constants
    sharp: bool = False
    cpu: CpuVendor = "intel"

    def __post_init__(self) -> None:
        if self.oversubscription < 1.0:
            raise InputError(
                "must be at least 1 (1 = non-blocking)",
                field="oversubscription",
                value=self.oversubscription,
            )
        if self.domain_gpus % self.gpus_per_node:
            raise InputError("the scale-up domain must hold whole nodes", field="domain_gpus")

    @property
    def nodes_per_domain(self) -> int:
        return self.domain_gpus // self.gpus_per_node

    @property
    def intra_bytes_per_s(self) -> float:
        """Effective scale-up bandwidth of one GPU (NCCL's ring busbw ceiling inside the domain)."""
        return self.scale_up_line_bytes_per_s * self.scale_up_efficiency

    @property
    def nic_bytes_per_s_per_gpu(self) -> float:
        """Each GPU's fair share of its node's NICs, effective (0.96 of line rate)."""
        return self.nics_per_node * self.nic_line_bytes_per_s * self.net_efficiency / self.gpus_per_node

    @property
    def nvls(self) -> bool:
        """NVLink SHARP: an NVSwitch domain of a generation with a non-zero nvlsEfficiency."""
        return self.scale_up_kind == "nvlink" and self.nvls_efficiency > 0 and self.domain_gpus > 2

    def with_options(self, **changes: object) -> CommTopology:
        return replace(self, **changes)  # type: ignore[arg-type]


def switch_for(system: System) -> Switch | None:
    """The catalog switch that speaks the system's scale-out link (the first by name), if any."""
    found = [
        entry
        for entry in catalog.entries("fabrics").values()
        if isinstance(entry, Switch) and entry.link == system.scale_out_fabric
    ]
    return sorted(found, key=lambda s: s.name)[0] if found else None


def scale_out_switch(system: System, ports: int, *, rail_groups: int = 1) -> tuple[Switch | None, str | None]:
    """The catalog switch a non-blocking fat tree of ``ports`` NIC ports is built from, and a note when it is
    not the system's own: the switch of the system's link (:func:`switch_for`) when at most 3 tiers of it hold
    every port; else the smallest-radix switch of the same family with ports at the NIC rate that does; else
    the highest-radix one, noted as needing more than 3 tiers (the collective model then takes 3)."""
    own = switch_for(system)
    rate = system.nic_bytes_per_s
    if own is None or ports <= max_endpoints(own.radix_at(rate), 3):
        return own, None
    family = catalog.link(system.scale_out_fabric).family
    fitting = sorted(
        (
            entry
            for entry in catalog.entries("fabrics").values()
            if isinstance(entry, Switch)
            and catalog.link(entry.link).family == family
            and entry.radix_at(rate) > own.radix_at(rate)
        ),
        key=lambda entry: (entry.radix_at(rate), entry.name),
    )
    built = [entry for entry in fitting if ports <= max_endpoints(entry.radix_at(rate), 3)]
    line = f"{rate * 8 / 1e9:.0f} Gb/s"
    need = (
        f"{ports:,} NIC ports need more than a 3-tier non-blocking fat tree of {own.name} "
        f"({own.radix_at(rate)} ports at {line}: at most {max_endpoints(own.radix_at(rate), 3):,})"
    )
    if built:
        chosen = built[0]
        return chosen, (
            f"{need}; fabric modelled with {chosen.name} ({chosen.radix_at(rate)} ports at {line}, "
            f"{levels_needed(ports, chosen.radix_at(rate), rail_groups=rail_groups)} tiers)"
        )
    if fitting:
        chosen = fitting[-1]
        return chosen, (
            f"{need}, and so does every {family} switch in the catalog; modelled as 3 tiers of {chosen.name}: "
            "split the cluster, oversubscribe the core, or name a larger switch with --switch"
        )
    return own, f"{need}; modelled as 3 tiers: split the cluster or oversubscribe the core"


# how the assumption naming the scale-out network's efficiency starts (a fitted network profile replaces it)
SCALE_OUT_NOTE = "scale-out:"


def from_system(
    system: System,
    accelerator: Accelerator,
    *,
    num_nodes: int,
    switch: Switch | None = None,
    rail_optimized: bool = True,
    oversubscription: float = 1.0,
    sharp: bool = False,
    cpu: CpuVendor = "intel",
) -> tuple[CommTopology, list[str]]:
    """The topology of ``num_nodes`` nodes of ``system``, and the assumptions it rests on."""
    tuning = constants()
    assumptions: list[str] = []
    arch = _ARCHES.get(accelerator.generation.lower())
    scale_up = catalog.link(system.scale_up_fabric, field=f"{system.name}.scale_up_fabric")
    kind: ScaleUpKind = "nvlink" if scale_up.family in ("nvlink", "xgmi", "ici") else "pci"
    if scale_up.family == "nvlink" and arch is not None:
        constants_of = tuning.arch[arch]
        efficiency, nvls_efficiency = constants_of.nvlink_efficiency, constants_of.nvls_efficiency
        assumptions.append(
            f"scale-up: {scale_up.display_name}, {accelerator.scale_up_bytes_per_s / 1e9:.0f} GB/s/dir x "
            f"{efficiency:.3f} (NCCL {constants_of.nvlink_nccl_gb_per_s_per_link} GB/s per "
            f"{constants_of.nvlink_line_gb_per_s_per_link:.0f} GB/s link)"
        )
    else:
        efficiency, nvls_efficiency = tuning.scale_up.generic_efficiency, 0.0
        assumptions.append(
            f"scale-up: {scale_up.display_name} at {efficiency:.2f} of line rate (no NCCL constant for "
            f"{accelerator.generation}; NCCL's ~20 % protocol overhead)"
        )
    out = catalog.link(system.scale_out_fabric, field=f"{system.name}.scale_out_fabric")
    line = (
        f"{SCALE_OUT_NOTE} {system.nics_per_node} x {system.nic_bytes_per_s * 8 / 1e9:.0f} Gb/s per node x "
    )
    if out.nccl is None:
        net_efficiency, net_step_latency_s = tuning.network.efficiency, 0.0
        assumptions.append(f"{line}{net_efficiency} (NIC busbw / line rate, nccl-tests#119)")
    else:  # a transport NCCL's InfiniBand constants do not describe, measured with nccl-tests
        net_efficiency, net_step_latency_s = out.nccl.efficiency, out.nccl.step_latency_s
        assumptions.append(
            f"{line}{net_efficiency:.2f}, +{net_step_latency_s * 1e6:.1f} us per network step (nccl-tests on "
            f"{out.display_name}: {out.nccl.source.url})"
        )
    topology = CommTopology(
        name=system.name,
        arch=arch,
        gpus_per_node=system.gpus_per_node,
        domain_gpus=system.scale_up_domain_gpus,
        scale_up_kind=kind,
        scale_up_link=scale_up.display_name.split(" (")[0],
        scale_up_line_bytes_per_s=accelerator.scale_up_bytes_per_s,
        scale_up_efficiency=efficiency,
        nvls_efficiency=nvls_efficiency,
        nics_per_node=system.nics_per_node,
        nic_line_bytes_per_s=system.nic_bytes_per_s,
        net_efficiency=net_efficiency,
        rail_optimized=rail_optimized,
        oversubscription=oversubscription,
        switch_latency_s=out.latency_s,
        net_step_latency_s=net_step_latency_s,
        sharp=sharp,
        cpu=cpu,
    )
    ports = max(1, num_nodes) * system.nics_per_node
    rail_groups = system.nics_per_node if rail_optimized else 1
    note: str | None = None
    if switch is None:
        switch, note = scale_out_switch(system, ports, rail_groups=rail_groups)
        assumptions.extend([note] if note else [])
    if switch is None or system.nics_per_node == 0:
        if oversubscription > 1.0:
            raise InputError(
                f"no switch for {system.scale_out_fabric} in the catalog, so the leaf size behind the "
                "oversubscription is unknown",
                field="--switch",
                hint="name the leaf switch with --switch",
            )
        assumptions.append("no leaf switch known: non-blocking fabric, 3 switch hops between nodes")
        return topology, assumptions
    radix = switch.radix_at(system.nic_bytes_per_s)
    if radix < 2:
        raise InputError(
            f"{switch.name} has no port at {system.nic_bytes_per_s * 8 / 1e9:.0f} Gb/s",
            field="--switch",
            value=switch.name,
        )
    down, _ = leaf_split(radix, oversubscription)
    nodes_per_leaf = down if rail_optimized else max(1, down // system.nics_per_node)
    fits = ports <= max_endpoints(radix, 3) or note is None  # a named switch too small stays an error
    levels = levels_needed(ports, radix, rail_groups=rail_groups) if fits else 3
    assumptions.append(
        f"fabric: {switch.name} ({radix} ports), {'rail-optimised' if rail_optimized else 'top-of-rack'} "
        f"leaves of {nodes_per_leaf} nodes, {levels} switch tier{'s' if levels > 1 else ''}, "
        f"{oversubscription:g}:1 at the leaf"
    )
    return topology.with_options(nodes_per_leaf=nodes_per_leaf, fabric_levels=levels), assumptions


def switch_hops(topology: CommTopology, num_nodes: int) -> int:
    """Switches on the longest path between two of ``num_nodes`` packed nodes (1 inside a leaf group)."""
    if num_nodes <= 1:
        return 0
    if topology.nodes_per_leaf is not None and num_nodes <= topology.nodes_per_leaf:
        return 1
    return 2 * max(topology.fabric_levels, 2) - 1


def spread(topology: CommTopology, num_gpus: int, gpus_per_domain: int | None) -> tuple[int, int]:
    """(GPUs in each full scale-up domain, number of domains) for a group of ``num_gpus`` GPUs packed
    ``gpus_per_domain`` to a domain (default: as many as one holds); the last domain holds the rest."""
    local = min(num_gpus, topology.domain_gpus) if gpus_per_domain is None else gpus_per_domain
    if local < 1 or local > topology.domain_gpus:
        raise InputError(
            f"must be between 1 and {topology.domain_gpus}", field="gpus_per_domain", value=gpus_per_domain
        )
    local = min(local, num_gpus)
    return local, math.ceil(num_gpus / local)
