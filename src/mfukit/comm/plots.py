"""The busbw-vs-size chart of ``mfukit comm sweep --report`` (matplotlib through report/plots.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mfukit.comm.model import Prediction
from mfukit.core.results import Table
from mfukit.report.html import Chart, Report, Section, write_report
from mfukit.report.plots import figure


def busbw_chart(prediction: Prediction, title: str) -> Chart:
    """busbw (GB/s) against message size on a log2 axis, one marker style per algorithm."""
    fig, axes = figure()
    sizes = prediction.message_bytes
    busbw = prediction.busbw_bytes_per_s / 1e9
    axes.plot(sizes, busbw, color="#6b6b6b", linewidth=1.0)
    for algorithm in dict.fromkeys(prediction.algorithm):
        mask = np.asarray([a == algorithm for a in prediction.algorithm])
        axes.plot(sizes[mask], busbw[mask], marker="o", markersize=3.5, linestyle="none", label=algorithm)
    axes.set_xscale("log", base=2)
    axes.set_xlabel("message size (bytes, nccl-tests 'size')")
    axes.set_ylabel("busbw (GB/s)")
    axes.set_title(title, fontsize=10)
    axes.legend(title="algorithm", fontsize=8)
    return Chart("busbw.png", fig, "Predicted busbw (1e9 bytes/s) by message size")


def write_sweep_report(
    prediction: Prediction, table: Table, system: str, assumptions: list[str], out_dir: Path
) -> Path:
    """``report.html`` and ``busbw.png`` for one sweep."""
    title = f"{prediction.collective} on {prediction.group.num_gpus} GPUs of {system}"
    peak = float(np.max(prediction.busbw_bytes_per_s))
    report = Report(
        title=f"mfukit comm sweep: {title}",
        summary=[("peak busbw", f"{peak / 1e9:.1f} GB/s"), ("GPUs", str(prediction.group.num_gpus))],
        sections=[Section("busbw by size", tables=[table], charts=[busbw_chart(prediction, title)])],
        assumptions=assumptions,
    )
    return write_report(report, out_dir)
