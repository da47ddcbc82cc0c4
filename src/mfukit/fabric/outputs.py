"""The outputs of ``mfukit fabric``: a designed compute fabric with the storage and in-band networks beside
it, and the check of a described topology."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mfukit import catalog, units
from mfukit.core.hardware import System
from mfukit.core.results import Output, findings_table
from mfukit.fabric.bom import Bom, Prices, bill_of_materials
from mfukit.fabric.draw import draw
from mfukit.fabric.rail import FabricDesign, FabricRequest, design
from mfukit.fabric.spec import check_spec, load_spec
from mfukit.fabric.views import fabric_result, fabric_tables, summary_table


@dataclass(frozen=True)
class OtherNetwork:
    """A separate network of every node designed beside the compute fabric (storage, in-band)."""

    name: str
    ports_per_node: int  # 0: none
    switch: str | None  # None: the compute fabric's


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


def design_output(
    request: FabricRequest, system: System, prices: Prices, others: tuple[OtherNetwork, ...] = ()
) -> Output:
    """Design the compute fabric of ``request`` on ``system``'s nodes and the ``others`` beside it."""
    priced = any(p is not None for p in (prices.switch_usd, prices.optic_usd, prices.cable_usd))
    compute = design(request)
    bom = _bom(compute, system.name, prices if priced or request.switch.price_usd else None)
    extra = {
        "scalable units": f"{compute.scalable_units} of {compute.nodes_per_su} nodes"
        if compute.scalable_units
        else "—",
        "node slots": str(compute.node_slots),
    }
    tables = [
        summary_table(compute.clos, bom, request.port_bytes_per_s, extra),
        *fabric_tables("compute", compute.clos, bom),
    ]
    notes = draw(
        compute.clos,
        switch=request.switch.name,
        nodes=request.nodes,
        ports_per_node=request.ports_per_node,
        scalable_units=compute.scalable_units,
        nodes_per_su=compute.nodes_per_su,
    )
    result = fabric_result(compute.clos, bom, request.port_bytes_per_s)
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
    for network in others:
        name, ports = network.name, network.ports_per_node
        if ports:
            switch_name = network.switch or request.switch.name
            other = design(
                _network(name, ports, switch_name, request.nodes, request.port_bytes_per_s, request)
            )
            other_bom = _bom(other, None, prices if priced else None)
            tables.extend(fabric_tables(name, other.clos, other_bom))
            result["networks"][name] = fabric_result(other.clos, other_bom, request.port_bytes_per_s)
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
            "rail_optimized": request.rail_optimized,
            "leaf_oversubscription": request.leaf_oversubscription,
            "spine_oversubscription": request.spine_oversubscription,
            "extra_endpoints": request.extra_endpoints,
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
    return output


def check_output(file: Path) -> Output:
    """What the topology described in ``file`` yields and what is wrong with it (exit 1 on an error)."""
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
        summary_table(checked.clos, bom, checked.port_bytes_per_s, extra),
        *fabric_tables("described", checked.clos, bom),
    ]
    tables.append(findings_table(checked.findings))
    result = fabric_result(checked.clos, bom, checked.port_bytes_per_s)
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
    return output
