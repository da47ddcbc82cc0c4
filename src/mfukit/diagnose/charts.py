"""The diagnosis report's charts: per-rank timeline, per-rank breakdown, step-time series."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mfukit.diagnose.breakdown import RankSummary
from mfukit.diagnose.records import RankTrace, TrainingLog
from mfukit.report.plots import PALETTE, figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure

MAX_TIMELINE_RANKS = 16
COLOURS = {"compute": PALETTE[0], "comm": PALETTE[1], "memcpy": PALETTE[2], "idle": "#d9d9d9"}


def timeline(traces: list[tuple[int, RankTrace]]) -> Figure:
    """Busy intervals of each rank's median step (compute, communication, memcpy), ranks as rows."""
    shown = traces[:MAX_TIMELINE_RANKS]
    fig, axes = figure(8.0, max(2.0, 0.35 * len(shown) + 1.2))
    for row, (_, trace) in enumerate(shown):
        for category in ("compute", "comm", "memcpy"):
            spans = [(s * 1e3, (e - s) * 1e3) for s, e, c in trace.timeline if c == category]
            if spans:
                height = 0.8 if category == "compute" else 0.4
                axes.broken_barh(spans, (row - height / 2, height), facecolors=COLOURS[category], linewidth=0)
    axes.set_yticks(range(len(shown)), [f"rank {rank}" for rank, _ in shown])
    axes.invert_yaxis()
    axes.set_xlabel("time within the median step (ms)")
    handles = [axes.bar(0, 0, color=COLOURS[c], label=c) for c in ("compute", "comm", "memcpy")]
    del handles
    axes.legend(loc="upper right", fontsize=8, ncols=3)
    return fig


def breakdown(ranks: list[RankSummary]) -> Figure:
    """Share of step time per rank: compute, exposed communication, exposed memcpy, idle."""
    shown = ranks[:64]
    fig, axes = figure(8.0, 3.6)
    bottom = [0.0] * len(shown)
    labels = [str(r.rank) for r in shown]
    for key, colour, label in (
        ("compute", COLOURS["compute"], "compute"),
        ("comm_exposed", COLOURS["comm"], "exposed comm"),
        ("memcpy_exposed", COLOURS["memcpy"], "exposed memcpy"),
        ("idle", COLOURS["idle"], "idle"),
    ):
        values = [r.fractions[key] * 100 for r in shown]
        axes.bar(labels, values, bottom=bottom, color=colour, label=label, width=0.8)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    axes.set_ylabel("% of step time")
    axes.set_xlabel("rank")
    axes.set_ylim(0, 100)
    axes.legend(loc="lower right", fontsize=8, ncols=4)
    if len(shown) > 24:
        axes.set_xticks(range(0, len(shown), max(1, len(shown) // 16)))
    return fig


def step_series(logs: list[TrainingLog], traces: list[tuple[int, RankTrace]]) -> Figure | None:
    """Step time over steps: each training log, and each traced rank's profiled steps."""
    fig, axes = figure(8.0, 3.4)
    plotted = False
    for log in logs:
        points = [
            (s.step, s.step_time_s) for s in log.steps if s.step_time_s is not None and s.rank in (None, 0)
        ]
        if points:
            axes.plot(
                [p[0] for p in points],
                [p[1] for p in points],
                marker=".",
                linewidth=1,
                label=f"{log.framework} log",
            )
            plotted = True
    for rank, trace in traces[:4]:
        points = [(s.step, s.duration_s) for s in trace.steps if s.step is not None]
        if points:
            axes.plot(
                [p[0] for p in points],
                [p[1] for p in points],
                marker="o",
                linewidth=1,
                label=f"trace rank {rank}",
            )
            plotted = True
    if not plotted:
        return None
    axes.set_xlabel("step")
    axes.set_ylabel("step time (s)")
    axes.legend(fontsize=8)
    return fig
