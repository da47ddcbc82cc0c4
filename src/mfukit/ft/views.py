"""What a fault-tolerance plan shows a person: its tables and the ETTR-vs-interval chart, and the report
section other commands (the performance plan report) embed: recommended interval, expected ETTR, chart."""

from __future__ import annotations

from collections.abc import Callable

from mfukit import units
from mfukit.core.results import Output, Quantity, Table, shown
from mfukit.ft import charts
from mfukit.ft.plan import CURVE_MODES, FtPlan, StorageLoad, ettr_curve, interval_grid_s, optimum_intervals_s
from mfukit.ft.setup import FtInputs
from mfukit.report.html import Chart, Section


def duration(value: float) -> str:
    return units.format_duration(value)


def interval_text(inputs: FtInputs, interval_s: float) -> str:
    steps = inputs.steps(interval_s)
    return f"{duration(interval_s)} ({steps} steps)" if steps else duration(interval_s)


def percent(value: float) -> str:
    return units.format_percent(value)


def gpu_hours(value: float) -> str:
    return f"{value:,.0f} GPU-h"


def category_table(inputs: FtInputs) -> Table:
    failures = inputs.failures
    table = Table(
        f"failure model {failures.model}: {failures.num_gpus:,} GPUs on {failures.num_nodes:,} nodes",
        ["category", "per", "rate / 1,000 unit-days", "job failures/day", "share", "swap node"],
        csv_columns=[
            "category",
            "per",
            "rate_per_1000_unit_days",
            "job_failures_per_day",
            "share_of_unplanned",
            "needs_replacement",
        ],
    )
    total = failures.failure_rate_per_s
    for c in failures.categories:
        rate = failures.rate_per_s(c)
        table.add(
            c.name + (" *" if c.overridden else ""),
            c.per,
            shown(c.rate_per_1000_unit_days, lambda v: f"{v:.4g}"),
            shown(rate * units.SECONDS_PER_DAY, lambda v: f"{v:.3g}"),
            shown(None if c.planned else rate / total, percent, "planned"),
            "yes" if c.needs_replacement else "no",
        )
    overridden = "* overridden. " if any(c.overridden for c in failures.categories) else ""
    table.caption = overridden + "Rates add: the job is a series system (any failure stops it)."
    return table


def policy_table(result: FtPlan) -> Table:
    table = Table(
        "checkpoint policies (expected, analytic)",
        ["mode", "interval", "steps", "spares", "blocking", "ETTR", "wall clock", "lost GPU-h/day"],
        csv_columns=[
            "mode",
            "interval_s",
            "interval_steps",
            "hot_spares",
            "blocking_s",
            "ettr",
            "wall_clock_s",
            "gpu_hours_lost_per_day",
        ],
        caption="* the recommended (Daly) interval of that mode",
    )
    best = max(result.policies, key=lambda p: p.expected.ettr)
    gpus = result.inputs.cluster.num_gpus
    for p in result.policies:
        table.add(
            p.mode + (" <- best" if p is best else ""),
            Quantity(p.interval_s, duration(p.interval_s) + ("*" if p.recommended else "")),
            p.interval_steps,
            p.hot_spares,
            shown(p.blocking_s, duration),
            shown(p.expected.ettr, lambda v: f"{v:.3f}"),
            shown(p.expected.wall_s, duration),
            shown((1 - p.expected.ettr) * gpus * 24, gpu_hours),
        )
    return table


def plan_table(result: FtPlan) -> Table:
    inputs = result.inputs
    run = inputs.run
    ckpt = inputs.checkpoint
    expected = result.expected
    table = Table("fault-tolerance plan", ["quantity", "value"], csv_columns=["quantity", "value_si"])
    rows: list[tuple[str, float | None, Callable[[float], str]]] = [
        ("job MTBF (unplanned)", run.mtbf_s, duration),
        (
            "interruptions / day",
            inputs.failures.failure_rate_per_s * units.SECONDS_PER_DAY,
            lambda v: f"{v:.2f}",
        ),
        (
            "planned stops / day",
            inputs.failures.planned_rate_per_s * units.SECONDS_PER_DAY,
            lambda v: f"{v:.2f}",
        ),
        ("step time", inputs.step_time_s, lambda v: f"{v:.2f} s"),
        (f"checkpoint ({ckpt.bytes_per_param:g} B/param)", ckpt.checkpoint_bytes, units.format_bytes_si),
        ("  per rank", ckpt.per_rank_bytes, units.format_bytes_si),
        ("  sharded write (sync)", ckpt.save("sync").write_s, duration),
        ("  single-writer save", ckpt.save("single").write_s, duration),
        ("  async blocking (to host)", ckpt.save("async").blocking_s, duration),
        ("  read on restart", ckpt.read_s, duration),
        (f"blocking per save ({inputs.mode})", run.blocking_s, duration),
        (
            "restart (no failure during it)",
            run.restart.typical_restart_s(run.restart.replacement_s * result.no_spare_probability),
            duration,
        ),
        ("Young interval sqrt(2 delta M)", result.young_interval_s, lambda v: interval_text(inputs, v)),
        ("Daly interval", result.daly_interval_s, lambda v: interval_text(inputs, v)),
        ("recommended interval", inputs.recommended_interval_s, lambda v: interval_text(inputs, v)),
        ("interval used", run.interval_s, lambda v: interval_text(inputs, v)),
        ("expected ETTR", expected.ettr, lambda v: f"{v:.3f}"),
        ("  at the recommended interval", result.expected_at_optimum.ettr, lambda v: f"{v:.3f}"),
        ("  Meta first-order estimate", result.first_order_ettr, lambda v: f"{v:.3f}"),
        ("expected interruptions", result.expected_interruptions, lambda v: f"{v:,.0f}"),
        ("failure-free training time", run.work_s, duration),
        ("wall clock to finish", expected.wall_s, duration),
        (
            f"storage write duty (of {units.format_rate(result.storage.write_bytes_per_s)})",
            result.storage.duty,
            percent,
        ),
        (
            f"shortest interval for <= {percent(result.storage.duty_limit)} duty",
            result.storage.interval_at_limit_s,
            lambda v: interval_text(inputs, v),
        ),
    ]
    for name, value, formatter in rows:
        table.add(name, shown(value, formatter))
    table.add("hot spares for < 1 % waits", shown(result.recommended_hot_spares, str, NO_REPAIR_SPARES))
    for cause, lost in result.gpu_hours_lost_per_day().items():
        if lost > 0:
            table.add(f"lost / day: {cause.replace('_', ' ')}", shown(lost, gpu_hours))
    return table


