"""The ``mfukit plan`` report: the top layouts, where their step time goes, memory against HBM, MFU and
time to train against the GPU count, the network check and the fault-tolerance plan of the best layout
(a section the caller renders with ft's views, since ft sits above perf)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mfukit import units
from mfukit.core.results import Table
from mfukit.perf.layouts import SHORT_SHARDING
from mfukit.perf.memory import MemoryEstimate
from mfukit.perf.model_states import sharding_of
from mfukit.perf.planner import Plan
from mfukit.perf.sizing_report import memory_bars, memory_chart
from mfukit.report.html import Chart, Report, Section, write_report
from mfukit.report.plots import PALETTE, figure

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
    plan_memories: list[MemoryEstimate]  # of each of ``plans``
    hbm_bytes: float
    deadline_s: float | None
    scaling: dict[int, Plan | None]
    network_tables: list[Table]
    network_paragraph: str
    breakdown_names: dict[str, str]
    fault_tolerance: Section
    """the fault-tolerance plan of the best layout, or why there is none"""
    assumptions: list[str]
    warnings: list[str]


def _parts(plan: Plan) -> dict[str, str]:
    """Every knob of a plan as a short label part (the ones equal across the plans compared are dropped)."""
    layout = plan.layout
    return {
        "tp": f"TP{layout.tp}",
        "sp": "+SP" if layout.sequence_parallel and layout.tp > 1 else "",
        "pp": f" PP{layout.pp}",
        "vpp": f"v{layout.vpp}" if layout.vpp > 1 else "",
        "dp": f" DP{layout.dp}",
        "cp": f" CP{layout.cp}" if layout.cp > 1 else "",
        "ep": f" EP{layout.ep}" if layout.ep > 1 else "",
        "mbs": f" mb{plan.micro_batch_size}",
        "recompute": f" rc-{layout.recompute}"
        + (f"/{layout.recompute_layers}" if layout.recompute_layers else ""),
        "sharding": f" {SHORT_SHARDING[sharding_of(layout)]}",
    }


ALWAYS_SHOWN = ("tp", "sp", "pp", "vpp", "dp", "cp", "ep")


def labels(plans: Sequence[Plan]) -> list[str]:
    """One label per plan that tells the plans apart: the degrees (with +SP), and the micro-batch,
    recompute and sharding where they differ between the plans."""
    parts = [_parts(plan) for plan in plans]
    shown = [key for key in parts[0] if key in ALWAYS_SHOWN or len({part[key] for part in parts}) > 1]
    return [f"#{rank} " + "".join(part[key] for key in shown) for rank, part in enumerate(parts, start=1)]


def breakdown_chart(plans: Sequence[Plan], names: dict[str, str]) -> Chart:
    """Stacked horizontal bars: each plan's step time by part. The axis starts just below the shortest
    compute part, so that the parts where the layouts differ are not squeezed into the right edge."""
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
    first = parts[0] if parts else None
    start = 0.9 * min(plan.breakdown_s[first] for plan in plans) if first is not None else 0.0
    longest = max(plan.step_time_s for plan in plans)
    axes.set_xlim(start, longest + 0.02 * (longest - start))
    axes.set_yticks(range(len(plans)), labels(plans))
    axes.invert_yaxis()
    axes.set_xlabel(f"seconds per step (axis from {start:,.2f} s)" if start > 0 else "seconds per step")
    fig.legend(fontsize=7, ncol=3, loc="outside lower center", frameon=False)
    return Chart(
        "step_breakdown.png",
        fig,
        "Where each of the top layouts spends its step (exposed time only); the axis starts below the "
        "shortest compute part, whose bars are cut on the left.",
    )


def top_memory_chart(plans: Sequence[Plan], memories: Sequence[MemoryEstimate], hbm_bytes: float) -> Chart:
    """The peak per-GPU memory of each top layout (its fuller pipeline stage), part by part."""
    rows = [(label, memory.peak) for label, memory in zip(labels(plans), memories, strict=True)]
    return memory_bars(
        rows,
        hbm_bytes,
        "memory_top_layouts.png",
        "Peak memory per GPU of each top layout by part (the fuller pipeline stage), against the HBM.",
    )


def scaling_chart(scaling: dict[int, Plan | None], chosen: int, deadline_s: float | None) -> Chart:
    """MFU and time to train of the best layout at each GPU count, each point labelled with its layout, the
    deadline marked."""
    counts = [count for count, plan in sorted(scaling.items()) if plan is not None]
    plans = [plan for _, plan in sorted(scaling.items()) if plan is not None]
    fig, axes = figure(7.5, 4.0)
    mfu = [plan.mfu * 100 for plan in plans]
    axes.plot(counts, mfu, "o-", color=PALETTE[0], label="MFU of the best layout")
    for count, value, plan in zip(counts, mfu, plans, strict=True):
        layout = plan.layout
        text = f"{layout.tp}/{layout.pp}/{layout.dp}" + (f"/cp{layout.cp}" if layout.cp > 1 else "")
        axes.annotate(
            text, (count, value), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=6
        )
    axes.set_xscale("log", base=2)
    axes.set_xticks(counts, [f"{count:,}" for count in counts], fontsize=7)
    axes.minorticks_off()
    axes.set_xlabel("GPUs")
    axes.set_ylabel("MFU (%)", color=PALETTE[0])
    axes.axvline(chosen, color="black", linestyle=":", linewidth=1, label="chosen count")
    days = [
        plan.time_to_train_s / units.SECONDS_PER_DAY for plan in plans if plan.time_to_train_s is not None
    ]
    handles, names = axes.get_legend_handles_labels()
    if len(days) == len(counts):
        right = axes.twinx()
        right.plot(counts, days, "s--", color=PALETTE[1], label="days to train (no failures)")
        if deadline_s is not None:
            right.axhline(
                deadline_s / units.SECONDS_PER_DAY,
                color=PALETTE[3],
                linestyle="--",
                linewidth=1,
                label="deadline",
            )
        right.set_ylabel("days to train", color=PALETTE[1])
        right.set_yscale("log")
        right.spines["top"].set_visible(False)
        more, more_names = right.get_legend_handles_labels()
        handles, names = handles + more, names + more_names
    axes.legend(handles, names, fontsize=8, frameon=False, loc="lower left")
    return Chart(
        "scaling.png",
        fig,
        "MFU and failure-free time to train of the best layout at each GPU count (labels: TP/PP/DP). MFU is "
        "not smooth in the count: each count allows only the layouts whose degrees divide it and whose DP runs "
        "the global batch in whole micro-batches, so a count with awkward factors gets a poorer best layout.",
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
        Section(
            "Memory per GPU",
            charts=[
                memory_chart(content.memory, content.hbm_bytes),
                top_memory_chart(content.plans, content.plan_memories, content.hbm_bytes),
            ],
        ),
    ]
    if len([plan for plan in content.scaling.values() if plan is not None]) > 1:
        sections.append(
            Section(
                "Scaling with GPU count",
                charts=[scaling_chart(content.scaling, best.num_gpus, content.deadline_s)],
            )
        )
    sections.append(
        Section("Network check", paragraphs=[content.network_paragraph], tables=content.network_tables)
    )
    sections.append(content.fault_tolerance)
    report = Report(
        title=content.title,
        summary=content.summary,
        sections=sections,
        assumptions=content.assumptions,
        warnings=content.warnings,
    )
    return write_report(report, out_dir)
