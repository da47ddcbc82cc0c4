"""``mfukit fabric``: design a compute fabric (leaf/spine/core, cables, optics, power) or check a described one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from mfukit import catalog
from mfukit.cli.common import cluster_from_flags, emit, format_option, scenario_options
from mfukit.cli.render import Format
from mfukit.errors import InputError
from mfukit.fabric.bom import Prices
from mfukit.fabric.outputs import OtherNetwork, check_output, design_output
from mfukit.fabric.rail import FabricRequest


@click.group()
def fabric() -> None:
    """Fat-tree and rail-optimised fabric designer, and checks of described topologies."""


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
    others = (
        OtherNetwork("storage", storage_ports_per_node, storage_switch),
        OtherNetwork("inband", inband_ports_per_node, inband_switch),
    )
    return emit(design_output(request, system, Prices(switch_price, optic_price, cable_price), others), fmt)


@fabric.command("check")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@format_option
def check_command(file: Path, fmt: Format) -> int:
    """Report what a described topology (YAML/TOML: switch, nodes or endpoints, tiers) yields and what is
    wrong with it. Exit 1 when a finding is an error (ports over the radix, cables with nowhere to land)."""
    return emit(check_output(file), fmt)
