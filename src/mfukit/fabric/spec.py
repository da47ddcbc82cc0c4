"""``mfukit fabric check``: read a described topology (YAML or TOML) and say what it yields.

.. code-block:: yaml

    switch: qm9700            # catalog switch SKU of every tier
    system: dgx-h100          # optional: the node's catalog system (twin-port OSFP cages on DGX H100)
    node_optics: twin-port    # optional: twin-port | single-port; default from system, else single-port
    nodes: 127                # or endpoints: 1020
    ports_per_node: 8
    extra_endpoints: 4        # UFM / management ports on the leaves
    tiers:
      - {name: leaf, switches: 32, down: 32, up: 32}
      - {name: spine, switches: 16, down: 64}
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pydantic import Field, model_validator

from mfukit import catalog
from mfukit.core.findings import Finding
from mfukit.core.hardware import Switch
from mfukit.core.scenario import read_document
from mfukit.core.schema import BytesPerSecond, PositiveInt, Strict, validate_as
from mfukit.errors import InputError
from mfukit.fabric.bom import NodeOptics
from mfukit.fabric.fat_tree import Clos, Tier

_NAMES = ("leaf", "spine", "core")


class TierSpec(Strict):
    name: str
    switches: PositiveInt
    down: int = Field(ge=1, description="ports per switch toward the tier below (or the nodes)")
    up: int = Field(default=0, ge=0, description="ports per switch toward the tier above")


class TopologySpec(Strict):
    switch: str
    port_rate: BytesPerSecond | None = None
    system: str | None = None
    node_optics: NodeOptics | None = None
    nodes: PositiveInt | None = None
    ports_per_node: PositiveInt = 1
    endpoints: PositiveInt | None = None
    extra_endpoints: int = Field(default=0, ge=0)
    tiers: list[TierSpec] = Field(min_length=1, max_length=3)

    @model_validator(mode="after")
    def _endpoints_given(self) -> TopologySpec:
        if self.endpoints is None and self.nodes is None:
            raise ValueError("give nodes (with ports_per_node) or endpoints")
        return self

    @property
    def endpoint_ports(self) -> int:
        if self.endpoints is not None:
            return self.endpoints
        return (self.nodes or 0) * self.ports_per_node + self.extra_endpoints


@dataclass
class SpecCheck:
    spec: TopologySpec
    switch: Switch
    port_bytes_per_s: float
    radix: int
    clos: Clos
    capacity: int
    findings: list[Finding] = field(default_factory=list)


def load_spec(path: Path) -> TopologySpec:
    return validate_as(TopologySpec, read_document(path), source=str(path))


def check_spec(spec: TopologySpec, *, source: str) -> SpecCheck:
    """Build the described Clos and report every inconsistency as a finding."""
    switch = catalog.switch(spec.switch, field="switch", source=source)
    rate = spec.port_rate or max(c.port_bytes_per_s for c in switch.port_configs)
    radix = switch.radix_at(rate)
    if radix < 1:
        raise InputError(f"{switch.name} has no port at this rate", source=source, field="port_rate")
    findings: list[Finding] = []
    endpoints = spec.endpoint_ports
    tiers: list[Tier] = []
    links: dict[str, int] = {"node-leaf": endpoints}
    below = endpoints
    for index, tier in enumerate(spec.tiers):
        name = _NAMES[index]
        if tier.down + tier.up > radix:
            findings.append(
                Finding(
                    "fabric_radix_exceeded",
                    "error",
                    f"{tier.name}: {tier.down} + {tier.up} ports exceed the radix",
                    f"{switch.name} has {radix} ports at {rate * 8 / 1e9:.0f} Gb/s",
                    fix="lower the down or up ports per switch",
                )
            )
        down_total = tier.switches * tier.down
        top = index == len(spec.tiers) - 1
        if below > down_total:
            findings.append(
                Finding(
                    "fabric_links_unterminated",
                    "error",
                    f"{tier.name}: {below} links arrive at {down_total} down ports",
                    f"{below - down_total} cables from below have nowhere to land",
                    fix=f"add {tier.name} switches or down ports",
                )
            )
        elif index and below < down_total:
            findings.append(
                Finding(
                    "fabric_ports_idle",
                    "info",
                    f"{tier.name}: {down_total - below} down ports unused",
                    "room to grow the tier below",
                )
            )
        if index and below % tier.switches == 0 and spec.tiers[index - 1].up % tier.switches:
            findings.append(
                Finding(
                    "fabric_uneven_uplinks",
                    "warning",
                    f"{spec.tiers[index - 1].up} uplinks per {spec.tiers[index - 1].name} over {tier.switches} "
                    f"{tier.name} switches",
                    "uplinks do not spread evenly: ECMP / adaptive routing loads some switches more",
                    fix=f"make the {tier.name} count divide the uplinks per switch",
                )
            )
        if top and tier.up:
            findings.append(
                Finding("fabric_top_uplinks", "info", f"{tier.name}: uplinks on the top tier", "left unused")
            )
        up_used = 0 if top else tier.switches * tier.up
        tiers.append(Tier(name, tier.switches, radix, min(below, down_total), up_used, tier.down, tier.up))
        if not top:
            links[f"{name}-{_NAMES[index + 1]}"] = min(
                up_used, spec.tiers[index + 1].switches * spec.tiers[index + 1].down
            )
        below = up_used
    clos = Clos(tiers, links, endpoints)
    capacity = spec.tiers[0].switches * spec.tiers[0].down
    for built in clos.tiers:
        if built.up_ports_used and built.oversubscription > 1.0:
            findings.append(
                Finding(
                    "fabric_oversubscribed",
                    "info",
                    f"{built.name}: {built.oversubscription:.2f}:1 oversubscribed",
                    "all-to-all traffic across this tier gets this fraction less bandwidth",
                )
            )
    return SpecCheck(spec, switch, rate, radix, clos, capacity, findings)
