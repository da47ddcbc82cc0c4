"""``mfukit estimate``: step time, MFU, memory and where the step goes, for one parallel layout."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from mfukit.catalog.resolved import load_resolved
from mfukit.cli.common import emit, format_option, scenario_argument, scenario_options
from mfukit.cli.perf_views import PERF_FLAGS
from mfukit.cli.render import Format
from mfukit.errors import InputError
from mfukit.perf.estimate import LayoutEstimate, estimate_layout
from mfukit.perf.estimate_views import estimate_output
from mfukit.perf.inputs import PerfInputs, layout_for_estimate, perf_inputs


@click.command("estimate")
@scenario_argument
@scenario_options(*PERF_FLAGS)
@format_option
def estimate(scenario_path: Path | None, overrides: dict[str, Any], fmt: Format) -> int:
    """Step time, MFU, HFU, memory and the step-time breakdown of one parallel layout.

    Example: mfukit estimate --model gpt3-175b --gpu a100-80gb-sxm --gpus 1024 --global-batch-size 1536
    --tp 8 --pp 8 --sequence-parallel --recompute selective --zero 1
    """
    inputs = perf_inputs(load_resolved(scenario_path, overrides))
    result = estimate_layout(inputs, layout_for_estimate(inputs))
    if result.plan is None or result.memory is None:
        raise _unbuildable(inputs, result)
    return emit(estimate_output(inputs, result, result.plan, result.memory), fmt)


def _unbuildable(inputs: PerfInputs, result: LayoutEstimate) -> InputError:
    """A layout that breaks a divisibility rule is bad input (the user chose it), named by its first field."""
    first = result.problems[0]
    fixes = list(dict.fromkeys(problem.fix for problem in result.problems))
    return InputError(
        "; ".join(problem.message for problem in result.problems),
        source=inputs.source,
        field=first.field,
        value=first.value,
        hint="; ".join(fixes),
    )
