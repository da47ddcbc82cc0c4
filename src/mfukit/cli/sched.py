"""``mfukit sched``: simulate scheduling policies on a trace, analyze a real cluster's sacct output,
and run a throw-away multi-node Slurm for development."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from mfukit.cli import sched_options as flags
from mfukit.cli.common import emit, format_option, progress, report_option, scenario_options
from mfukit.cli.render import Format
from mfukit.cli.sched_dev import dev_cluster
from mfukit.core.files import write_text_atomic
from mfukit.core.scenario import ClusterSection, FtSection, by_section, load_scenario
from mfukit.core.schema import validate_as
from mfukit.errors import InputError
from mfukit.sched import analysis, summary
from mfukit.sched.engine import ClusterSpec
from mfukit.sched.failures import NodeFailures, node_failures
from mfukit.sched.policies import POLICIES, BackfillSettings, PriorityWeights
from mfukit.sched.simulation import (
    SimulationOutcome,
    SimulationRun,
    SyntheticTrace,
    TraceOptions,
    run_simulation,
)


@click.group()
def sched() -> None:
    """Cluster scheduling: simulate policies on a trace, analyze sacct, run a dev Slurm."""


sched.add_command(dev_cluster)


def _failures(
    scenario_path: Path | None, overrides: dict[str, Any], gpus_per_node: int
) -> NodeFailures | None:
    """Node failures from ``[cluster]`` and ``[ft]`` of the scenario file, or of the flags alone."""
    if scenario_path is not None:
        scenario = load_scenario(scenario_path, overrides)
        cluster, ft = scenario.cluster, scenario.ft
    else:
        sections = by_section(overrides)
        cluster = validate_as(ClusterSection, sections.get("cluster", {}), source="command line")
        ft = validate_as(FtSection, sections.get("ft", {}), source="command line")
    return node_failures(
        model=ft.failure_model if "failure_model" in ft.model_fields_set else None,
        rates=ft.rate_per_unit_s,
        node_rate_per_s=cluster.node_failure_rate_per_s,
        gpus_per_node=gpus_per_node,
        source=str(scenario_path) if scenario_path is not None else "command line",
    )


def _write_files(outcome: SimulationOutcome, events_path: Path | None, report_dir: Path | None) -> None:
    output, events = outcome.output, outcome.result.events
    if events_path is not None and events is not None:
        lines = [f"{at:.3f}\t{what}\t{job_id}\t{detail}\n" for at, what, job_id, detail in events]
        try:
            write_text_atomic(events_path, "time_s\tevent\tjob_id\tdetail\n" + "".join(lines))
        except OSError as error:
            raise InputError(
                f"cannot write the event log: {error}", field="--events", value=str(events_path)
            ) from None
        output.files.append(events_path)
    if report_dir is not None:
        title = f"Scheduling simulation: {outcome.output.inputs['policy']}"
        output.files.append(
            summary.write(outcome.metrics, report_dir, title, output.assumptions, output.warnings)
        )


@sched.command()
@click.argument("trace")
@click.option(
    "--policy", "policy_name", default="easy", show_default=True, help=f"One of: {', '.join(POLICIES)}."
)
@click.option("--nodes", "num_nodes", type=click.IntRange(1), required=True, help="Nodes in the cluster.")
@click.option("--gpus-per-node", type=click.IntRange(1, 64), default=8, show_default=True)
@click.option(
    "--nodes-per-switch", type=click.IntRange(0), default=0, help="Nodes per leaf switch (for --switches)."
)
@click.option(
    "--switches",
    "switches_spec",
    default=None,
    help="Like sbatch --switches=N@WAIT for every multi-node job: at most N leaf switches, "
    'waiting up to WAIT for them (e.g. "1@10min").',
)
@flags.trace_options
@flags.synthetic_options
@click.option(
    "--seed", type=int, default=0, show_default=True, help="Seed for synthetic traces and failures."
)
@click.option(
    "--scenario",
    "scenario_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Scenario file: [cluster] failure_rate_per_1000_node_days and [ft] failure_model / rates are used.",
)
@scenario_options("failure_rate", "failure_model")
@click.option(
    "--node-repair",
    default=None,
    help='Time a failed node stays out, e.g. "4h" (default 0: replaced at once).',
)
@click.option(
    "--drain", "drain_specs", multiple=True, help="NODES@START+DURATION, e.g. 0-15@2h+4h (repeatable)."
)
@click.option("--requeue-delay", default=None, help="Delay before a preempted job may start again.")
@flags.backfill_options
@flags.weight_options
@click.option(
    "--events",
    "events_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the event log (time, event, job, detail) as TSV here.",
)
@report_option
@format_option
def simulate(
    trace: str,
    policy_name: str,
    num_nodes: int,
    gpus_per_node: int,
    nodes_per_switch: int,
    switches_spec: str | None,
    trace_options: TraceOptions,
    synthetic: SyntheticTrace,
    seed: int,
    scenario_path: Path | None,
    overrides: dict[str, Any],
    node_repair: str | None,
    drain_specs: tuple[str, ...],
    requeue_delay: str | None,
    backfill: BackfillSettings,
    weights: PriorityWeights,
    events_path: Path | None,
    report_dir: Path | None,
    fmt: Format,
) -> int:
    """Simulate TRACE (a trace file, or `synthetic`) on NODES x GPUS-PER-NODE under a policy.

    Policies: fifo, priority (strict multifactor order), easy (EASY backfill), conservative
    (conservative backfill), slurm (Slurm 22.05's main and backfill schedulers on slurmctld's timers,
    with the sched_interval and bf_* knobs). Node failures: --failure-model (a fault-tolerance
    preset: llama3, meta-rsc1, meta-rsc2, or a file) and/or --failure-rate. Exits 1 when the scheduling
    gate fails, as `sched analyze` does.
    """
    failures = _failures(scenario_path, overrides, gpus_per_node)
    spec = ClusterSpec(
        num_nodes,
        gpus_per_node,
        nodes_per_switch,
        failure_rate_per_1000_node_days=failures.rate_per_1000_node_days if failures else 0.0,
        replacement_frac=failures.replacement_frac if failures else 1.0,
        repair_s=flags.duration(node_repair, "--node-repair") or 0.0,
        drains=flags.drains(drain_specs, num_nodes),
        requeue_delay_s=flags.duration(requeue_delay, "--requeue-delay") or 0.0,
    )
    run = SimulationRun(
        trace, policy_name, spec, failures, seed, synthetic, trace_options, flags.switches(switches_spec),
        weights, backfill, record_events=events_path is not None,
    )  # fmt: skip
    with progress("simulating") as update:
        outcome = run_simulation(run, update)
    _write_files(outcome, events_path, report_dir)
    return emit(outcome.output, fmt)


@sched.command()
@click.argument("sacct_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--trace-format", type=click.Choice(["auto", "sacct-json", "sacct-p"]), default="auto", show_default=True
)
@click.option(
    "--gpus",
    "capacity",
    type=click.IntRange(1),
    default=None,
    help="GPUs in the cluster (default: nodes seen x the most GPUs one node was given).",
)
@click.option(
    "--skip-bad-rows", is_flag=True, help="Skip unreadable rows with a warning instead of stopping."
)
@report_option
@format_option
def analyze(
    sacct_file: Path,
    trace_format: str,
    capacity: int | None,
    skip_bad_rows: bool,
    report_dir: Path | None,
    fmt: Format,
) -> int:
    """Utilization, idle gaps, waits and failures of a real cluster from `sacct -P` or `sacct --json`.

    Capture with: sacct -a -X -D -P -S START -E END --format=JobID,JobName,Partition,Account,User,QOS,
    State,ExitCode,Submit,Eligible,Start,End,ElapsedRaw,NNodes,AllocTRES,NodeList,TimelimitRaw,Priority,Flags
    (or the same with --json). Exits 1 when the MFU scheduling gate fails.
    """
    output, metrics = analysis.analyze(
        sacct_file, fmt=trace_format, capacity=capacity, skip_bad_rows=skip_bad_rows
    )
    if report_dir is not None:
        title = f"Slurm analytics: {sacct_file.name}"
        output.files.append(summary.write(metrics, report_dir, title, output.assumptions, output.warnings))
    return emit(output, fmt)
