"""``mfukit size``: the minimum cluster that trains a model on D tokens by a deadline."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from mfukit.catalog.resolved import resolve_scenario
from mfukit.cli.common import (
    emit,
    format_option,
    progress,
    report_option,
    scenario_argument,
    scenario_options,
)
from mfukit.cli.perf_views import PERF_FLAGS
from mfukit.cli.render import Format
from mfukit.core.scenario import Scenario, load_scenario
from mfukit.errors import InputError
from mfukit.ft.goodput import goodput_of
from mfukit.perf.inputs import perf_inputs
from mfukit.perf.sizing_inputs import sizing_inputs
from mfukit.perf.sizing_model import constant_mfu_rule, size_at_constant_mfu, size_by_model
from mfukit.perf.sizing_views import sizing_output
from mfukit.perf.views import search_rule


@click.command("size")
@scenario_argument
@click.option(
    "--mfu",
    "mfu_text",
    default=None,
    help='Planning MFU, e.g. 0.45 or "45%" (default: the GPU\'s typical_mfu).',
)
@scenario_options(
    *PERF_FLAGS,
    "deadline",
    "goodput",
    "pue",
    "usd_per_gpu_hour",
    "failure_model",
    "failure_rate",
    "storage",
    "checkpoint_mode",
)
@report_option
@format_option
def size(
    scenario_path: Path | None,
    mfu_text: str | None,
    overrides: dict[str, Any],
    report_dir: Path | None,
    fmt: Format,
) -> int:
    """Minimum GPUs, layout, memory, network, days, energy and cost to train a model by a deadline.

    Example: mfukit size --model llama-65b --tokens 1.4T --deadline 14d --gpu a100-80gb-sxm
    --global-batch-tokens 4M
    """
    scenario = _flags_over_file(load_scenario(scenario_path, overrides), overrides)
    scene = resolve_scenario(scenario, scenario_path)
    inputs = sizing_inputs(scene, mfu_text)
    goodput = goodput_of(scene, given_as_flag="ft.goodput" in overrides)
    if mfu_text is None and inputs.global_batch_sequences is not None:
        perf = perf_inputs(scene)
        with progress("searching layouts per GPU count") as bar:
            sizing, goodput_source = size_by_model(inputs, perf, goodput, bar)
        rule = search_rule(perf)
    else:
        sizing, goodput_source = size_at_constant_mfu(inputs, goodput)
        rule = constant_mfu_rule(
            inputs, micro_batch_given="micro_batch_size" in scenario.training.model_fields_set
        )
    output = sizing_output(sizing, goodput_source, rule)
    if report_dir is not None and sizing.chosen is not None:
        from mfukit.perf.sizing_report import write_sizing_report

        output.files.append(write_sizing_report(sizing, output, report_dir))
    return emit(output, fmt)


FAILURE_FLAGS = ("ft.failure_model", "cluster.failure_rate_per_1000_node_days")


def _flags_over_file(scenario: Scenario, overrides: dict[str, Any]) -> Scenario:
    """A failure model given as a flag replaces the file's flat ``[ft] goodput`` (flags override the
    scenario: the expected ETTR takes the allowance's place); ``--goodput`` with one is a contradiction."""
    failure_flags = [field for field in FAILURE_FLAGS if field in overrides]
    if not failure_flags:
        return scenario
    if "ft.goodput" in overrides:
        raise InputError(
            "a flat goodput allowance and a failure model contradict each other",
            source="command line",
            field="--goodput",
            value=overrides["ft.goodput"],
            hint="give --goodput for a flat allowance, or --failure-model/--failure-rate for the expected ETTR",
        )
    if scenario.ft.goodput is None:
        return scenario
    return scenario.model_copy(update={"ft": scenario.ft.model_copy(update={"goodput": None})})
