"""What ``mfukit fabric`` shows of a fabric: its JSON result, its tiers, cables and transceivers, and a
summary with bisection, hops, power and cost."""

from __future__ import annotations

from typing import Any

from mfukit import units
from mfukit.core.results import Table, shown
from mfukit.fabric.bom import Bom
from mfukit.fabric.fat_tree import Clos


def tier_result(clos: Clos, name: str) -> dict[str, Any] | None:
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


def fabric_result(clos: Clos, bom: Bom, port_bytes_per_s: float) -> dict[str, Any]:
    return {
        "tiers": clos.levels,
        "leaf": tier_result(clos, "leaf"),
        "spine": tier_result(clos, "spine"),
        "core": tier_result(clos, "core"),
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


def fabric_tables(title: str, clos: Clos, bom: Bom) -> list[Table]:
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


def summary_table(clos: Clos, bom: Bom, port_bytes_per_s: float, extra: dict[str, str]) -> Table:
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
    table.add("power (switches + optics)", power_text(bom))
    if bom.total_cost_usd is not None:
        table.add("cost", units.format_usd(bom.total_cost_usd))
    return table


def power_text(bom: Bom) -> str:
    """The fabric's power, or what is missing from the catalog to give it."""
    if bom.power_w is not None:
        return units.format_power(bom.power_w)
    missing = [
        part
        for part, known in (("switch power", bom.switch_power_w is not None), ("optics", bom.optics_counted))
        if not known
    ]
    return f"unknown (no {' or '.join(missing)} in the catalog)"
