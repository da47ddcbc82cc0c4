"""Design a compute fabric the way NVIDIA's DGX SuperPOD reference architectures do.

Rail-optimised: nodes come in scalable units (SU) of one leaf's worth (32 nodes on a 64-port leaf at
1:1); NIC *i* of every node in an SU goes to leaf *i* of that SU, so same-rail traffic is one switch hop
away, and each SU's leaves form one pod when a third tier is needed. A partial SU is built whole
(leaves and leaf-spine cables) so that routing stays uniform, as the H100 RA prescribes. Top-of-rack:
all NICs of a node on one leaf, leaves filled with whole nodes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mfukit.core.hardware import Switch
from mfukit.errors import InputError
from mfukit.fabric.fat_tree import Clos, build, leaf_split


@dataclass(frozen=True)
class FabricRequest:
    """What a network has to connect, and with which switch."""

    name: str
    nodes: int
    ports_per_node: int
    port_bytes_per_s: float
    switch: Switch
    rail_optimized: bool = True
    leaf_oversubscription: float = 1.0
    spine_oversubscription: float = 1.0
    nodes_per_su: int | None = None
    extra_endpoints: int = 0

    def __post_init__(self) -> None:
        if self.nodes < 1:
            raise InputError("must be at least 1", field="nodes", value=self.nodes)
        if self.ports_per_node < 1:
            raise InputError("must be at least 1", field="ports_per_node", value=self.ports_per_node)
        if self.extra_endpoints < 0:
            raise InputError("must not be negative", field="extra_endpoints", value=self.extra_endpoints)


@dataclass(frozen=True)
class FabricDesign:
    request: FabricRequest
    clos: Clos
    radix: int
    leaf_down: int
    leaf_up: int
    scalable_units: int | None
    nodes_per_su: int | None

    @property
    def endpoint_ports(self) -> int:
        return self.clos.endpoint_ports

    @property
    def bisection_bytes_per_s(self) -> float:
        return self.clos.bisection_ports * self.request.port_bytes_per_s

    @property
    def oversubscription(self) -> dict[str, float]:
        """Down:up ratio of each tier that has uplinks."""
        return {tier.name: tier.oversubscription for tier in self.clos.tiers if tier.up_ports_used}

    @property
    def node_slots(self) -> int:
        """Node positions the built fabric has room for."""
        leaf = self.clos.tiers[0]
        if self.request.rail_optimized:
            return leaf.switches // self.request.ports_per_node * self.leaf_down
        return leaf.switches * (self.leaf_down // self.request.ports_per_node)


def design(request: FabricRequest) -> FabricDesign:
    """Size the tiers of ``request`` (the smallest fabric with the requested oversubscription)."""
    radix = request.switch.radix_at(request.port_bytes_per_s)
    if radix < 2:
        raise InputError(
            f"{request.switch.name} has no ports at {request.port_bytes_per_s * 8 / 1e9:.0f} Gb/s",
            field="--switch",
            value=request.switch.name,
        )
    down, up = leaf_split(radix, request.leaf_oversubscription)
    rails = request.ports_per_node
    extra_slots = math.ceil(request.extra_endpoints / rails)
    endpoints = request.nodes * rails + request.extra_endpoints
    if request.rail_optimized:
        su = request.nodes_per_su or down
        if su < 1:
            raise InputError("must be at least 1", field="--su-nodes", value=su)
        per_rail = math.ceil(su / down)
        units = math.ceil((request.nodes + extra_slots) / su)
        leaves = units * rails * per_rail
        clos = build(
            leaves=leaves,
            leaf_down=down,
            leaf_up=up,
            radix=radix,
            endpoint_ports=endpoints,
            pod_leaves=rails * per_rail,
            spine_oversubscription=request.spine_oversubscription,
            force_spine=True,
        )
        return FabricDesign(request, clos, radix, down, up, units, su)
    per_leaf = down // rails
    if per_leaf < 1:
        raise InputError(
            f"a node's {rails} ports do not fit the {down} down ports of one {request.switch.name} leaf",
            field="--top-of-rack",
            hint="use a rail-optimised design",
        )
    leaves = math.ceil((request.nodes + extra_slots) / per_leaf)
    clos = build(
        leaves=leaves,
        leaf_down=down,
        leaf_up=up,
        radix=radix,
        endpoint_ports=endpoints,
        spine_oversubscription=request.spine_oversubscription,
    )
    return FabricDesign(request, clos, radix, down, up, None, None)
