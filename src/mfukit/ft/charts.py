"""Fault-tolerance charts in the house style: ETTR vs checkpoint interval, and one run's timeline."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mfukit.ft.simulate import TimelineEvent
from mfukit.report.plots import PALETTE, figure
from mfukit.units import SECONDS_PER_DAY

if TYPE_CHECKING:
    from matplotlib.figure import Figure

SECONDS_PER_MINUTE = 60.0


@dataclass(frozen=True)
class SimulatedBand:
    intervals_s: Sequence[float]
    p5: Sequence[float]
    p50: Sequence[float]
    p95: Sequence[float]


def ettr_vs_interval(
    intervals_s: Sequence[float],
    curves: Mapping[str, Sequence[float]],
    markers: Mapping[str, float],
    simulated: SimulatedBand | None = None,
    optima: Mapping[str, tuple[float, float]] | None = None,
) -> Figure:
    """Expected ETTR against the interval (log scale), one curve per policy, optimum and user marked;
    ``optima`` ({curve label: (interval, ETTR)}) puts a dot on each curve at its own optimum."""
    fig, axes = figure()
    minutes = [i / SECONDS_PER_MINUTE for i in intervals_s]
    for label, values in curves.items():
        (line,) = axes.plot(minutes, values, label=label, linewidth=1.6)
        if optima is not None and label in optima:
            interval_s, ettr = optima[label]
            axes.plot([interval_s / SECONDS_PER_MINUTE], [ettr], "o", color=line.get_color(), markersize=6)
    if simulated is not None:
        sim_minutes = [i / SECONDS_PER_MINUTE for i in simulated.intervals_s]
        axes.fill_between(
            sim_minutes, simulated.p5, simulated.p95, color=PALETTE[2], alpha=0.2, label="simulated p5-p95"
        )
        axes.plot(sim_minutes, simulated.p50, "o", color=PALETTE[2], markersize=3.5, label="simulated p50")
    for index, (label, interval_s) in enumerate(markers.items()):
        axes.axvline(
            interval_s / SECONDS_PER_MINUTE,
            color=PALETTE[3 + index % 4],
            linestyle="--",
            linewidth=1,
            label=label,
        )
    axes.set_xscale("log")
    axes.set_xlabel("checkpoint interval (minutes of training between saves)")
    axes.set_ylabel("ETTR (goodput)")
    axes.legend(fontsize=8, loc="lower center")
    return fig


def timeline(events: Sequence[TimelineEvent], work_s: float, productive_frac: float) -> Figure:
    """Durable progress against wall clock for one simulated run, with each interruption marked."""
    fig, axes = figure()
    times = [0.0] + [e.time_s / SECONDS_PER_DAY for e in events]
    work = [0.0] + [e.durable_work_s / SECONDS_PER_DAY * productive_frac for e in events]
    axes.step(times, work, where="post", color=PALETTE[0], linewidth=1.2, label="durable progress")
    end = events[-1].time_s / SECONDS_PER_DAY if events else 0.0
    ideal = work_s / SECONDS_PER_DAY * productive_frac
    axes.plot([0.0, ideal], [0.0, ideal], color=PALETTE[7], linestyle=":", label="no failures")
    marks = (
        ("failures", [e for e in events if e.kind.startswith("failure")], "x", PALETTE[3], 3),
        ("planned stops", [e for e in events if e.kind == "maintenance"], "|", PALETTE[1], 6),
    )
    for label, chosen, marker, colour, size in marks:
        if chosen:
            axes.plot(
                [e.time_s / SECONDS_PER_DAY for e in chosen],
                [e.durable_work_s / SECONDS_PER_DAY * productive_frac for e in chosen],
                marker,
                color=colour,
                markersize=size,
                label=f"{label} ({len(chosen)})",
            )
    axes.set_xlim(0.0, max(end, ideal) * 1.02)
    axes.set_xlabel("wall clock (days)")
    axes.set_ylabel("training done (days of failure-free compute)")
    axes.legend(fontsize=8, loc="upper left")
    return fig
