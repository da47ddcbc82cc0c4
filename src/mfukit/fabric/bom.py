"""Bill of materials of a fabric: switches, cables by segment, transceivers (``data/optics.toml``), power
and, when prices are given, cost."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Literal

from pydantic import Field

from mfukit.core.hardware import Source, Switch
from mfukit.core.scenario import read_document
from mfukit.core.schema import BytesPerSecond, PositiveInt, Strict, Watts, validate_as
from mfukit.fabric.fat_tree import Clos

DATA = Path(__file__).parent / "data" / "optics.toml"


class Part(Strict):
    description: str
    port_bytes_per_s: BytesPerSecond = Field(alias="port_rate")
    ports: PositiveInt
    power_w: Watts = Field(alias="power")
    url: str


class Usage(Strict):
    switch_node_side: str
    node: str
    node_twin_port: str
    leaf_spine: str
    spine_core: str


class TwinPortNodes(Strict):
    systems: list[str]
    url: str


class Optics(Strict):
    source: Source
    parts: dict[str, Part]
    usage: Usage
    twin_port_nodes: TwinPortNodes


@cache
def optics() -> Optics:
    return validate_as(Optics, read_document(DATA), source=str(DATA))


NodeOptics = Literal["twin-port", "single-port"]


def node_optics_of(system: str | None, given: NodeOptics | None) -> tuple[NodeOptics, str]:
    """The transceiver a node's NIC ports take, and why: as given, else twin-port for the systems whose
    compute ports are twin-port OSFP cages (``data/optics.toml``), else one single-port OSFP per port
    (a ConnectX-7 OSFP adapter card)."""
    if given is not None:
        return given, "as given"
    twin = optics().twin_port_nodes
    if system in twin.systems:
        return "twin-port", f"{system} has twin-port OSFP cages ({twin.url})"
    named = f"{system} is not listed with" if system else "no system named, so no"
    return "single-port", (
        f"{named} twin-port cages: one single-port OSFP per NIC port, as on a ConnectX-7 OSFP card; "
        f"twin-port systems: {', '.join(twin.systems)} (set node_optics)"
    )


@dataclass(frozen=True)
class Prices:
    switch_usd: float | None = None
    optic_usd: float | None = None
    cable_usd: float | None = None


@dataclass(frozen=True)
class OpticLine:
    segment: str
    end: str
    part: str
    modules: int
    power_w: float


@dataclass
class Bom:
    switches: dict[str, int]
    cables: dict[str, int]
    optics: list[OpticLine] = field(default_factory=list)
    switch_power_w: float | None = None  # None: the switch has no published power figure
    optics_counted: bool = True  # False: no transceiver data for the port rate
    cost_usd: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)

    @property
    def transceivers(self) -> int:
        return sum(line.modules for line in self.optics)

    @property
    def optics_power_w(self) -> float | None:
        """The transceivers' power; None when the catalog has no transceiver for the port rate."""
        return sum(line.power_w for line in self.optics) if self.optics_counted else None

    @property
    def power_w(self) -> float | None:
        """Switches plus optics; None when either is unknown (a partial sum would read as the whole)."""
        optics = self.optics_power_w
        return None if self.switch_power_w is None or optics is None else self.switch_power_w + optics

    @property
    def total_cost_usd(self) -> float | None:
        return sum(self.cost_usd.values()) if self.cost_usd else None


def bill_of_materials(
    clos: Clos,
    *,
    switch: Switch,
    port_bytes_per_s: float,
    node_ports: int,
    extra_endpoints: int = 0,
    system: str | None = None,
    node_optics: NodeOptics | None = None,
    prices: Prices | None = None,
) -> Bom:
    """Count what ``clos`` needs: ``node_ports`` NIC ports on nodes, ``extra_endpoints`` single-port hosts
    (UFM, management) on the leaves. The node-side transceiver is ``node_optics`` when given, else what
    the node's cages take (:func:`node_optics_of`)."""
    switches = {tier.name: tier.switches for tier in clos.tiers}
    bom = Bom(switches=switches, cables=dict(clos.links))
    if switch.power_w is None:
        bom.warnings.append(f"{switch.name} has no published power figure: switch power is not counted")
    else:
        bom.switch_power_w = clos.switches * switch.power_w
    catalog = optics()
    if not any(abs(p.port_bytes_per_s - port_bytes_per_s) <= 1 for p in catalog.parts.values()):
        bom.optics_counted = False
        bom.warnings.append(
            f"no transceiver data for {port_bytes_per_s * 8 / 1e9:.0f} Gb/s ports: optics are not counted in "
            "transceivers, power or cost"
        )
    else:
        usage = catalog.usage
        optic, why = node_optics_of(system, node_optics)
        twin = optic == "twin-port"
        bom.assumptions.append(
            f"node-side transceivers: {usage.node_twin_port if twin else usage.node} ({optic}), {why}"
        )
        plan = [
            ("node-leaf", "node", usage.node_twin_port if twin else usage.node, node_ports),
            ("node-leaf", "node", usage.node, extra_endpoints),
            ("node-leaf", "leaf", usage.switch_node_side, clos.links.get("node-leaf", 0)),
            ("leaf-spine", "leaf", usage.leaf_spine, clos.links.get("leaf-spine", 0)),
            ("leaf-spine", "spine", usage.leaf_spine, clos.links.get("leaf-spine", 0)),
            ("spine-core", "spine", usage.spine_core, clos.links.get("spine-core", 0)),
            ("spine-core", "core", usage.spine_core, clos.links.get("spine-core", 0)),
        ]
        for segment, end, name, ports in plan:
            if ports:
                part = catalog.parts[name]
                modules = math.ceil(ports / part.ports)
                bom.optics.append(OpticLine(segment, end, name, modules, modules * part.power_w))
    if prices is not None:
        switch_price = prices.switch_usd if prices.switch_usd is not None else switch.price_usd
        if switch_price is not None:
            bom.cost_usd["switches"] = clos.switches * switch_price
        if prices.optic_usd is not None and bom.optics:
            bom.cost_usd["transceivers"] = bom.transceivers * prices.optic_usd
        if prices.cable_usd is not None:
            bom.cost_usd["cables"] = sum(clos.links.values()) * prices.cable_usd
    return bom
