"""The ``mfukit size`` report: headline figures, the memory breakdown against HBM, time vs GPU count."""

from __future__ import annotations

from pathlib import Path

from mfukit import units
from mfukit.core.results import Output
from mfukit.perf.memory import MemoryEstimate, StageMemory
from mfukit.perf.sizing import Sizing
from mfukit.report.html import Chart, Report, Section, write_report
from mfukit.report.plots import PALETTE, figure

GIB = 2.0**30


def memory_chart(memory: MemoryEstimate, hbm_bytes: float, file_name: str = "memory.png") -> Chart:
    """Peak memory per GPU of each pipeline stage, part by part, against the accelerator's HBM."""
    return memory_bars(
        [(f"{stage.stage} stage", stage) for stage in memory.stages],
        hbm_bytes,
        file_name,
        "Peak memory per GPU by part, against the accelerator's HBM.",
    )


def memory_bars(rows: list[tuple[str, StageMemory]], hbm_bytes: float, file_name: str, caption: str) -> Chart:
    """One stacked bar per (label, stage memory): GiB per GPU part by part, HBM marked."""
    fig, axes = figure(7.5, 2.2 + 0.55 * len(rows))
    stages = [stage for _, stage in rows]
    names = [name for name in stages[0].parts() if any(stage.parts()[name] for stage in stages)]
    for row, stage in enumerate(stages):
        left = 0.0
        for index, name in enumerate(names):
            width = stage.parts()[name] / GIB
            hatch = "//" if index >= len(PALETTE) else None
            axes.barh(
                row,
                width,
                left=left,
                color=PALETTE[index % len(PALETTE)],
                hatch=hatch,
                label=name if row == 0 else None,
            )
            left += width
    hbm = hbm_bytes / GIB
    axes.axvline(hbm, color="black", linestyle="--", linewidth=1)
    axes.text(hbm, len(rows) - 0.55, f" HBM {hbm:.0f} GiB", va="top", ha="right", fontsize=8)
    axes.set_yticks(range(len(rows)), [label for label, _ in rows])
    axes.invert_yaxis()
    axes.set_xlabel("GiB per GPU")
    fig.legend(fontsize=7, ncol=4, loc="outside lower center", frameon=False)
    return Chart(file_name, fig, caption)


def _time_chart(sizing: Sizing) -> Chart:
    fig, axes = figure()
    chosen = sizing.gpus
    counts = [chosen * factor / 40 for factor in range(10, 121)]
    days = [
        sizing.total_train_flops / (n * sizing.effective_flops_per_s_per_gpu) / units.SECONDS_PER_DAY
        for n in counts
    ]
    axes.plot(counts, days, color=PALETTE[0], label="days = FLOPs / (GPUs x peak x MFU x goodput)")
    axes.plot(
        [chosen], [sizing.days], "o", color=PALETTE[1], label=f"chosen: {chosen:,} GPUs, {sizing.days:.1f} d"
    )
    deadline = sizing.inputs.deadline_s
    if deadline:
        axes.axhline(
            deadline / units.SECONDS_PER_DAY, color=PALETTE[3], linestyle="--", linewidth=1, label="deadline"
        )
    axes.set_xlabel("GPUs")
    axes.set_ylabel("wall-clock days")
    axes.legend(fontsize=8, frameon=False)
    return Chart("time_vs_gpus.png", fig, "Training time against GPU count at the assumed MFU and goodput.")


def write_sizing_report(sizing: Sizing, output: Output, out_dir: Path) -> Path:
    """``out_dir/report.html`` with the tables of ``output`` and two charts; returns its path."""
    main, *details = output.tables
    chosen = sizing.chosen
    assert chosen is not None  # callers only report a feasible sizing
    report = Report(
        title=f"mfukit size: {sizing.inputs.model.display_name or sizing.inputs.model.name}",
        summary=[
            ("GPUs", f"{sizing.gpus:,} ({sizing.nodes:,} nodes)"),
            ("wall-clock", f"{sizing.days:.1f} days"),
            ("MFU assumed", units.format_percent(sizing.inputs.mfu)),
            ("energy", "—" if sizing.energy_kwh is None else units.format_energy_kwh(sizing.energy_kwh)),
        ],
        sections=[
            Section("Compute and time", tables=[main], charts=[_time_chart(sizing)]),
            Section(
                "Memory per GPU",
                tables=details,
                charts=[memory_chart(chosen.memory, sizing.inputs.accelerator.hbm_bytes)],
            ),
        ],
        assumptions=output.assumptions,
        warnings=output.warnings,
    )
    return write_report(report, out_dir)
