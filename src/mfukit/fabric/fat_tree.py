"""Folded-Clos (fat-tree) sizing: how many leaf, spine and core switches of radix R connect E endpoints.

Closed forms (non-blocking, every switch of radix R split half down / half up):

* one switch serves R endpoints; two tiers serve R^2/2 (R leaves of R/2 endpoints, R/2 spines);
  three tiers serve R^3/4 (R pods of R/2 leaves and R/2 spines, (R/2)^2 cores);
* the k-ary fat tree of Al-Fares et al. (SIGCOMM 2008, section 3.2) is the full three-tier case:
  k^3/4 hosts and 5k^2/4 switches.

The builder below generalises them to any endpoint count, leaf/spine oversubscription and pod size: a
leaf spreads its uplinks evenly over the spines of its pod (so the spine count must divide the uplinks,
which is why NVIDIA's 3-SU H100 SuperPOD has 16 spines, not 12), and spine j of every pod connects to
core group ("plane") j.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mfukit.errors import InputError


def leaf_split(radix: int, oversubscription: float) -> tuple[int, int]:
    """(down, up) ports of a switch of ``radix`` with down:up = ``oversubscription``:1 (1 = non-blocking)."""
    if oversubscription < 1:
        raise InputError(
            "must be at least 1 (1 = non-blocking)", field="oversubscription", value=oversubscription
        )
    down = math.floor(radix * oversubscription / (1.0 + oversubscription) + 1e-9)
    return down, radix - down


def max_endpoints(radix: int, levels: int) -> int:
    """Endpoints a non-blocking fat tree of ``levels`` tiers of radix-``radix`` switches serves."""
    if levels == 1:
        return radix
    endpoints: int = math.prod([radix] * levels) // math.prod([2] * (levels - 1))
    return endpoints


def levels_needed(endpoints: int, radix: int, *, rail_groups: int = 1) -> int:
    """Fewest non-blocking tiers for ``endpoints`` ports; rail-optimised fabrics (``rail_groups`` > 1)
    need a spine tier even when one switch would hold every port, so that the rails meet."""
    for levels in (1, 2, 3):
        if levels == 1 and rail_groups > 1:
            continue
        if endpoints <= max_endpoints(radix, levels):
            return levels
    raise InputError(
        f"{endpoints} endpoints exceed a 3-tier fat tree of radix {radix} ({max_endpoints(radix, 3)})",
        field="endpoints",
        value=endpoints,
        hint="use a higher-radix switch or split the cluster",
    )


@dataclass(frozen=True)
class Tier:
    """One switch tier: how many switches and how their ports are used."""

    name: str
    switches: int
    radix: int
    down_ports_used: int
    up_ports_used: int

    @property
    def ports(self) -> int:
        return self.switches * self.radix

    @property
    def ports_free(self) -> int:
        return self.ports - self.down_ports_used - self.up_ports_used

    @property
    def oversubscription(self) -> float:
        """Down:up bandwidth ratio of the tier (1 for the top tier, which has no uplinks)."""
        return self.down_ports_used / self.up_ports_used if self.up_ports_used else 1.0


@dataclass(frozen=True)
class Clos:
    """A sized folded Clos: tiers bottom-up and the links between consecutive levels."""

    tiers: list[Tier]
    links: dict[str, int]
    endpoint_ports: int

    @property
    def levels(self) -> int:
        return len(self.tiers)

    @property
    def switches(self) -> int:
        return sum(tier.switches for tier in self.tiers)

    @property
    def max_hops(self) -> int:
        """Switches crossed between the two farthest endpoints."""
        return 2 * self.levels - 1

    @property
    def bisection_ports(self) -> float:
        """Bisection bandwidth in port-rate units: half the narrowest cut between consecutive levels."""
        cuts = [self.endpoint_ports] + [tier.up_ports_used for tier in self.tiers[:-1]]
        return min(cuts) / 2.0

    def tier(self, name: str) -> Tier | None:
        return next((tier for tier in self.tiers if tier.name == name), None)


def _even_divisor(parts: int, at_least: int) -> int | None:
    """The smallest divisor of ``parts`` that is >= ``at_least`` (uplinks spread evenly), if any."""
    for candidate in range(max(1, at_least), parts + 1):
        if parts % candidate == 0:
            return candidate
    return None


def build(
    *,
    leaves: int,
    leaf_down: int,
    leaf_up: int,
    radix: int,
    endpoint_ports: int,
    pod_leaves: int | None = None,
    spine_oversubscription: float = 1.0,
    force_spine: bool = False,
) -> Clos:
    """Size the tiers above ``leaves`` leaves of ``leaf_down`` + ``leaf_up`` ports.

    ``pod_leaves`` groups leaves into pods for a third tier (default: as many as a spine can reach).
    ``force_spine`` keeps a spine tier for a single leaf (rail-optimised fabrics).
    """
    if endpoint_ports > leaves * leaf_down:
        raise InputError(
            f"{endpoint_ports} endpoint ports do not fit on {leaves} leaves of {leaf_down} down ports",
            field="leaves",
            value=leaves,
        )
    leaf_links = leaves * leaf_up
    if leaves == 1 and not force_spine:
        return Clos(
            [Tier("leaf", 1, radix, endpoint_ports, 0)], {"node-leaf": endpoint_ports}, endpoint_ports
        )
    if leaf_up < 1:
        raise InputError("leaves need uplinks to reach each other", field="oversubscription", value=leaf_up)
    spines = _even_divisor(leaf_up, math.ceil(leaf_links / radix))
    if spines is not None and leaves * (leaf_up // spines) <= radix:
        tiers = [
            Tier("leaf", leaves, radix, endpoint_ports, leaf_links),
            Tier("spine", spines, radix, leaf_links, 0),
        ]
        return Clos(tiers, {"node-leaf": endpoint_ports, "leaf-spine": leaf_links}, endpoint_ports)
    spine_down, spine_up = leaf_split(radix, spine_oversubscription)
    pod = min(leaves, pod_leaves or spine_down)
    pods = math.ceil(leaves / pod)
    per_pod = _even_divisor(leaf_up, math.ceil(pod * leaf_up / spine_down))
    if per_pod is None or pod * (leaf_up // per_pod) > spine_down:
        raise InputError(
            f"a pod of {pod} leaves with {leaf_up} uplinks each does not fit spines of {spine_down} down ports",
            field="pod_leaves",
            value=pod,
            hint="use smaller pods (scalable units) or a higher-radix switch",
        )
    per_plane = _even_divisor(spine_up, math.ceil(pods * spine_up / radix))
    if per_plane is None or pods * (spine_up // per_plane) > radix:
        raise InputError(
            f"{pods} pods exceed a 3-tier fat tree of radix {radix} (at most {radix} pods)",
            field="endpoints",
            value=endpoint_ports,
            hint="use a higher-radix switch or split the cluster",
        )
    spines = pods * per_pod
    cores = per_pod * per_plane
    core_links = spines * spine_up
    tiers = [
        Tier("leaf", leaves, radix, endpoint_ports, leaf_links),
        Tier("spine", spines, radix, leaf_links, core_links),
        Tier("core", cores, radix, core_links, 0),
    ]
    links = {"node-leaf": endpoint_ports, "leaf-spine": leaf_links, "spine-core": core_links}
    return Clos(tiers, links, endpoint_ports)


def k_ary_fat_tree(k: int) -> Clos:
    """The full k-ary fat tree (Al-Fares 2008): k^3/4 hosts on switches of k ports."""
    if k < 2 or k % 2:
        raise InputError("must be an even number of ports", field="k", value=k)
    half = k // 2
    hosts = k**3 // 4
    return build(
        leaves=hosts // half, leaf_down=half, leaf_up=half, radix=k, endpoint_ports=hosts, pod_leaves=half
    )
