"""One self-contained ``report.html`` (charts embedded as data URIs) plus the PNG files beside it.

A report is a title, a summary of headline figures and a list of sections; each section holds prose,
tables (the same :class:`~mfukit.core.results.Table` the CLI prints) and charts. Output is
deterministic: no timestamps, stable ordering.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import jinja2

from mfukit import __version__
from mfukit.core.files import write_text_atomic
from mfukit.core.results import Quantity, Table
from mfukit.errors import InputError
from mfukit.report.plots import save_png

if TYPE_CHECKING:
    from matplotlib.figure import Figure

TEMPLATES = Path(__file__).parent / "templates"


@dataclass
class Chart:
    """A figure and the file name (``*.png``) it is saved under."""

    file_name: str
    figure: Figure
    caption: str = ""


@dataclass
class Section:
    title: str
    paragraphs: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    charts: list[Chart] = field(default_factory=list)


@dataclass
class Report:
    title: str
    summary: list[tuple[str, str]] = field(default_factory=list)
    sections: list[Section] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _cell(value: object) -> str:
    if value is None:
        return "—"
    if isinstance(value, Quantity):
        return value.text
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def write_report(report: Report, out_dir: Path) -> Path:
    """Write ``out_dir/report.html`` and every chart's PNG; return the HTML path."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise InputError(
            f"cannot create the report directory: {error}", field="--report", value=str(out_dir)
        ) from None
    rendered_sections = []
    for section in report.sections:
        charts = []
        for chart in section.charts:
            data = save_png(chart.figure, out_dir / chart.file_name)
            charts.append(
                {
                    "file_name": chart.file_name,
                    "caption": chart.caption,
                    "data_uri": "data:image/png;base64," + base64.b64encode(data).decode("ascii"),
                }
            )
        tables = [
            {
                "title": table.title,
                "caption": table.caption,
                "columns": table.columns,
                "rows": [[_cell(cell) for cell in row] for row in table.rows],
            }
            for table in section.tables
        ]
        rendered_sections.append(
            {"title": section.title, "paragraphs": section.paragraphs, "tables": tables, "charts": charts}
        )
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True, undefined=jinja2.StrictUndefined
    )
    html = environment.get_template("report.html.j2").render(
        title=report.title,
        summary=report.summary,
        sections=rendered_sections,
        assumptions=report.assumptions,
        warnings=report.warnings,
        version=__version__,
    )
    path = out_dir / "report.html"
    write_text_atomic(path, html)
    return path
