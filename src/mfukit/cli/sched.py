"""``mfukit sched``: simulate scheduling policies on a trace, analyze a real cluster's sacct output,
and run a throw-away multi-node Slurm for development."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import click

from mfukit import units
from mfukit.cli.common import emit, format_option, progress, report_option, scenario_options
from mfukit.cli.render import Format
from mfukit.core.results import Output, Table
from mfukit.core.scenario import ClusterSection, load_scenario
from mfukit.core.schema import validate_as
from mfukit.errors import InputError, UnknownNameError
from mfukit.sched import summary
from mfukit.sched.engine import ClusterSpec, Drain
from mfukit.sched.engine import simulate as run_simulation
from mfukit.sched.policies import POLICIES, Policy, PriorityWeights
from mfukit.sched.policies.easy import EasyBackfill
from mfukit.sched.policies.slurm import (
    BF_INTERVAL_S,
    BF_MAX_JOB_TEST,
    BF_RESOLUTION_S,
    BF_WINDOW_S,
    SlurmPolicy,
)
from mfukit.sched.traces import FORMATS, read_trace
from mfukit.sched.traces.synthetic import SyntheticSpec, generate, size_mix

DEFAULT_WORKDIR = Path(tempfile.gettempdir()) / "mfukit-slurm-dev"


@click.group()
def sched() -> None:
    """Cluster scheduling: simulate policies on a trace, analyze sacct, run a dev Slurm."""


def _duration(value: str | None, flag: str) -> float | None:
    return None if value is None else units.parse_duration_s(value, field=flag)


def _drains(specs: tuple[str, ...], num_nodes: int) -> tuple[Drain, ...]:
    drains = []
    for spec in specs:
        parts = spec.split("@")
        if len(parts) != 2 or "+" not in parts[1]:
            raise InputError(
                "is not NODES@START+DURATION", field="--drain", value=spec, expected="e.g. 0-15@2h+4h"
            )
        low, _, high = parts[0].partition("-")
        try:
            first, last = int(low), int(high or low)
        except ValueError:
            raise InputError("node range must be numbers", field="--drain", value=spec) from None
        if not 0 <= first <= last < num_nodes:
            raise InputError(f"node range must be within 0..{num_nodes - 1}", field="--drain", value=spec)
        start, _, length = parts[1].partition("+")
        drains.append(
            Drain(
                tuple(range(first, last + 1)),
                units.parse_duration_s(start, field="--drain"),
                units.parse_duration_s(length, field="--drain"),
            )
        )
    return tuple(drains)


def _switches(spec: str) -> tuple[int, float]:
    count, _, wait = spec.partition("@")
    if not count.isdigit() or int(count) < 1:
        raise InputError("is not N or N@WAIT", field="--switches", value=spec, expected='e.g. "1@10min"')
    return int(count), units.parse_duration_s(wait, field="--switches") if wait else float("inf")


def _policy(name: str, weights: PriorityWeights, bf: dict[str, Any]) -> Policy:
    if name not in POLICIES:
        raise UnknownNameError("policy", name, POLICIES, field="--policy")
    if name == "slurm":
        return SlurmPolicy(
            weights,
            bf_interval_s=bf["bf_interval"] or BF_INTERVAL_S,
            bf_resolution_s=bf["bf_resolution"] or BF_RESOLUTION_S,
            bf_window_s=bf["bf_window"] or BF_WINDOW_S,
            bf_max_job_test=bf["bf_max_job_test"] or BF_MAX_JOB_TEST,
        )
    return POLICIES[name](weights if weights.any else None)


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
@click.option("--trace-format", type=click.Choice(FORMATS), default="auto", show_default=True)
@click.option(
    "--skip-bad-rows", is_flag=True, help="Skip unreadable trace rows with a warning instead of stopping."
)
@click.option(
    "--limit-factor",
    type=click.FloatRange(1.0),
    default=1.0,
    show_default=True,
    help="Time limit = run time x this, for trace rows without a limit.",
)
@click.option(
    "--jobs",
    "num_jobs",
    type=click.IntRange(1),
    default=10000,
    show_default=True,
    help="TRACE=synthetic: number of jobs.",
)
@click.option(
    "--load",
    type=click.FloatRange(0.01, 10),
    default=0.9,
    show_default=True,
    help="TRACE=synthetic: offered GPU load.",
)
@click.option("--median-run", default="30min", show_default=True, help="TRACE=synthetic: median run time.")
@click.option(
    "--seed", type=int, default=0, show_default=True, help="Seed for synthetic traces and failures."
)
@click.option(
    "--scenario",
    "scenario_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Scenario file: cluster.failure_rate_per_1000_node_days is used.",
)
@scenario_options("failure_rate")
@click.option(
    "--node-repair",
    default=None,
    help='Time a failed node stays out, e.g. "4h" (default 0: replaced at once).',
)
@click.option(
    "--drain", "drain_specs", multiple=True, help="NODES@START+DURATION, e.g. 0-15@2h+4h (repeatable)."
)
@click.option("--requeue-delay", default=None, help="Delay before a preempted job may start again.")
@click.option("--bf-interval", default=None, help="slurm policy: backfill interval (default 30s).")
@click.option("--bf-resolution", default=None, help="slurm policy: backfill time resolution (default 60s).")
@click.option("--bf-window", default=None, help="slurm policy: backfill window (default 1440min).")
@click.option(
    "--bf-max-job-test",
    type=click.IntRange(1),
    default=None,
    help="slurm policy: jobs tested per cycle (500).",
)
@click.option("--weight-age", type=click.IntRange(0), default=0, help="PriorityWeightAge.")
@click.option("--weight-fairshare", type=click.IntRange(0), default=0, help="PriorityWeightFairshare.")
@click.option("--weight-job-size", type=click.IntRange(0), default=0, help="PriorityWeightJobSize.")
@click.option("--weight-partition", type=click.IntRange(0), default=0, help="PriorityWeightPartition.")
@click.option("--weight-qos", type=click.IntRange(0), default=0, help="PriorityWeightQOS.")
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
    trace_format: str,
    skip_bad_rows: bool,
    limit_factor: float,
    num_jobs: int,
    load: float,
    median_run: str,
    seed: int,
    scenario_path: Path | None,
    overrides: dict[str, Any],
    node_repair: str | None,
    drain_specs: tuple[str, ...],
    requeue_delay: str | None,
    bf_interval: str | None,
    bf_resolution: str | None,
    bf_window: str | None,
    bf_max_job_test: int | None,
    weight_age: int,
    weight_fairshare: int,
    weight_job_size: int,
    weight_partition: int,
    weight_qos: int,
    events_path: Path | None,
    report_dir: Path | None,
    fmt: Format,
) -> int:
    """Simulate TRACE (a trace file, or `synthetic`) on NODES x GPUS-PER-NODE under a policy.

    Policies: fifo, priority (strict multifactor order), easy (EASY backfill), conservative
    (conservative backfill), slurm (Slurm's main + backfill schedulers with bf_* knobs).
    """
    if scenario_path is not None:
        cluster = load_scenario(scenario_path, overrides).cluster
    else:
        fields = {key.split(".", 1)[1]: value for key, value in overrides.items()}
        cluster = validate_as(ClusterSection, fields, source="command line")
    failure_rate = cluster.failure_rate_per_1000_node_days or 0.0
    spec = ClusterSpec(
        num_nodes,
        gpus_per_node,
        nodes_per_switch,
        failure_rate_per_1000_node_days=failure_rate,
        repair_s=_duration(node_repair, "--node-repair") or 0.0,
        drains=_drains(drain_specs, num_nodes),
        requeue_delay_s=_duration(requeue_delay, "--requeue-delay") or 0.0,
    )
    assumptions: list[str] = []
    warnings: list[str] = []
    if trace == "synthetic":
        synth = SyntheticSpec(
            num_jobs,
            spec.num_gpus,
            gpus_per_node,
            load=load,
            median_run_s=units.parse_duration_s(median_run, field="--median-run"),
            seed=seed,
        )
        jobs = generate(synth)
        assumptions += [
            f"synthetic trace: {num_jobs} jobs, Poisson arrivals at offered load {load:g}, size mix from {size_mix()[2]}",
            f"run times log-normal (median {median_run}, sigma {synth.run_sigma}) and limits = run x U(1, "
            f"{synth.limit_factor_max:g}) rounded up to minutes: illustrative, not fitted to a trace",
        ]
    else:
        read = read_trace(
            Path(trace),
            gpus_per_node=gpus_per_node,
            cluster_gpus=spec.num_gpus,
            fmt=trace_format,
            skip_bad=skip_bad_rows,
            missing_limit_factor=limit_factor,
        )
        jobs = read.jobs
        warnings += read.warnings
        assumptions += read.assumptions
        if read.skipped:
            assumptions.append(
                "rows not scheduled: " + ", ".join(f"{n} {why}" for why, n in read.skipped.items())
            )
    if switches_spec is not None:
        count, wait_s = _switches(switches_spec)
        for job in jobs:
            if job.num_nodes > 1:
                job.max_switches, job.switch_wait_s = count, wait_s
        assumptions.append(
            f"every multi-node job asks for at most {count} leaf switch(es), waiting up to "
            f"{units.format_duration(wait_s)} before taking any nodes (--switches)"
        )
    weights = PriorityWeights(weight_age, weight_fairshare, weight_job_size, weight_partition, weight_qos)
    bf = {
        "bf_interval": _duration(bf_interval, "--bf-interval"),
        "bf_resolution": _duration(bf_resolution, "--bf-resolution"),
        "bf_window": _duration(bf_window, "--bf-window"),
        "bf_max_job_test": bf_max_job_test,
    }
    policy = _policy(policy_name, weights, bf)
    if isinstance(policy, EasyBackfill) and nodes_per_switch:
        assumptions.append(
            "easy: --switches is honoured at start; the reservation counts nodes, not switches"
        )
    with progress("simulating") as update:
        result = run_simulation(
            jobs, spec, policy, seed=seed, record_events=events_path is not None, progress=update
        )
    metrics = summary.simulation_metrics(result)
    jobs_per_s = len(result.jobs) / result.wall_s if result.wall_s > 0 else None
    values = summary.result_dict(metrics) | {
        "policy": policy_name,
        "jobs_per_s_simulated": jobs_per_s,
        "simulated_wall_s": result.wall_s,
        "node_failures": result.node_failures,
        "preemptions": result.preemptions,
    }
    assumptions += [
        "utilization is measured over the arrival window (first to last submission)",
        f"node failures: {failure_rate:g} per 1,000 node-days, Poisson; "
        f"a failed node is out for {units.format_duration(spec.repair_s)}; its jobs are requeued (JobRequeue=1), at most MaxBatchRequeue=5 times"
        if failure_rate
        else "no node failures (set --failure-rate or cluster.failure_rate_per_1000_node_days)",
    ]
    if result.rejected:
        warnings.append(f"{len(result.rejected)} job(s) ask for more than the cluster has and were rejected")
    if result.never_started:
        warnings.append(f"{len(result.never_started)} job(s) could never start")
    output = Output(
        schema="sched.simulate/1",
        inputs={
            "trace": trace,
            "policy": policy_name,
            "nodes": num_nodes,
            "gpus_per_node": gpus_per_node,
            "jobs": len(result.jobs),
            "seed": seed,
        },
        result=values,
        assumptions=assumptions,
        warnings=warnings,
        tables=summary.tables(
            metrics, f"{policy_name} on {num_nodes} x {gpus_per_node} GPUs, {len(result.jobs)} jobs"
        ),
        notes=[
            f"simulated {len(result.jobs):,} jobs in {result.wall_s:.2f} s ({jobs_per_s or 0:,.0f} jobs/s)"
        ],
    )
    if events_path is not None and result.events is not None:
        _write_events(events_path, result.events)
        output.files.append(events_path)
    if report_dir is not None:
        output.files.append(
            summary.write(
                metrics,
                result.jobs,
                report_dir,
                f"Scheduling simulation: {policy_name}",
                assumptions,
                warnings,
            )
        )
    return emit(output, fmt)


def _write_events(path: Path, events: list[tuple[float, str, int, str]]) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    try:
        with temporary.open("w", encoding="utf-8") as handle:
            handle.write("time_s\tevent\tjob_id\tdetail\n")
            for at, what, job_id, detail in events:
                handle.write(f"{at:.3f}\t{what}\t{job_id}\t{detail}\n")
        temporary.replace(path)
    except OSError as error:
        raise InputError(f"cannot write the event log: {error}", field="--events", value=str(path)) from None


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
    read = read_trace(
        sacct_file, gpus_per_node=1024, cluster_gpus=10**9, fmt=trace_format, skip_bad=skip_bad_rows
    )
    attempts = read.attempts or read.jobs
    assumptions = [
        "wait is measured from eligibility (sacct Eligible) to the first start",
        "idle gap: per node, from each job end to the next job start on that node (sacct has no per-GPU index)",
    ]
    if capacity is None:
        nodes: dict[str, int] = {}
        for attempt in attempts:
            per_node = attempt.num_gpus // max(1, len(attempt.node_names) or attempt.num_nodes)
            for name in attempt.node_names:
                nodes[name] = max(nodes.get(name, 0), per_node)
        capacity = sum(nodes.values())
        assumptions.append(
            f"capacity {capacity} GPUs = {len(nodes)} nodes seen in the data x the most GPUs each was given "
            "(pass --gpus for the real size)"
        )
    if capacity <= 0:
        raise InputError("no GPUs were allocated in this data", source=str(sacct_file))
    starts = [a.start_s for a in attempts if a.start_s is not None]
    ends = [a.end_s for a in attempts if a.end_s is not None]
    window = (min(starts), max(ends or starts))
    metrics = summary.analysis_metrics(read.jobs, attempts, capacity, window)
    output = Output(
        schema="sched.analyze/1",
        inputs={"sacct_file": str(sacct_file), "format": read.format, "gpus": capacity},
        result=summary.result_dict(metrics) | {"attempts": len(attempts)},
        assumptions=assumptions + read.assumptions,
        warnings=read.warnings,
        tables=summary.tables(metrics, f"{sacct_file.name}: {len(read.jobs)} jobs on {capacity} GPUs"),
        exit_code=0 if metrics.gate_pass else 1,
    )
    if report_dir is not None:
        output.files.append(
            summary.write(
                metrics,
                read.jobs,
                report_dir,
                f"Slurm analytics: {sacct_file.name}",
                output.assumptions,
                output.warnings,
            )
        )
    return emit(output, fmt)


@sched.group("dev-cluster")
def dev_cluster() -> None:
    """A throw-away multi-node Slurm on this machine (root; Debian slurm-wlm)."""


@dev_cluster.command("up")
@click.option(
    "--workdir", type=click.Path(file_okay=False, path_type=Path), default=DEFAULT_WORKDIR, show_default=True
)
@click.option("--nodes", "num_nodes", type=click.IntRange(1, 64), default=4, show_default=True)
@click.option("--gpus-per-node", type=click.IntRange(1, 16), default=8, show_default=True)
@click.option("--with-db", is_flag=True, help="Also run slurmdbd + MariaDB so sacct works.")
@format_option
def dev_cluster_up(workdir: Path, num_nodes: int, gpus_per_node: int, with_db: bool, fmt: Format) -> int:
    """Start slurmctld, NODES slurmd with fake GPUs (and slurmdbd + MariaDB with --with-db)."""
    from mfukit.sched.slurm import devcluster

    cluster = devcluster.up(workdir, num_nodes=num_nodes, gpus_per_node=gpus_per_node, with_db=with_db)
    table = Table("dev Slurm cluster", ["item", "value"])
    for item, value in (
        ("SLURM_CONF", str(cluster.conf_path)),
        ("nodes", f"{len(cluster.nodes)} ({cluster.nodes[0]}..{cluster.nodes[-1]}) x {gpus_per_node} GPUs"),
        ("accounting (sacct)", "slurmdbd + MariaDB" if with_db else "off (jobcomp file only)"),
        ("stop with", f"mfukit sched dev-cluster down --workdir {cluster.workdir}"),
    ):
        table.add(item, value)
    output = Output(
        schema="sched.dev-cluster.up/1",
        inputs={
            "workdir": str(workdir),
            "nodes": num_nodes,
            "gpus_per_node": gpus_per_node,
            "with_db": with_db,
        },
        result={
            "workdir": str(cluster.workdir),
            "slurm_conf": str(cluster.conf_path),
            "nodes": cluster.nodes,
            "gpus_per_node": gpus_per_node,
            "with_db": with_db,
            "pids": cluster.pids,
            "ports": cluster.ports,
        },
        tables=[table],
        notes=[f"export SLURM_CONF={cluster.conf_path}"],
    )
    return emit(output, fmt)


@dev_cluster.command("down")
@click.option(
    "--workdir", type=click.Path(file_okay=False, path_type=Path), default=DEFAULT_WORKDIR, show_default=True
)
@format_option
def dev_cluster_down(workdir: Path, fmt: Format) -> int:
    """Stop the processes `up` started in WORKDIR (by recorded PID only)."""
    from mfukit.sched.slurm import devcluster

    stopped = devcluster.down(workdir)
    table = Table("stopped", ["process"])
    for name in stopped:
        table.add(name)
    output = Output(
        schema="sched.dev-cluster.down/1",
        inputs={"workdir": str(workdir)},
        result={"stopped": stopped},
        tables=[table],
    )
    return emit(output, fmt)
