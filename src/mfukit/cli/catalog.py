"""``mfukit catalog``: what the catalog holds, and where each fact comes from."""

from __future__ import annotations

from typing import Any

import click

from mfukit import catalog as cat
from mfukit.catalog.views import derived_figures, dump, kind_table, show_value
from mfukit.cli.common import emit, format_option
from mfukit.cli.render import Format
from mfukit.core.results import Output, Table


@click.group()
def catalog() -> None:
    """Accelerators, nodes, fabrics, storage tiers and models, each with its source."""


@catalog.command("list")
@click.argument("kind", required=False, type=click.Choice(cat.KINDS))
@format_option
def list_entries(kind: str | None, fmt: Format) -> int:
    """List catalog entries of KIND (all kinds when omitted)."""
    kinds = [k for k in cat.KINDS if kind in (None, k)]
    tables = [kind_table(k, list(cat.entries(k).values())) for k in kinds]
    result: dict[str, Any] = {k: [dump(e) for e in cat.entries(k).values()] for k in kinds}
    return emit(Output(schema="catalog.list/1", inputs={"kind": kind}, result=result, tables=tables), fmt)


@catalog.command("show")
@click.argument("name")
@format_option
def show(name: str, fmt: Format) -> int:
    """Show every field of one entry, its derived figures and its source."""
    kind, entry = cat.find(name)
    derived = derived_figures(entry)
    table = Table(f"{cat.SINGULAR[kind]} {entry.name}", ["field", "value"])
    for key, value in entry.model_dump(by_alias=False, exclude={"source"}).items():
        table.add(key, ", ".join(value) if key == "aliases" else show_value(key, value))
    for key, value in derived.items():
        table.add(key, show_value(key, value))
    if entry.source is not None:
        table.add("source", entry.source.url)
        table.add("source states", entry.source.what)
        table.add("retrieved", entry.source.retrieved.isoformat())
    output = Output(
        schema="catalog.show/1",
        inputs={"name": name},
        result={"kind": kind, "name": entry.name, "entry": dump(entry), "derived": derived},
        tables=[table],
    )
    return emit(output, fmt)
