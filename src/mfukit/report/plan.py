"""The ``mfukit plan`` report: the top layouts, where their step time goes, memory against HBM, MFU and
time to train against the GPU count, the network check and the fault-tolerance plan of the best layout."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mfukit import units
from mfukit.core.results import Table
from mfukit.ft.plan import FtPlan
from mfukit.ft.views import plan_section
from mfukit.perf.memory import MemoryEstimate
from mfukit.perf.planner import Plan
from mfukit.report.html import Chart, Report, Section, write_report
from mfukit.report.plots import PALETTE, figure
from mfukit.report.sizing import memory_chart

BREAKDOWN_COLOURS = [*PALETTE, "#9cc3e6", "#f2b179", "#8fd19e", "#e79a9a"]


@dataclass
class PlanReport:
    """What the report shows; the CLI builds it from the search."""

    title: str
    summary: list[tuple[str, str]]
    plans: list[Plan]
    plans_table: Table
    best_tables: list[Table]
    memory: MemoryEstimate
    hbm_bytes: float
    scaling: dict[int, Plan | None]
    network_tables: list[Table]
    network_paragraph: str
    breakdown_names: dict[str, str]
    ft_plan: FtPlan | None
    ft_note: str
    assumptions: list[str]
    warnings: list[str]


def _label(plan: Plan, rank: int) -> str:
    layout = plan.layout
    text = (
        f"#{rank} TP{layout.tp} PP{layout.pp}{'v' + str(layout.vpp) if layout.vpp > 1 else ''} DP{layout.dp}"
    )
    return text + (f" CP{layout.cp}" if layout.cp > 1 else "") + (f" EP{layout.ep}" if layout.ep > 1 else "")


def breakdown_chart(plans: Sequence[Plan], names: dict[str, str]) -> Chart:
    """Stacked horizontal bars: each plan's step time by part."""
    fig, axes = figure(7.5, 2.2 + 0.45 * len(plans))
    parts = [name for name in names if any(plan.breakdown_s.get(name, 0.0) > 0 for plan in plans)]
    for row, plan in enumerate(plans):
        left = 0.0
        for index, name in enumerate(parts):
            width = plan.breakdown_s[name]
            axes.barh(
                row,
                width,
                left=left,
                color=BREAKDOWN_COLOURS[index % len(BREAKDOWN_COLOURS)],
                label=names[name] if row == 0 else None,
            )
            left += width
    axes.set_yticks(range(len(plans)), [_label(plan, rank + 1) for rank, plan in enumerate(plans)])
    axes.invert_yaxis()
    axes.set_xlabel("seconds per step")
    fig.legend(fontsize=7, ncol=3, loc="outside lower center", frameon=False)
    return Chart(
        "step_breakdown.png", fig, "Where each of the top layouts spends its step (exposed time only)."
    )


def scaling_chart(scaling: dict[int, Plan | None], chosen: int) -> Chart:
    """MFU and time to train of the best layout at each GPU count."""
    counts = [count for count, plan in sorted(scaling.items()) if plan is not None]
    plans = [scaling[count] for count in counts]
    fig, axes = figure(7.5, 3.6)
    mfu = [plan.mfu * 100 for plan in plans if plan is not None]
    axes.plot(counts, mfu, "o-", color=PALETTE[0], label="MFU of the best layout")
    axes.set_xscale("log", base=2)
    axes.set_xlabel("GPUs")
    axes.set_ylabel("MFU (%)", color=PALETTE[0])
    axes.axvline(chosen, color="black", linestyle=":", linewidth=1)
    days = [
        plan.time_to_train_s / units.SECONDS_PER_DAY
        for plan in plans
        if plan is not None and plan.time_to_train_s is not None
    ]
    if len(days) == len(counts):
        right = axes.twinx()
        right.plot(counts, days, "s--", color=PALETTE[1], label="days to train (no failures)")
        right.set_ylabel("days to train", color=PALETTE[1])
        right.set_yscale("log")
        right.spines["top"].set_visible(False)
    axes.legend(fontsize=8, frameon=False, loc="lower left")
    return Chart(
        "scaling.png",
        fig,
        "MFU and failure-free time to train of the best layout at each GPU count (dotted: the chosen count).",
    )


def write_plan_report(content: PlanReport, out_dir: Path) -> Path:
    best = content.plans[0]
    sections = [
        Section("Top layouts", tables=[content.plans_table]),
        Section(
            "Step-time breakdown",
            paragraphs=[
                "Exposed time per step: communication hidden under compute is not shown; the pipeline bubble is "
                "the fill and drain of the schedule."
            ],
            tables=content.best_tables,
            charts=[breakdown_chart(content.plans, content.breakdown_names)],
        ),
        Section("Memory per GPU", charts=[memory_chart(content.memory, content.hbm_bytes)]),
    ]
    if len([plan for plan in content.scaling.values() if plan is not None]) > 1:
        sections.append(
            Section("Scaling with GPU count", charts=[scaling_chart(content.scaling, best.num_gpus)])
        )
    sections.append(
        Section("Network check", paragraphs=[content.network_paragraph], tables=content.network_tables)
    )
    if content.ft_plan is not None:
        sections.append(plan_section(content.ft_plan))
    else:
        sections.append(Section("Fault tolerance", paragraphs=[content.ft_note]))
    report = Report(
        title=content.title,
        summary=content.summary,
        sections=sections,
        assumptions=content.assumptions,
        warnings=content.warnings,
    )
    return write_report(report, out_dir)
