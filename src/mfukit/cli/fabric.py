"""``mfukit fabric``: design a compute fabric (leaf/spine/core, cables, optics, power) or check a described one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from mfukit import catalog, units
from mfukit.cli.common import cluster_from_flags, emit, format_option, scenario_options
from mfukit.cli.render import Format
from mfukit.core.results import Output, Table, findings_table, shown
from mfukit.errors import InputError
from mfukit.fabric.bom import Bom, Prices, bill_of_materials
from mfukit.fabric.draw import draw
from mfukit.fabric.fat_tree import Clos
from mfukit.fabric.rail import FabricDesign, FabricRequest, design
from mfukit.fabric.spec import check_spec, load_spec


@click.group()
def fabric() -> None:
    """Fat-tree and rail-optimised fabric designer, and checks of described topologies."""


def _tier_result(clos: Clos, name: str) -> dict[str, Any] | None:
    tier = clos.tier(name)
    if tier is None:
        return None
    return {
        "switches": tier.switches,
        "radix": tier.radix,
        "down_ports_used": tier.down_ports_used,
        "up_ports_used": tier.up_ports_used,
        "ports_free": tier.ports_free,
        "oversubscription": tier.oversubscription if tier.up_ports_used else None,
    }


def _fabric_result(clos: Clos, bom: Bom, port_bytes_per_s: float) -> dict[str, Any]:
    return {
        "tiers": clos.levels,
        "leaf": _tier_result(clos, "leaf"),
        "spine": _tier_result(clos, "spine"),
        "core": _tier_result(clos, "core"),
        "switches": clos.switches,
        "endpoint_ports": clos.endpoint_ports,
        "cables": dict(clos.links),
        "transceivers": {"total": bom.transceivers, "by_segment": bom.optics},
        "bisection_bytes_per_s": clos.bisection_ports * port_bytes_per_s,
        "oversubscription": {t.name: t.oversubscription for t in clos.tiers if t.up_ports_used},
        "max_switch_hops": clos.max_hops,
        "power_w": bom.power_w,
        "switch_power_w": bom.switch_power_w,
        "optics_power_w": bom.optics_power_w,
        "cost_usd": bom.total_cost_usd,
        "cost_breakdown_usd": bom.cost_usd,
    }


def _tables(title: str, clos: Clos, bom: Bom) -> list[Table]:
    tiers = Table(
        f"{title}: tiers",
        ["tier", "switches", "radix", "down used", "up used", "free", "down:up"],
        csv_columns=[
            "tier",
            "switches",
            "radix",
            "down_ports_used",
            "up_ports_used",
            "ports_free",
            "oversubscription",
        ],
    )
    for tier in clos.tiers:
        tiers.add(
            tier.name,
            tier.switches,
            tier.radix,
            tier.down_ports_used,
            tier.up_ports_used,
            tier.ports_free,
            shown(tier.oversubscription if tier.up_ports_used else None, lambda x: f"{x:.2f}:1"),
        )
    cables = Table(
        f"{title}: cables and transceivers",
        ["segment", "cables", "end", "transceiver", "modules", "power"],
        csv_columns=["segment", "cables", "end", "part", "modules", "power_w"],
    )
    for line in bom.optics:
        cables.add(
            line.segment,
            clos.links.get(line.segment, 0),
            line.end,
            line.part,
            line.modules,
            shown(line.power_w, units.format_power),
        )
    if not bom.optics:
        for segment, count in clos.links.items():
            cables.add(segment, count, "—", "—", None, None)
    return [tiers, cables]


def _summary(clos: Clos, bom: Bom, port_bytes_per_s: float, extra: dict[str, str]) -> Table:
    table = Table("fabric", ["field", "value"])
    table.add("tiers", clos.levels)
    for tier in clos.tiers:
        table.add(f"{tier.name} switches", tier.switches)
    table.add("switches", clos.switches)
    for key, value in extra.items():
        table.add(key, value)
    table.add("endpoint ports", clos.endpoint_ports)
    table.add("max switch hops", clos.max_hops)
    table.add("bisection", units.format_rate(clos.bisection_ports * port_bytes_per_s, 0))
    for tier in clos.tiers:
        if tier.up_ports_used:
            table.add(f"{tier.name} oversubscription", f"{tier.oversubscription:.2f}:1")
    table.add("transceivers", bom.transceivers if bom.optics else "—")
    table.add("power (switches + optics)", _power_text(bom))
    if bom.total_cost_usd is not None:
        table.add("cost", units.format_usd(bom.total_cost_usd))
    return table


def _network(
    name: str, ports: int, switch_name: str, nodes: int, port_rate: float, base: FabricRequest
) -> FabricRequest:
    switch = catalog.switch(switch_name, field=f"--{name}-switch")
    return FabricRequest(
        name=name,
        nodes=nodes,
        ports_per_node=ports,
        port_bytes_per_s=port_rate,
        switch=switch,
        rail_optimized=False,
        leaf_oversubscription=base.leaf_oversubscription,
    )


@fabric.command("design")
@scenario_options("system", "gpu", "gpus", "nodes", "nics_per_node", "nic_rate")
@click.option(
    "--switch", "switch_name", default=None, help="Switch SKU (default: the catalog switch of the NIC link)."
)
@click.option("--rail-optimized/--top-of-rack", "rail_optimized", default=True, show_default=True)
@click.option(
    "--leaf-oversubscription", type=float, default=1.0, show_default=True, help="Leaf down:up ratio."
)
@click.option(
    "--spine-oversubscription", type=float, default=1.0, show_default=True, help="Spine down:up (3 tiers)."
)
@click.option(
    "--su-nodes", type=int, default=None, help="Nodes per scalable unit (default: one leaf's worth)."
)
@click.option(
    "--extra-endpoints", type=int, default=0, show_default=True, help="UFM/management ports on the leaves."
)
@click.option("--storage-ports-per-node", type=int, default=0, help="Design a separate storage network too.")
@click.option("--storage-switch", default=None, help="Switch of the storage network (default: --switch).")
@click.option("--inband-ports-per-node", type=int, default=0, help="Design a separate in-band network too.")
@click.option("--inband-switch", default=None, help="Switch of the in-band network (default: --switch).")
@click.option("--switch-price", type=float, default=None, help="USD per switch (default: catalog price).")
@click.option("--optic-price", type=float, default=None, help="USD per transceiver module.")
@click.option("--cable-price", type=float, default=None, help="USD per cable.")
@format_option
def design_command(
    overrides: dict[str, Any],
    switch_name: str | None,
    rail_optimized: bool,
    leaf_oversubscription: float,
    spine_oversubscription: float,
    su_nodes: int | None,
    extra_endpoints: int,
    storage_ports_per_node: int,
    storage_switch: str | None,
    inband_ports_per_node: int,
    inband_switch: str | None,
    switch_price: float | None,
    optic_price: float | None,
    cable_price: float | None,
    fmt: Format,
) -> int:
    """Leaf, spine and core switches, ports, cables by segment, transceivers, bisection, hops and power for a
    GPU cluster; rail-optimised designs follow NVIDIA's DGX SuperPOD scalable units.

    \b
    mfukit fabric design --system dgx-h100 --nodes 127 --switch qm9700 --extra-endpoints 4
    """
    cluster = cluster_from_flags(overrides)
    system = cluster.system
    if system.nics_per_node < 1:
        raise InputError(f"{system.name} has no compute NICs", field="--nics-per-node")
    if switch_name is None:
        from mfukit.comm.topology import switch_for

        found = switch_for(system)
        if found is None:
            raise InputError(f"no switch for {system.scale_out_fabric} in the catalog", field="--switch")
        switch_name = found.name
    request = FabricRequest(
        name="compute",
        nodes=cluster.num_nodes,
        ports_per_node=system.nics_per_node,
        port_bytes_per_s=system.nic_bytes_per_s,
        switch=catalog.switch(switch_name, field="--switch"),
        rail_optimized=rail_optimized,
        leaf_oversubscription=leaf_oversubscription,
        spine_oversubscription=spine_oversubscription,
        nodes_per_su=su_nodes,
        extra_endpoints=extra_endpoints,
    )
    prices = Prices(switch_price, optic_price, cable_price)
    priced = any(p is not None for p in (switch_price, optic_price, cable_price))
    compute = design(request)
    bom = _bom(compute, system.name, prices if priced or request.switch.price_usd else None)
    extra = {
        "scalable units": f"{compute.scalable_units} of {compute.nodes_per_su} nodes"
        if compute.scalable_units
        else "—",
        "node slots": str(compute.node_slots),
    }
    tables = [
        _summary(compute.clos, bom, request.port_bytes_per_s, extra),
        *_tables("compute", compute.clos, bom),
    ]
    notes = draw(
        compute.clos,
        switch=request.switch.name,
        nodes=request.nodes,
        ports_per_node=request.ports_per_node,
        scalable_units=compute.scalable_units,
        nodes_per_su=compute.nodes_per_su,
    )
    result = _fabric_result(compute.clos, bom, request.port_bytes_per_s)
    result |= {
        "scalable_units": compute.scalable_units,
        "nodes_per_su": compute.nodes_per_su,
        "node_slots": compute.node_slots,
        "networks": {},
        "compute_power_w": bom.power_w,
        "compute_cost_usd": bom.total_cost_usd,
    }
    warnings = list(bom.warnings)
    assumptions = list(bom.assumptions)
    totals = _Totals(bom)
    for name, ports, sku in (
        ("storage", storage_ports_per_node, storage_switch),
        ("inband", inband_ports_per_node, inband_switch),
    ):
        if ports:
            other = design(
                _network(name, ports, sku or switch_name, request.nodes, request.port_bytes_per_s, request)
            )
            other_bom = _bom(other, None, prices if priced else None)
            tables.extend(_tables(name, other.clos, other_bom))
            result["networks"][name] = _fabric_result(other.clos, other_bom, request.port_bytes_per_s)
            totals.add(name, other_bom)
            warnings.extend(other_bom.warnings)
            assumptions.extend(f"{name}: {line}" for line in other_bom.assumptions)
    if totals.networks:  # the top-level power and cost cover every network designed
        result |= {"power_w": totals.power_w, "cost_usd": totals.cost_usd}
        tables[0].add(
            f"power, all networks (+ {', '.join(totals.networks)})",
            units.format_power(totals.power_w)
            if totals.power_w is not None
            else "unknown (see each network)",
        )
        if totals.cost_usd is not None:
            tables[0].add(
                f"cost, all networks (+ {', '.join(totals.networks)})", units.format_usd(totals.cost_usd)
            )
    output = Output(
        schema="fabric.design/1",
        inputs={
            "system": system.name,
            "nodes": request.nodes,
            "switch": request.switch.name,
            "rail_optimized": rail_optimized,
            "leaf_oversubscription": leaf_oversubscription,
            "spine_oversubscription": spine_oversubscription,
            "extra_endpoints": extra_endpoints,
        },
        result=result,
        assumptions=[
            f"{request.switch.name}: {compute.radix} ports at {request.port_bytes_per_s * 8 / 1e9:.0f} Gb/s, "
            f"leaves split {compute.leaf_down} down / {compute.leaf_up} up",
            "uplinks spread evenly: the spine count divides each leaf's uplinks (NVIDIA SuperPOD practice)",
            "all links optical (multimode to the spine, single-mode spine-core); switch power is the catalog "
            "typical figure, optics at datasheet maximum",
            *assumptions,
        ],
        warnings=warnings,
        tables=tables,
        notes=notes,
    )
    return emit(output, fmt)


def _power_text(bom: Bom) -> str:
    """The fabric's power, or what is missing from the catalog to give it."""
    if bom.power_w is not None:
        return units.format_power(bom.power_w)
    missing = [
        part
        for part, known in (("switch power", bom.switch_power_w is not None), ("optics", bom.optics_counted))
        if not known
    ]
    return f"unknown (no {' or '.join(missing)} in the catalog)"


