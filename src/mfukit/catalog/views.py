"""What ``mfukit catalog`` shows of the entries: one table per kind, every field of one entry with the
figures derived from it, and the JSON of each."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mfukit import catalog as cat
from mfukit import units
from mfukit.core.hardware import Accelerator, Link, StorageTier, Switch, System
from mfukit.core.model import ModelSpec
from mfukit.core.results import Table, shown


def dump(entry: cat.Entry) -> dict[str, Any]:
    return entry.model_dump(mode="json", by_alias=False)


def derived_figures(entry: cat.Entry) -> dict[str, Any]:
    """The figures derived from an entry's fields (``catalog show``)."""
    if isinstance(entry, ModelSpec):
        return {
            "total_params": entry.total_params(),
            "active_params": entry.active_params(),
            "head_size": entry.head_size,
            "kv_heads": entry.kv_heads,
            "num_moe_layers": entry.num_moe_layers,
        }
    if isinstance(entry, System):
        return {"scale_out_bytes_per_s_per_node": entry.scale_out_bytes_per_s_per_node}
    return {}


def _unit_format(key: str) -> Callable[[float], str] | None:
    """How a field's number is shown, read off its name's unit suffix; None for a plain number."""
    if key.endswith("flops_per_s") or key.startswith(("peak_flops", "sparse_peak")):
        return units.format_flops_rate
    for suffix, format_number in (
        ("_bytes_per_s", units.format_rate),
        ("_bytes", units.format_bytes),
        ("_w", units.format_power),
        ("_s", units.format_duration),
        ("params", units.format_count),
    ):
        if key.endswith(suffix):
            return format_number
    return None


def show_value(key: str, value: Any) -> str:
    if isinstance(value, dict):
        # a nested table's own fields carry their units (flops_per_s); plain keys (bf16, fp8) take the parent's
        parts = []
        for name, item in value.items():
            shown = show_value(name if _unit_format(str(name)) else key, item)
            parts.append(f"{name}=({shown})" if isinstance(item, dict) else f"{name}={shown}")
        return ", ".join(parts) or "—"
    if isinstance(value, list):
        return "; ".join(show_value(key, v) for v in value)
    if isinstance(value, float | int) and not isinstance(value, bool):
        format_number = _unit_format(key)
        if format_number is not None:
            return format_number(value)
    return "—" if value is None else str(value)


def _tera(value: float) -> str:
    return f"{value / 1e12:,.1f}"


def _giga(value: float) -> str:
    return f"{value / 1e9:,.0f}"


def _gib(value: float) -> str:
    return f"{value / 2**30:,.0f}"


def _nano(value: float) -> str:
    return f"{value / 1e-9:,.0f}"


def _plain(value: float) -> str:
    return f"{value:,.0f}"


def kind_table(kind: cat.Kind, items: list[Any]) -> Table:
    if kind == "accelerators":
        table = Table(
            "accelerators (dense peak, per device)",
            [
                "name",
                "device",
                "BF16 TFLOP/s",
                "FP8 TFLOP/s",
                "HBM GiB",
                "HBM GB/s",
                "scale-up GB/s/dir",
                "TDP W",
            ],
            csv_columns=[
                "name",
                "display_name",
                "bf16_flops_per_s",
                "fp8_flops_per_s",
                "hbm_bytes",
                "hbm_bytes_per_s",
                "scale_up_bytes_per_s",
                "tdp_w",
            ],
        )
        for a in (e for e in items if isinstance(e, Accelerator)):
            table.add(
                a.name,
                a.display_name,
                shown(a.peak_flops_per_s.get("bf16"), _tera),
                shown(a.peak_flops_per_s.get("fp8"), _tera),
                shown(a.hbm_bytes, _gib),
                shown(a.hbm_bytes_per_s, _giga),
                shown(a.scale_up_bytes_per_s, _giga),
                shown(a.tdp_w, _plain),
            )
        return table
    if kind == "systems":
        table = Table(
            "systems (nodes)",
            ["name", "node", "accelerator", "GPUs/node", "scale-up GPUs", "NICs", "NIC Gb/s", "host GiB"],
            csv_columns=[
                "name",
                "display_name",
                "accelerator",
                "gpus_per_node",
                "scale_up_domain_gpus",
                "nics_per_node",
                "nic_bytes_per_s",
                "host_memory_bytes",
            ],
        )
        for s in (e for e in items if isinstance(e, System)):
            table.add(
                s.name,
                s.display_name,
                s.accelerator,
                s.gpus_per_node,
                s.scale_up_domain_gpus,
                s.nics_per_node,
                shown(s.nic_bytes_per_s * units.BITS_PER_BYTE, _giga),
                shown(s.host_memory_bytes, _gib),
            )
        return table
    if kind == "fabrics":
        table = Table(
            "fabrics (links and switches)",
            ["name", "what", "kind", "port Gb/s", "ports", "latency ns"],
            csv_columns=["name", "display_name", "kind", "port_bytes_per_s", "ports", "latency_s"],
        )
        for f in items:
            if isinstance(f, Link):
                table.add(
                    f.name,
                    f.display_name,
                    f"{f.family} link",
                    shown(f.port_bytes_per_s * units.BITS_PER_BYTE, _giga),
                    None,
                    shown(f.latency_s, _nano),
                )
            elif isinstance(f, Switch):
                best = max(f.port_configs, key=lambda c: c.port_bytes_per_s)
                table.add(
                    f.name,
                    f.display_name,
                    "switch",
                    shown(best.port_bytes_per_s * units.BITS_PER_BYTE, _giga),
                    best.ports,
                    shown(f.latency_s, _nano),
                )
        return table
    if kind == "storage":
        table = Table(
            "storage tiers (defaults: override with your own measurements)",
            [
                "name",
                "tier",
                "kind",
                "write GB/s/client",
                "read GB/s/client",
                "write GB/s total",
                "read GB/s total",
            ],
            csv_columns=[
                "name",
                "display_name",
                "kind",
                "per_client_write_bytes_per_s",
                "per_client_read_bytes_per_s",
                "aggregate_write_bytes_per_s",
                "aggregate_read_bytes_per_s",
            ],
        )
        for t in (e for e in items if isinstance(e, StorageTier)):
            table.add(
                t.name,
                t.display_name,
                t.kind,
                shown(t.per_client_write_bytes_per_s, _giga),
                shown(t.per_client_read_bytes_per_s, _giga),
                shown(t.aggregate_write_bytes_per_s, _giga, "scales"),
                shown(t.aggregate_read_bytes_per_s, _giga, "scales"),
            )
        return table
    table = Table(
        "models",
        ["name", "model", "params", "active", "layers", "hidden", "heads/kv", "FFN", "vocab", "MLP"],
        csv_columns=[
            "name",
            "display_name",
            "total_params",
            "active_params",
            "num_hidden_layers",
            "hidden_size",
            "heads_kv",
            "intermediate_size",
            "vocab_size",
            "mlp",
        ],
    )
    for m in (e for e in items if isinstance(e, ModelSpec)):
        table.add(
            m.name,
            m.display_name,
            shown(m.total_params(), units.format_count),
            shown(m.active_params(), units.format_count),
            m.num_hidden_layers,
            m.hidden_size,
            f"{m.num_attention_heads}/{m.kv_heads}",
            m.intermediate_size,
            m.vocab_size,
            m.mlp + (" MoE" if m.moe else "") + (" MLA" if m.mla else ""),
        )
    return table
