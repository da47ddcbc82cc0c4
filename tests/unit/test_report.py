from __future__ import annotations

from pathlib import Path

from mfukit.core.results import Table
from mfukit.report.html import Chart, Report, Section, write_report
from mfukit.report.plots import figure


def build(out: Path) -> Path:
    fig, axes = figure()
    axes.plot([1, 2, 3], [0.5, 0.45, 0.41], marker="o")
    table = Table("layouts", ["tp", "mfu"])
    table.add(8, 0.41)
    report = Report(
        title="demo <report>",
        summary=[("MFU", "41.0 %")],
        sections=[
            Section("Scaling", ["MFU falls with scale."], [table], [Chart("scaling.png", fig, "MFU vs GPUs")])
        ],
        warnings=["no storage tier given"],
    )
    return write_report(report, out)


def test_report_is_self_contained_and_deterministic(tmp_path: Path) -> None:
    first = build(tmp_path / "a")
    second = build(tmp_path / "b")
    html = first.read_text()
    assert "data:image/png;base64," in html and "&lt;report&gt;" in html
    assert (tmp_path / "a" / "scaling.png").read_bytes() == (tmp_path / "b" / "scaling.png").read_bytes()
    assert html == second.read_text()