class _Totals:
    """Power and cost summed over the compute fabric and every other network designed beside it."""

    def __init__(self, compute: Bom) -> None:
        self.networks: list[str] = []
        self.power_w = compute.power_w
        self.cost_usd = compute.total_cost_usd

    def add(self, name: str, bom: Bom) -> None:
        self.networks.append(name)
        self.power_w = None if self.power_w is None or bom.power_w is None else self.power_w + bom.power_w
        if bom.total_cost_usd is not None:
            self.cost_usd = (self.cost_usd or 0.0) + bom.total_cost_usd


def _bom(built: FabricDesign, system: str | None, prices: Prices | None) -> Bom:
    request = built.request
    return bill_of_materials(
        built.clos,
        switch=request.switch,
        port_bytes_per_s=request.port_bytes_per_s,
        node_ports=request.nodes * request.ports_per_node,
        extra_endpoints=request.extra_endpoints,
        system=system,
        prices=prices,
    )


@fabric.command("check")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@format_option
def check_command(file: Path, fmt: Format) -> int:
    """Report what a described topology (YAML/TOML: switch, nodes or endpoints, tiers) yields and what is
    wrong with it. Exit 1 when a finding is an error (ports over the radix, cables with nowhere to land)."""
    spec = load_spec(file)
    checked = check_spec(spec, source=str(file))
    bom = bill_of_materials(
        checked.clos,
        switch=checked.switch,
        port_bytes_per_s=checked.port_bytes_per_s,
        node_ports=spec.endpoint_ports - spec.extra_endpoints,
        extra_endpoints=spec.extra_endpoints,
        system=spec.system,
        node_optics=spec.node_optics,
    )
    extra = {"endpoint capacity": str(checked.capacity)}
    tables = [
        _summary(checked.clos, bom, checked.port_bytes_per_s, extra),
        *_tables("described", checked.clos, bom),
    ]
    tables.append(findings_table(checked.findings))
    result = _fabric_result(checked.clos, bom, checked.port_bytes_per_s)
    result |= {"endpoint_capacity": checked.capacity, "findings": checked.findings}
    errors = any(f.severity == "error" for f in checked.findings)
    output = Output(
        schema="fabric.check/1",
        inputs={"file": str(file)},
        result=result,
        assumptions=list(bom.assumptions),
        warnings=list(bom.warnings),
        tables=tables,
        exit_code=1 if errors else 0,
    )
    return emit(output, fmt)
