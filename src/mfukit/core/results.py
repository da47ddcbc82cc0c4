"""What every command returns: a JSON-able result, the tables a human reads, and the envelope around them.

Library code builds an :class:`Output`; the CLI renders it as a table, JSON or CSV. The JSON envelope is
``{"mfukit_version", "schema": "<command>/1", "inputs", "assumptions", "result", "warnings"}``: keys are
added, never renamed; fractions are 0..1; quantities are SI with the unit in the key.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from mfukit import __version__, units
from mfukit.core.findings import Finding

ProgressCallback = Callable[[int, int], None]
"""Library code reports long work as ``callback(done, total)``; the CLI turns it into a progress bar."""


@dataclass(frozen=True)
class Quantity:
    """A value with the text a human reads: tables show ``text``, CSV writes ``value`` (SI units, or the
    full wording where the table abbreviates) and names ``unit``, the SI unit of ``value`` (None for
    counts, 0..1 fractions and text)."""

    value: float | int | str | None
    text: str
    unit: str | None = None

    def __str__(self) -> str:
        return self.text


def shown(
    value: float | int | None,
    formatter: Callable[[float], str],
    missing: str = "—",
    *,
    unit: str | None = None,
) -> Quantity:
    """``Quantity(value, formatter(value))``, or ``missing`` when there is no value. ``unit`` is the SI unit of
    ``value``; by default the one of a :mod:`mfukit.units` formatter (give it for any other formatter)."""
    return Quantity(
        value,
        missing if value is None else formatter(value),
        unit if unit is not None else units.SI_UNIT_OF_FORMATTER.get(formatter),
    )


def csv_label(label: str, unit: str | None) -> str:
    """A row label for CSV, which carries SI values: ``label [unit]`` unless the label already names it."""
    named = unit is not None and re.search(rf"(?<![\w/]){re.escape(unit)}(?![\w/])", label)
    return label if unit is None or named else f"{label} [{unit}]"


Cell = str | int | float | Quantity | None


@dataclass
class Table:
    """A titled table. ``columns`` are what a human reads; ``csv_columns`` (default: snake_case of
    ``columns``) name the CSV header and should carry SI units (``memory_per_gpu_bytes``)."""

    title: str
    columns: list[str]
    rows: list[list[Cell]] = field(default_factory=list)
    caption: str = ""
    csv_columns: list[str] | None = None

    @property
    def csv_header(self) -> list[str]:
        """The CSV header; a column of quantities gets its SI unit appended when its name does not say it."""
        names = self.csv_columns or [
            re.sub(r"[^0-9a-z]+", "_", name.lower()).strip("_") for name in self.columns
        ]
        header = []
        for index, name in enumerate(names):
            unit = self.column_unit(index)
            slug = None if unit is None else units_slug(unit)
            header.append(name if slug is None or name.endswith(slug) else f"{name}_{slug}")
        return header

    def column_unit(self, index: int) -> str | None:
        """The SI unit every quantity in column ``index`` shares, or None (none, or several)."""
        found = {
            cell.unit
            for row in self.rows
            if isinstance(cell := row[index], Quantity) and cell.value is not None
        }
        return found.pop() if len(found) == 1 else None

    def csv_rows(self) -> list[list[str | int | float]]:
        """Rows as CSV writes them: SI values, and a row label (first column) naming the unit of its quantity
        when the column holds several units (a quantity/value table)."""
        mixed = {index for index in range(len(self.columns)) if self.column_unit(index) is None}
        rows: list[list[str | int | float]] = []
        for row in self.rows:
            out = ["" if cell is None else cell.value if isinstance(cell, Quantity) else cell for cell in row]
            row_units = {
                cell.unit
                for index, cell in enumerate(row)
                if isinstance(cell, Quantity) and cell.unit and index in mixed
            }
            if isinstance(row[0], str) and len(row_units) == 1:
                out[0] = csv_label(row[0], row_units.pop())
            rows.append([value if value is not None else "" for value in out])
        return rows

    def add(self, *cells: Cell) -> None:
        if len(cells) != len(self.columns):
            raise ValueError(f"table {self.title!r} has {len(self.columns)} columns, got {len(cells)} cells")
        self.rows.append(list(cells))


@dataclass
class Output:
    """A command's answer. ``exit_code`` is 1 when the command ran fine but the answer is negative."""

    schema: str
    result: dict[str, Any]
    inputs: dict[str, Any] = field(default_factory=dict)
    assumptions: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)
    exit_code: int = 0

    def envelope(self) -> dict[str, Any]:
        return {
            "mfukit_version": __version__,
            "schema": self.schema,
            "inputs": jsonable(self.inputs),
            "assumptions": jsonable(self.assumptions),
            "result": jsonable(self.result),
            "warnings": jsonable(self.warnings),
        }


def units_slug(unit: str) -> str:
    """An SI unit as a snake_case header suffix: ``FLOP/s`` -> ``flops_per_s``, ``bytes/s`` -> ``bytes_per_s``."""
    return unit.replace("FLOP", "flops").replace("/", "_per_").lower()


def jsonable(value: Any) -> Any:
    """Plain JSON types from dataclasses, pydantic models, numpy scalars/arrays, paths and enums.

    Non-finite floats become None (JSON has no NaN or Infinity).
    """
    if isinstance(value, Quantity):
        return jsonable(value.value)
    if isinstance(value, BaseModel):
        return jsonable(value.model_dump(by_alias=False))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(key): jsonable(item) for key, item in value.items()}
    if isinstance(value, Enum):
        return jsonable(value.value)
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, bool | int | str) or value is None:
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if hasattr(value, "tolist"):  # numpy scalar or array
        return jsonable(value.tolist())
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if isinstance(value, Sequence | set | frozenset):
        return [jsonable(item) for item in value]
    raise TypeError(f"cannot turn {type(value).__name__} into JSON")


def findings_table(findings: list[Finding], *, evidence: int = 2) -> Table:
    """The findings as a table: id, severity, what, detail (with up to ``evidence`` pieces of it), fix."""
    table = Table("findings", ["id", "severity", "what", "detail", "fix"])
    for f in findings:
        table.add(
            f.id, f.severity, f.title, f.detail + "".join(f"; {e}" for e in f.evidence[:evidence]), f.fix
        )
    return table
