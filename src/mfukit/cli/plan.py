"""``mfukit plan``: search every parallel layout for the fastest step on a cluster, or the smallest cluster
that meets a deadline, and (``--report``) write the plan report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from mfukit.catalog.resolved import load_resolved
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
from mfukit.core.files import write_text_atomic
from mfukit.errors import InputError
from mfukit.perf.inputs import perf_inputs, search_space
from mfukit.perf.layout_table import FILE_FORMATS, every_layout
from mfukit.perf.plan_search import plan_search
from mfukit.perf.plan_views import plan_output
from mfukit.perf.planner import Objective


@click.command("plan")
@scenario_argument
@scenario_options(*PERF_FLAGS, "deadline", "storage", "failure_model", "checkpoint_mode", "goodput")
@click.option(
    "--objective",
    type=click.Choice(["mfu", "time"]),
    default="mfu",
    show_default=True,
    help="Rank by MFU or by time to train (they differ only across GPU counts).",
)
@click.option(
    "--top", "top_k", type=click.IntRange(1, 50), default=5, show_default=True, help="Plans to show."
)
@click.option(
    "--scaling/--no-scaling",
    default=None,
    help="Also find the best layout at GPU counts from 1/8 to 2x (default: with --report).",
)
@click.option(
    "--all",
    "all_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also write every evaluated layout at the planned GPU count, one row each, to this file: CSV "
    "(.csv) or JSON lines (.jsonl), best MFU first.",
)
@report_option
@format_option
def plan(
    scenario_path: Path | None,
    overrides: dict[str, Any],
    objective: Objective,
    top_k: int,
    scaling: bool | None,
    all_path: Path | None,
    report_dir: Path | None,
    fmt: Format,
) -> int:
    """Search tp, pp, vpp, dp, cp, ep, micro-batch, recompute, sharding and sequence parallelism for the
    fastest step; with --deadline and no --gpus, the smallest cluster that meets it.

    Example: mfukit plan examples/llama3-70b_h100x1024.toml --report out/
    """
    if all_path is not None and all_path.suffix.lower() not in FILE_FORMATS:
        raise InputError(
            "names no format I can write",
            field="--all",
            value=str(all_path),
            hint="end the file name in .csv (CSV) or .jsonl (JSON lines)",
        )
    scene = load_resolved(scenario_path, overrides)
    inputs = perf_inputs(scene)
    space = search_space(inputs)
    with progress("searching layouts") as bar:
        with_curve = scaling or (scaling is None and report_dir is not None)
        found = plan_search(inputs, space, objective=objective, top_k=top_k, scaling=with_curve, progress=bar)
    output, memory, network = plan_output(inputs, found)
    if all_path is not None:
        rows = list(every_layout(inputs.workload, inputs.system, inputs.accelerator, found.count, space))
        write_text_atomic(all_path, FILE_FORMATS[all_path.suffix.lower()](rows))
        output.result["all_layouts"] = {"path": str(all_path), "rows": len(rows)}
        output.files.append(all_path)
    if report_dir is not None and found.result.plans and memory is not None and network is not None:
        from mfukit.cli.plan_report import plan_report

        output.files.append(
            plan_report(scene, inputs, found.result, found.curve, memory, network, output, report_dir)
        )
    return emit(output, fmt)
