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
from mfukit.core.scenario import load_scenario
from mfukit.errors import InputError
from mfukit.ft.plan import plan
from mfukit.ft.plan_output import plan_output, plan_report
from mfukit.ft.setup import FtInputs, ft_inputs
from mfukit.ft.simulate import simulate
from mfukit.ft.simulation_output import simulation_output, simulation_report
from mfukit.report.html import write_report

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
                number = float(value)
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
            try:
                extra[name.strip()] = units.parse_failure_rate_per_s(number)
            except InputError as error:
                raise InputError(error.message, source="command line", field="--rate", value=text) from None
        ft_section = scenario.ft.model_copy(
            update={"rate_per_unit_s": {**scenario.ft.rate_per_unit_s, **extra}}
        )
        scenario = scenario.model_copy(update={"ft": ft_section})
    return ft_inputs(resolve_scenario(scenario, scenario_path))


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
    output = plan_output(
        inputs, result, {"scenario": scenario_path, "overrides": overrides, "rates": list(rates)}
    )
    if report_dir is not None:
        output.files.append(write_report(plan_report(inputs, result, output), report_dir))
    return emit(output, fmt)


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
    echo = {
        "scenario": scenario_path,
        "overrides": overrides,
        "rates": list(rates),
        "replicas": replicas,
        "seed": seed,
    }
    output = simulation_output(inputs, sim, analytic, echo)
    if report_dir is not None:
        output.files.append(write_report(simulation_report(inputs, sim, analytic, output), report_dir))
    return emit(output, fmt)
