"""``mfukit ft``: how often the run fails, how often to checkpoint, and what ETTR (goodput) to expect."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from mfukit import units
from mfukit.catalog.resolved import resolve_scenario
from mfukit.cli.common import (
    emit,
    format_option,
    progress,
    report_option,
    scenario_argument,
    scenario_options,
)
from mfukit.cli.render import Format
from mfukit.core.results import Output, Table, shown
from mfukit.core.scenario import load_scenario
from mfukit.errors import InputError
from mfukit.ft import charts
from mfukit.ft.plan import FtPlan, interval_grid_s, plan
from mfukit.ft.setup import FtInputs, ft_inputs
from mfukit.ft.simulate import CAUSES, Simulation, simulate
from mfukit.ft.views import (
    category_table,
    duration,
    gpu_hours,
    interval_chart,
    interval_text,
    interval_warning,
    plan_section,
    plan_table,
    policy_table,
    storage_warning,
)
from mfukit.report.html import Chart, Report, Section, write_report

F = TypeVar("F", bound=Callable[..., Any])

FT_FLAGS = (
    "model",
    "tokens",
    "seq_len",
    "global_batch_tokens",
    "global_batch_size",
    "precision",
    "deadline",
    "system",
    "gpu",
    "gpus",
    "nodes",
    "storage",
    "failure_rate",
    "fsdp",
    "failure_model",
    "checkpoint_interval",
    "checkpoint_mode",
    "checkpoint_state",
    "checkpoint_blocking",
    "restart",
    "detection",
    "replacement",
    "repair",
    "init",
    "fast_forward",
    "hot_spares",
    "failure_distribution",
    "weibull_shape",
    "step_time",
    "mfu",
    "work",
    "straggler_rate",
    "straggler_slowdown",
    "straggler_duration",
)
SWEEP_POINTS = 9
SWEEP_REPLICAS = 400


def ft_options(function: F) -> F:
    function = click.option(
        "--rate",
        "rates",
        multiple=True,
        metavar="CATEGORY=RATE",
        help="Override one failure category's rate, in failures per 1,000 unit-days (unit: the category's "
        "GPU, node or job); repeatable. `mfukit ft plan` lists the categories.",
    )(function)
    return scenario_options(*FT_FLAGS)(function)


@click.group()
def ft() -> None:
    """Fault tolerance: failure rates, checkpoint cost and interval, expected and simulated ETTR."""


def _inputs(scenario_path: Path | None, overrides: dict[str, Any], rates: tuple[str, ...]) -> FtInputs:
    scenario = load_scenario(scenario_path, overrides)
    if rates:
        extra: dict[str, float] = {}
        for text in rates:
            name, sep, value = text.partition("=")
            try:
                extra[name.strip()] = float(value)
            except ValueError:
                raise InputError(
                    "is not CATEGORY=RATE",
                    source="command line",
                    field="--rate",
                    value=text,
                    expected="e.g. faulty-gpu=0.1 (failures per 1,000 GPU-days)",
                ) from None
            if not sep:
                raise InputError("is not CATEGORY=RATE", source="command line", field="--rate", value=text)
        ft_section = scenario.ft.model_copy(update={"rates": {**scenario.ft.rates, **extra}})
        scenario = scenario.model_copy(update={"ft": ft_section})
    return ft_inputs(resolve_scenario(scenario, scenario_path))


def _plan_result(result: FtPlan) -> dict[str, Any]:
    inputs = result.inputs
    run = inputs.run
    ckpt = inputs.checkpoint
    save = ckpt.save(inputs.mode)
    parts = run.restart
    expected = result.expected
    return {
        "failure_model": inputs.failures.model,
        "num_gpus": inputs.cluster.num_gpus,
        "num_nodes": inputs.cluster.num_nodes,
        "failure_rate_per_s": inputs.failures.failure_rate_per_s,
        "planned_stops_per_s": inputs.failures.planned_rate_per_s,
        "mtbf_s": run.mtbf_s,
        "young_interval_s": result.young_interval_s,
        "daly_interval_s": result.daly_interval_s,
        "young_interval_steps": inputs.steps(result.young_interval_s),
        "daly_interval_steps": inputs.steps(result.daly_interval_s),
        "recommended_interval_s": inputs.recommended_interval_s,
        "interval_s": run.interval_s,
        "interval_steps": inputs.steps(run.interval_s),
        "step_time_s": inputs.step_time_s,
        "ettr": expected.ettr,
        "ettr_at_optimum": result.expected_at_optimum.ettr,
        "ettr_first_order": result.first_order_ettr,
        "expected_interruptions": result.expected_interruptions,
        "expected_planned_stops": expected.planned_per_s * expected.wall_s,
        "checkpoint_mode": inputs.mode,
        "checkpoint_bytes": ckpt.checkpoint_bytes,
        "checkpoint_bytes_per_param": ckpt.bytes_per_param,
        "checkpoint_per_rank_bytes": ckpt.per_rank_bytes,
        "checkpoint_write_s": save.write_s,
        "checkpoint_read_s": ckpt.read_s,
        "blocking_s": run.blocking_s,
        "persist_s": run.persist_s,
        "saves": {mode: vars(cost) for mode, cost in ckpt.saves.items()},
        "restart_s": parts.typical_restart_s(parts.replacement_s * result.no_spare_probability),
        "restart_parts_s": {
            "detection": parts.detection_s,
            "replacement_without_spare": parts.replacement_s,
            "init": parts.init_s,
            "checkpoint_load": parts.load_s,
            "fast_forward": parts.fast_forward_s,
        },
        "hot_spares": parts.hot_spares,
        "recommended_hot_spares": result.recommended_hot_spares,
        "no_spare_probability": result.no_spare_probability,
        "work_s": run.work_s,
        "wall_clock_s": expected.wall_s,
        "lost_fraction": expected.lost_fractions,
        "gpu_hours_lost_per_day": result.gpu_hours_lost_per_day(),
        "storage_write_bytes_per_s": result.storage.write_bytes_per_s,
        "storage_write_duty": result.storage.duty,
        "storage_duty_limit": result.storage.duty_limit,
        "interval_at_storage_duty_limit_s": result.storage.interval_at_limit_s,
        "ettr_at_storage_duty_limit": result.storage.ettr_at_limit,
        "categories": [
            {
                "name": c.name,
                "component": c.component,
                "group": c.group,
                "per": c.per,
                "rate_per_1000_unit_days": c.rate_per_1000_unit_days,
                "job_rate_per_s": inputs.failures.rate_per_s(c),
                "needs_replacement": c.needs_replacement,
                "planned": c.planned,
                "overridden": c.overridden,
            }
            for c in inputs.failures.categories
        ],
        "policies": [
            {
                "mode": p.mode,
                "interval_s": p.interval_s,
                "interval_steps": p.interval_steps,
                "hot_spares": p.hot_spares,
                "blocking_s": p.blocking_s,
                "ettr": p.expected.ettr,
                "wall_clock_s": p.expected.wall_s,
                "recommended_interval": p.recommended,
            }
            for p in result.policies
        ],
    }


def _deadline_check(inputs: FtInputs, wall_s: float, output: Output) -> None:
    deadline = inputs.scenario.training.deadline_s
    if deadline is not None and wall_s > deadline:
        output.warnings.append(
            f"the run needs {duration(wall_s)} of wall clock, past the deadline of {duration(deadline)}"
        )
        output.exit_code = 1


@ft.command("plan")
@scenario_argument
@ft_options
@report_option
@format_option
def plan_command(
    scenario_path: Path | None,
    overrides: dict[str, Any],
    rates: tuple[str, ...],
    report_dir: Path | None,
    fmt: Format,
) -> int:
    """MTBF of the job, Young/Daly checkpoint intervals, expected ETTR, lost GPU-hours by cause and a
    comparison of checkpoint policies (analytic, exponential failures)."""
    inputs = _inputs(scenario_path, overrides, rates)
    result = plan(inputs)
    output = Output(
        schema="ft.plan/1",
        inputs={"scenario": scenario_path, "overrides": overrides, "rates": list(rates)},
        result=_plan_result(result),
        assumptions=inputs.assumptions,
        warnings=list(inputs.warnings),
        tables=[plan_table(result), category_table(inputs), policy_table(result)],
    )
    if inputs.run.weibull_shape is not None:
        output.warnings.append(
            "the analytic model assumes exponential failures; use `mfukit ft simulate` for Weibull"
        )
    output.warnings.extend(
        w for w in (interval_warning(result), storage_warning(result.storage, inputs)) if w
    )
    _deadline_check(inputs, result.expected.wall_s, output)
    if report_dir is not None:
        report = Report(
            title=f"Fault tolerance: {inputs.model.name} on {inputs.cluster.num_gpus:,} x {inputs.cluster.accelerator.name}",
            summary=[
                ("MTBF", duration(inputs.run.mtbf_s)),
                ("recommended interval", interval_text(inputs, inputs.recommended_interval_s)),
                ("expected ETTR", f"{result.expected.ettr:.3f}"),
                ("wall clock", duration(result.expected.wall_s)),
            ],
            sections=[
                plan_section(result),
                Section("Failure model", tables=[category_table(inputs)]),
            ],
            assumptions=output.assumptions,
            warnings=output.warnings,
        )
        output.files.append(write_report(report, report_dir))
    return emit(output, fmt)


def _sim_result(inputs: FtInputs, sim: Simulation, analytic: float | None) -> dict[str, Any]:
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


def _sim_table(inputs: FtInputs, sim: Simulation, analytic: float | None) -> Table:
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


def _by_category_table(sim: Simulation) -> Table:
    table = Table("interruptions by category (mean per run)", ["category", "interruptions"])
    for name, count in sorted(sim.interruptions_by_category.items(), key=lambda kv: -kv[1]):
        table.add(name, shown(count, lambda v: f"{v:,.1f}"))
    return table


def _simulated_band(inputs: FtInputs, replicas: int, seed: int) -> charts.SimulatedBand:
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


@ft.command("simulate")
@scenario_argument
@ft_options
@click.option(
    "--replicas", type=click.IntRange(min=1), default=2000, show_default=True, help="Simulated runs."
)
@click.option(
    "--seed", type=int, default=0, show_default=True, help="Random seed: the same seed gives the same result."
)
@report_option
@format_option
def simulate_command(
    scenario_path: Path | None,
    overrides: dict[str, Any],
    rates: tuple[str, ...],
    replicas: int,
    seed: int,
    report_dir: Path | None,
    fmt: Format,
) -> int:
    """Monte-Carlo of the whole run: failures by category, detection, restart, spares, lost work since the
    last durable checkpoint, planned maintenance; ETTR distribution and time to finish."""
    inputs = _inputs(scenario_path, overrides, rates)
    with progress("simulating runs") as callback:
        sim = simulate(inputs.run, replicas=replicas, seed=seed, progress=callback)
    analytic = None if inputs.run.weibull_shape is not None else plan(inputs).expected.ettr
    output = Output(
        schema="ft.simulate/1",
        inputs={
            "scenario": scenario_path,
            "overrides": overrides,
            "rates": list(rates),
            "replicas": replicas,
            "seed": seed,
        },
        result=_sim_result(inputs, sim, analytic),
        assumptions=inputs.assumptions,
        warnings=list(inputs.warnings),
        tables=[_sim_table(inputs, sim, analytic), _by_category_table(sim)],
    )
    _deadline_check(inputs, sim.percentile(sim.wall_s, 50), output)
    if report_dir is not None:
        band = _simulated_band(inputs, min(replicas, SWEEP_REPLICAS), seed)
        productive = 1.0 - inputs.run.straggler_loss_frac
        report = Report(
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
                Section("Outcome", tables=[_sim_table(inputs, sim, analytic), _by_category_table(sim)]),
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
        output.files.append(write_report(report, report_dir))
    return emit(output, fmt)
