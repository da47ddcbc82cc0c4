"""Render an :class:`~mfukit.core.results.Output` as a table (rich), JSON (the envelope) or CSV.

Data goes to stdout; warnings and notes about the run go with the table on stdout in table mode and
only inside the envelope in JSON mode, so a JSON consumer always reads one document.
"""

from __future__ import annotations

import csv
import json
import os
import sys
from typing import Literal, TextIO

from rich import box
from rich.console import Console
from rich.table import Table as RichTable

from mfukit.core.results import Output, Quantity, Table

Format = Literal["table", "json", "csv"]
FORMATS: tuple[Format, ...] = ("table", "json", "csv")


PIPED_WIDTH = 160


def console(file: TextIO | None = None) -> Console:
    """A console on ``file`` (stdout by default). Width: COLUMNS when set, the terminal's, or 160 columns
    when piped so that tables are not folded; colour only on a terminal (and never with NO_COLOR). Text is
    printed as it is: square brackets in it are never read as rich markup."""
    stream = file or sys.stdout
    width = None if os.environ.get("COLUMNS") or stream.isatty() else PIPED_WIDTH
    # markup off: every string printed quotes user text somewhere (file names, log lines, `[nccl_env]`)
    return Console(file=stream, highlight=False, soft_wrap=False, width=width, markup=False)


def render(output: Output, fmt: Format, file: TextIO | None = None) -> None:
    stream = file or sys.stdout
    if fmt == "json":
        json.dump(output.envelope(), stream, indent=2, allow_nan=False)
        stream.write("\n")
    elif fmt == "csv":
        render_csv(output, stream)
    else:
        render_table(output, console(stream))


def render_csv(output: Output, stream: TextIO) -> None:
    """The first (main) table as CSV with raw SI values; further tables follow after a blank line."""
    writer = csv.writer(stream, lineterminator="\n")
    for index, table in enumerate(output.tables):
        if index:
            stream.write("\n")
        writer.writerow(table.csv_header)
        writer.writerows(table.csv_rows())


def _rich_table(table: Table) -> RichTable:
    rich_table = RichTable(
        title=table.title,
        caption=table.caption or None,
        box=box.SIMPLE_HEAD,
        title_justify="left",
        expand=False,
    )
    numeric = [
        all(isinstance(row[i], int | float | Quantity) or row[i] is None for row in table.rows)
        and bool(table.rows)
        for i in range(len(table.columns))
    ]
    for index, (name, right) in enumerate(zip(table.columns, numeric, strict=True)):
        rich_table.add_column(name, justify="right" if right else "left", overflow="fold", no_wrap=index == 0)
    for row in table.rows:
        rich_table.add_row(*(_text(cell) for cell in row))
    return rich_table


def _text(cell: object) -> str:
    if cell is None:
        return "—"
    if isinstance(cell, float):
        return f"{cell:.4g}"
    return str(cell)


def render_table(output: Output, out: Console) -> None:
    for table in output.tables:
        out.print(_rich_table(table))
    for note in output.notes:
        out.print(note)
    if output.assumptions:
        out.print("Assumptions:")
        for assumption in output.assumptions:
            out.print(f"  - {assumption}")
    if output.warnings:
        out.print("Warnings:")
        for warning in output.warnings:
            out.print(f"  ! {warning}")
    for path in output.files:
        out.print(f"wrote {path}")
