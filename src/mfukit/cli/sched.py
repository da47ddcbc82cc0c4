"""``mfukit sched``: simulate scheduling policies on a trace, analyze a real cluster's sacct output,
and run a throw-away multi-node Slurm for development."""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from mfukit import units
from mfukit.cli.common import emit, format_option, progress, report_option, scenario_options
from mfukit.cli.render import Format
from mfukit.core.files import write_text_atomic
from mfukit.core.results import Output, Table
from mfukit.core.scenario import ClusterSection, FtSection, load_scenario
from mfukit.core.schema import validate_as
from mfukit.errors import InputError, UnknownNameError
from mfukit.sched import summary
from mfukit.sched.engine import ClusterSpec, Drain
from mfukit.sched.engine import simulate as run_simulation
from mfukit.sched.failures import node_failures
from mfukit.sched.job import Job
from mfukit.sched.policies import POLICIES, Policy, PriorityWeights
from mfukit.sched.policies.easy import EasyBackfill
from mfukit.sched.policies.slurm import (
    BF_INTERVAL_S,
    BF_MAX_JOB_TEST,
    BF_RESOLUTION_S,
    BF_WINDOW_S,
    SCHED_INTERVAL_S,
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
            sched_interval_s=bf["sched_interval"] or SCHED_INTERVAL_S,
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
@click.option("--sched-interval", default=None, help="slurm policy: full main-scheduler pass (default 60s).")
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
    sched_interval: str | None,
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
    (conservative backfill), slurm (Slurm 22.05's main and backfill schedulers on slurmctld's timers,
    with the sched_interval and bf_* knobs). Node failures: --failure-model (a fault-tolerance
    preset: llama3, meta-rsc1, meta-rsc2, or a file) and/or --failure-rate. Exits 1 when the scheduling
    gate fails, as `sched analyze` does.
    """
    if scenario_path is not None:
        scenario = load_scenario(scenario_path, overrides)
        cluster, ft = scenario.cluster, scenario.ft
    else:

        def section(name: str) -> dict[str, Any]:
            return {k.split(".", 1)[1]: v for k, v in overrides.items() if k.startswith(name + ".")}

        cluster = validate_as(ClusterSection, section("cluster"), source="command line")
        ft = validate_as(FtSection, section("ft"), source="command line")
    failures = node_failures(
        model=ft.failure_model if "failure_model" in ft.model_fields_set else None,
        rates=ft.rates,
        rate_per_1000_node_days=cluster.failure_rate_per_1000_node_days,
        gpus_per_node=gpus_per_node,
        source=str(scenario_path) if scenario_path is not None else "command line",
    )
    spec = ClusterSpec(
        num_nodes,
        gpus_per_node,
        nodes_per_switch,
        failure_rate_per_1000_node_days=failures.rate_per_1000_node_days if failures else 0.0,
        replacement_frac=failures.replacement_frac if failures else 1.0,
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
        jobs: Sequence[Job] = generate(synth)
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
        "sched_interval": _duration(sched_interval, "--sched-interval"),
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
    assumptions += ["utilization is measured over the arrival window (first to last submission)"]
    if failures is None or failures.rate_per_1000_node_days <= 0:
        assumptions.append("no node failures (set --failure-model, --failure-rate, or the scenario's)")
    else:
        assumptions.append(
            f"node failures: {failures.rate_per_1000_node_days:.3g} per 1,000 node-days per node, Poisson, from "
            f"{failures.basis}; {units.format_percent(failures.replacement_frac)} of them take the node out "
            f"for {units.format_duration(spec.repair_s)} (--node-repair), the rest "
            "only kill its jobs; killed jobs are requeued (JobRequeue=1), at most MaxBatchRequeue=5 times"
        )
        if failures.left_out:
            warnings.append(
                f"per-job failure categories are not node failures and were left out: {', '.join(failures.left_out)}"
            )
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
        exit_code=0 if metrics.gate_pass else 1,  # as `sched analyze`: a failed gate is a negative answer
    )
    if events_path is not None and result.events is not None:
        _write_events(events_path, result.events)
        output.files.append(events_path)
    if report_dir is not None:
        output.files.append(
            summary.write(
                metrics,
                report_dir,
                f"Scheduling simulation: {policy_name}",
                assumptions,
                warnings,
            )
        )
    return emit(output, fmt)


def _write_events(path: Path, events: list[tuple[float, str, int, str]]) -> None:
    lines = [f"{at:.3f}\t{what}\t{job_id}\t{detail}\n" for at, what, job_id, detail in events]
    try:
        write_text_atomic(path, "time_s\tevent\tjob_id\tdetail\n" + "".join(lines))
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
        "fragmentation: free GPUs on nodes with fewer free than every waiting job asks per node; a job's "
        "GPUs split evenly over its nodes (sacct -X has no per-node count); jobs still waiting when sacct "
        "ran have no AllocTRES and are not counted as waiting",
    ]
    nodes = summary.node_gpus(attempts)
    if capacity is None:
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
    metrics = summary.analysis_metrics(read.jobs, attempts, nodes, capacity, window)
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


@dev_cluster.command("replay")
@click.argument("out_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--workdir", type=click.Path(file_okay=False, path_type=Path), default=DEFAULT_WORKDIR, show_default=True
)
@click.option("--seed", type=int, default=7, show_default=True, help="Seed of the 40-job mixed trace.")
@format_option
def dev_cluster_replay(out_dir: Path, workdir: Path, seed: int, fmt: Format) -> int:
    """Replay the 40-job mixed trace on a running dev cluster, write OUT_DIR, check the simulator.

    Needs `dev-cluster up --nodes 8 --gpus-per-node 8 --with-db`. OUT_DIR gets trace.json, sacct -P
    and --json output and the slurmctld log lines the check reads; then the `slurm` policy replays
    every pass and the whole trace against them (as `dev-cluster check`). Exits 1 on any difference.
    """
    from mfukit.sched.slurm import devcluster, replay

    cluster = devcluster.DevCluster.load(workdir)
    shape = (len(cluster.nodes), cluster.gpus_per_node)
    if shape != (replay.MIXED_TRACE_NODES, replay.MIXED_TRACE_GPUS_PER_NODE) or not cluster.with_db:
        raise InputError(
            f"the mixed trace needs 8 nodes x 8 GPUs with accounting; this cluster has {shape[0]} x {shape[1]}"
            + ("" if cluster.with_db else " without --with-db"),
            source=str(workdir),
            hint="mfukit sched dev-cluster up --nodes 8 --gpus-per-node 8 --with-db",
        )
    with progress("replaying on Slurm (about a minute)"):
        replay.run(cluster, replay.mixed_trace(seed), out_dir)
    return _agreement(out_dir, "sched.dev-cluster.replay/1", fmt)


@dev_cluster.command("check")
@click.argument("replay_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@format_option
def dev_cluster_check(replay_dir: Path, fmt: Format) -> int:
    """Check the `slurm` policy against a replay directory written by `dev-cluster replay`.

    Every logged pass is re-run from the real state before it (jobs started, planned starts and
    reservations, nodes), and the whole trace is simulated open loop on the controller's clock
    (every job must start in the same pass on the same nodes). Exits 1 on any difference.
    """
    return _agreement(replay_dir, "sched.dev-cluster.check/1", fmt)


def _agreement(directory: Path, schema: str, fmt: Format) -> int:
    from mfukit.sched.slurm.conf import ClusterOptions
    from mfukit.sched.slurm.validate import check_replay, load_replay

    options = ClusterOptions()
    agreement = check_replay(load_replay(directory), options)
    wrong = [c for c in agreement.passes if not c.agrees]
    late = [c for c in agreement.starts if not c.agrees]
    plans = sum(len(c.real_planned) for c in agreement.passes)
    difference = agreement.max_start_difference_s
    table = Table(f"simulator vs Slurm: {directory.name}", ["check", "agree", "of"])
    for kind in ("main", "backfill"):
        passes = [c for c in agreement.passes if c.kind == kind]
        table.add(f"{kind} passes (starts{' and plans' if kind == 'backfill' else ''})",
                  sum(c.agrees for c in passes), len(passes))  # fmt: skip
    table.add("planned starts checked in those passes", plans, "")
    table.add(
        "job starts replayed open loop (same pass, same nodes)",
        agreement.starts_agreeing,
        len(agreement.starts),
    )
    table.add("start order", "same" if agreement.order_matches else "differs", "")
    table.add(
        "largest start difference", "—" if difference is None else units.format_duration(difference), ""
    )
    warnings = [
        f"pass at {c.at_s:.3f} ({c.kind}): Slurm started {sorted(c.real_started)}, the simulator "
        f"{sorted(c.simulated_started)}; plans differ for "
        f"{sorted(j for j in set(c.real_planned) | set(c.simulated_planned) if c.real_planned.get(j) != c.simulated_planned.get(j))}"
        for c in wrong[:5]
    ] + [f"job {c.job_id}: Slurm started it at {c.real_s:.3f} on {','.join(c.real_nodes)}, the simulator at "
         f"{c.simulated_s} on {','.join(c.simulated_nodes)}" for c in late[:5]]  # fmt: skip
    output = Output(
        schema=schema,
        inputs={"replay_dir": str(directory)},
        result={
            "agrees": agreement.agrees,
            "passes": len(agreement.passes),
            "passes_agreeing": agreement.passes_agreeing,
            "plans_compared": plans,
            "starts": len(agreement.starts),
            "starts_agreeing": agreement.starts_agreeing,
            "order_matches": agreement.order_matches,
            "max_start_difference_s": difference,
        },
        assumptions=[
            f"the dev cluster's scheduler settings: sched_interval={options.sched_interval_s}s, "
            f"bf_interval={options.bf_interval_s}s, bf_max_time={options.bf_max_time_s}s, "
            f"bf_resolution={options.bf_resolution_s}s, bf_window={options.bf_window_min}min",
            "the open-loop replay runs on the controller's clock (the logged instants of its passes, each job "
            "as long as it really ran); on the simulator's own clock a job that ends waits 0-1 s less for the "
            "next pass than on the real one, and those waits add up along chains of jobs",
        ],
        warnings=warnings,
        tables=[table],
        exit_code=0 if agreement.agrees else 1,
    )
    return emit(output, fmt)