NO_REPAIR_SPARES = "none computed: no repair time (give --repair)"
"""Why no spare count is recommended: without a repair time a swapped node never returns, so any pool is
used up and the wait share depends only on how many failures the run sees, not on a steady state."""


SEGMENTS_PER_MTBF_WARNING = 2.0
"""A segment this many MTBFs long is struck before it completes 1 - e^-2 = 86 % of the time, and the
first-order ETTR (Kokolis et al. 2025) has already fallen to zero."""


def interval_warning(result: FtPlan) -> str | None:
    """A warning when the interval used is so long that most segments never complete."""
    run = result.inputs.run
    if run.segment_s < SEGMENTS_PER_MTBF_WARNING * run.mtbf_s:
        return None
    inputs = result.inputs
    return (
        f"the interval used ({interval_text(inputs, run.interval_s)}) is {run.segment_s / run.mtbf_s:,.3g} x "
        f"the job's MTBF ({duration(run.mtbf_s)}): nearly every segment is lost before its save, so the "
        f"expected ETTR is {result.expected.ettr:.3g} and the run may never finish; the recommended interval "
        f"is {interval_text(inputs, inputs.recommended_interval_s)}"
    )


def storage_warning(load: StorageLoad, inputs: FtInputs) -> str | None:
    """A warning when checkpoint writes keep the storage busy more than ``load.duty_limit`` of the time."""
    if not load.too_busy:
        return None
    ckpt = inputs.checkpoint
    return (
        f"checkpoint writes keep the storage busy {percent(load.duty)} of the time: "
        f"{units.format_bytes_si(ckpt.checkpoint_bytes)} every {interval_text(inputs, inputs.run.interval_s)} "
        f"at {units.format_rate(load.write_bytes_per_s)} "
        f"({units.format_bytes_si(ckpt.checkpoint_bytes / inputs.run.segment_s * units.SECONDS_PER_DAY)}/day), "
        "which starves the data loader and other jobs on a shared tier and leaves no slack for a slow write; "
        f"an interval of {interval_text(inputs, load.interval_at_limit_s)} keeps it within "
        f"{percent(load.duty_limit)} (expected ETTR {load.ettr_at_limit:.3f})"
    )


def interval_chart(inputs: FtInputs, simulated: charts.SimulatedBand | None = None) -> Chart:
    grid = interval_grid_s(inputs)
    curves = {f"{mode} (analytic)": ettr_curve(inputs, mode, grid) for mode in CURVE_MODES}
    optima = {
        f"{mode} (analytic)": (interval_s, ettr_curve(inputs, mode, [interval_s])[0])
        for mode, interval_s in optimum_intervals_s(inputs).items()
    }
    markers = {f"recommended ({inputs.mode})": inputs.recommended_interval_s}
    if inputs.user_interval_s is not None:
        markers["yours"] = inputs.user_interval_s
    figure = charts.ettr_vs_interval(grid, curves, markers, simulated, optima)
    return Chart(
        "ft_ettr_vs_interval.png",
        figure,
        "Expected ETTR against the checkpoint interval; each policy's optimum is a dot on its curve",
    )


def plan_section(result: FtPlan) -> Section:
    """The fault-tolerance section of a plan report for the chosen layout."""
    inputs = result.inputs
    return Section(
        "Fault tolerance",
        paragraphs=[
            f"Recommended checkpoint interval {interval_text(inputs, inputs.recommended_interval_s)} "
            f"({inputs.mode} saves); expected ETTR {result.expected_at_optimum.ettr:.3f} there, "
            f"{result.expected.ettr:.3f} at the interval used ({interval_text(inputs, inputs.run.interval_s)}); "
            f"job MTBF {duration(inputs.run.mtbf_s)} ({inputs.failures.model} failure rates)."
        ],
        tables=[plan_table(result), policy_table(result)],
        charts=[interval_chart(inputs)],
    )


def deadline_check(inputs: FtInputs, wall_s: float, output: Output) -> None:
    """Warn, and exit 1, when the run's wall clock is past the scenario's deadline."""
    deadline = inputs.scenario.training.deadline_s
    if deadline is not None and wall_s > deadline:
        output.warnings.append(
            f"the run needs {duration(wall_s)} of wall clock, past the deadline of {duration(deadline)}"
        )
        output.exit_code = 1
