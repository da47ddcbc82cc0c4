"""An ASCII drawing of a folded Clos: tiers bottom-up, cable counts between them."""

from __future__ import annotations

from mfukit.fabric.fat_tree import Clos

_SEGMENTS = {"leaf": "node-leaf", "spine": "leaf-spine", "core": "spine-core"}


def draw(
    clos: Clos,
    *,
    switch: str,
    nodes: int,
    ports_per_node: int,
    scalable_units: int | None = None,
    nodes_per_su: int | None = None,
) -> list[str]:
    """Lines of text, top tier first, e.g. ``spine  [   16 x qm9700 ]  ports used 1024/1024``."""
    lines: list[str] = []
    for tier in reversed(clos.tiers):
        detail = f"ports used {tier.down_ports_used + tier.up_ports_used}/{tier.ports}"
        if tier.name == "leaf" and scalable_units:
            detail += f"; {ports_per_node} rails x {scalable_units} SU(s) of {nodes_per_su} nodes"
        if tier.name == "spine" and clos.levels == 3 and scalable_units:
            detail += f"; {tier.switches // scalable_units} per SU pod"
        lines.append(f"  {tier.name:<6} [{tier.switches:>6} x {switch:<8}]  {detail}")
        segment = _SEGMENTS[tier.name]
        lines.append(f"  {'':<6}        |  {clos.links.get(segment, 0)} cables {segment}")
    lines.append(f"  {'nodes':<6} [{nodes:>6} x {ports_per_node} ports]")
    if scalable_units:
        rails = ", ".join(f"NIC{i}->leaf{i}" for i in range(min(ports_per_node, 4)))
        more = ", ..." if ports_per_node > 4 else ""
        lines.append(f"  rail-optimised: in each SU {rails}{more} (same-rail traffic: 1 hop)")
    return lines
