"""What ``mfukit ft simulate`` shows: the JSON result and tables of a Monte-Carlo of the run, its output,
and its report with the simulated ETTR band over the checkpoint interval."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mfukit import units
from mfukit.core.results import Output, Table, shown
from mfukit.ft import charts
from mfukit.ft.plan import interval_grid_s
from mfukit.ft.setup import FtInputs
from mfukit.ft.simulate import CAUSES, Simulation, simulate
from mfukit.ft.views import deadline_check, duration, gpu_hours, interval_chart, interval_text
from mfukit.report.html import Chart, Report, Section

SWEEP_POINTS = 9
SWEEP_REPLICAS = 400


def simulation_result(inputs: FtInputs, sim: Simulation, analytic: float | None) -> dict[str, Any]:
    gpus = inputs.cluster.num_gpus
    return {
        "replicas": sim.replicas,
        "seed": sim.seed,
        "interval_s": inputs.run.interval_s,
        "interval_steps": inputs.steps(inputs.run.interval_s),
        "checkpoint_mode": inputs.mode,
        "blocking_s": inputs.run.blocking_s,
        "mtbf_s": inputs.run.mtbf_s,
        "ettr_mean": float(sim.ettr.mean()),
        "ettr_p5": sim.percentile(sim.ettr, 5),
        "ettr_p50": sim.percentile(sim.ettr, 50),
        "ettr_p95": sim.percentile(sim.ettr, 95),
        "ettr_analytic": analytic,
        "interruptions_mean": float(sim.interruptions.mean()),
        "interruptions_p95": sim.percentile(sim.interruptions.astype(float), 95),
        "planned_stops_mean": float(sim.planned_stops.mean()),
        "wall_clock_p5_s": sim.percentile(sim.wall_s, 5),
        "wall_clock_p50_s": sim.percentile(sim.wall_s, 50),
        "wall_clock_p95_s": sim.percentile(sim.wall_s, 95),
        "work_s": inputs.run.work_s,
        "gpu_hours_lost_mean": {
            cause: float(v.mean()) * gpus / units.SECONDS_PER_HOUR for cause, v in sim.lost_s.items()
        },
        "interruptions_by_category_mean": sim.interruptions_by_category,
    }


def simulation_table(inputs: FtInputs, sim: Simulation, analytic: float | None) -> Table:
    table = Table(
        f"simulated run: {sim.replicas:,} replicas, seed {sim.seed}",
        ["quantity", "value"],
        csv_columns=["quantity", "value_si"],
    )
    gpus = inputs.cluster.num_gpus
    three = lambda v: f"{v:.3f}"  # noqa: E731
    rows: list[tuple[str, float | None, Callable[[float], str]]] = [
        ("interval", inputs.run.interval_s, lambda v: interval_text(inputs, v)),
        (f"blocking per save ({inputs.mode})", inputs.run.blocking_s, duration),
        ("ETTR p5", sim.percentile(sim.ettr, 5), three),
        ("ETTR p50", sim.percentile(sim.ettr, 50), three),
        ("ETTR p95", sim.percentile(sim.ettr, 95), three),
        ("ETTR analytic (expected)", analytic, three),
        ("interruptions (mean)", float(sim.interruptions.mean()), lambda v: f"{v:,.1f}"),
        ("planned stops (mean)", float(sim.planned_stops.mean()), lambda v: f"{v:,.1f}"),
        ("wall clock p5", sim.percentile(sim.wall_s, 5), duration),
        ("wall clock p50", sim.percentile(sim.wall_s, 50), duration),
        ("wall clock p95", sim.percentile(sim.wall_s, 95), duration),
    ]
    for cause in (*CAUSES, "straggler"):
        lost = float(sim.lost_s[cause].mean()) * gpus / units.SECONDS_PER_HOUR
        if lost > 0:
            rows.append((f"lost: {cause.replace('_', ' ')}", lost, gpu_hours))
    for name, value, formatter in rows:
        table.add(name, shown(value, formatter))
    return table


def by_category_table(sim: Simulation) -> Table:
    table = Table("interruptions by category (mean per run)", ["category", "interruptions"])
    for name, count in sorted(sim.interruptions_by_category.items(), key=lambda kv: -kv[1]):
        table.add(name, shown(count, lambda v: f"{v:,.1f}"))
    return table


def simulated_band(inputs: FtInputs, replicas: int, seed: int) -> charts.SimulatedBand:
    grid = interval_grid_s(inputs, SWEEP_POINTS)
    spares = inputs.scenario.ft.hot_spares
    p5, p50, p95 = [], [], []
    for interval in grid:
        sim = simulate(
            inputs.run.with_policy(inputs.policy(inputs.mode, interval, spares)), replicas=replicas, seed=seed
        )
        p5.append(sim.percentile(sim.ettr, 5))
        p50.append(sim.percentile(sim.ettr, 50))
        p95.append(sim.percentile(sim.ettr, 95))
    return charts.SimulatedBand(grid, p5, p50, p95)


def simulation_output(
    inputs: FtInputs, sim: Simulation, analytic: float | None, echo: dict[str, Any]
) -> Output:
    """The output of ``ft simulate`` (exit 1 when the median run misses the deadline); ``analytic``: the
    expected ETTR of the analytic plan (None for Weibull failures); ``echo``: its inputs."""
    output = Output(
        schema="ft.simulate/1",
        inputs=echo,
        result=simulation_result(inputs, sim, analytic),
        assumptions=inputs.assumptions,
        warnings=list(inputs.warnings),
        tables=[simulation_table(inputs, sim, analytic), by_category_table(sim)],
    )
    deadline_check(inputs, sim.percentile(sim.wall_s, 50), output)
    return output


def simulation_report(inputs: FtInputs, sim: Simulation, analytic: float | None, output: Output) -> Report:
    """The report of ``ft simulate --report``, with the ETTR band simulated at intervals around the plan's
    (at most SWEEP_REPLICAS replicas each)."""
    band = simulated_band(inputs, min(sim.replicas, SWEEP_REPLICAS), sim.seed)
    productive = 1.0 - inputs.run.straggler_loss_frac
    return Report(
        title=f"Simulated run: {inputs.model.name} on {inputs.cluster.num_gpus:,} x {inputs.cluster.accelerator.name}",
        summary=[
            (
                "ETTR p5 / p50 / p95",
                " / ".join(f"{sim.percentile(sim.ettr, q):.3f}" for q in (5, 50, 95)),
            ),
            ("interruptions", f"{sim.interruptions.mean():,.0f}"),
            ("wall clock p50", duration(sim.percentile(sim.wall_s, 50))),
        ],
        sections=[
            Section("Outcome", tables=[simulation_table(inputs, sim, analytic), by_category_table(sim)]),
            Section("ETTR vs checkpoint interval", charts=[interval_chart(inputs, band)]),
            Section(
                "One run",
                paragraphs=["Durable progress of the first replica; each cross is an interruption."],
                charts=[
                    Chart(
                        "ft_timeline.png",
                        charts.timeline(sim.timeline, inputs.run.work_s, productive),
                        "Run timeline (replica 0)",
                    )
                ],
            ),
        ],
        assumptions=output.assumptions,
        warnings=output.warnings,
    )
