"""One ``sched simulate`` run: the jobs of a trace file or a synthetic trace, the policy with its
settings, the simulation, and its result with the assumptions and warnings that qualify it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from mfukit import units
from mfukit.core.results import Output, ProgressCallback
from mfukit.sched import summary
from mfukit.sched.engine import ClusterSpec, SimResult, simulate
from mfukit.sched.failures import NodeFailures
from mfukit.sched.job import Job
from mfukit.sched.metrics import Metrics
from mfukit.sched.policies import BackfillSettings, PriorityWeights, make_policy
from mfukit.sched.policies.easy import EasyBackfill
from mfukit.sched.traces import read_trace
from mfukit.sched.traces.synthetic import SyntheticSpec, generate, size_mix

SYNTHETIC = "synthetic"  # the TRACE that asks for a generated trace


@dataclass(frozen=True)
class SyntheticTrace:
    """The generated trace's size and shape (``sched simulate synthetic``)."""

    num_jobs: int = 10000
    load: float = 0.9  # offered GPU load
    median_run: str = "30min"  # a duration, parsed only when the trace is generated


@dataclass(frozen=True)
class TraceOptions:
    """How to read a trace file."""

    fmt: str = "auto"
    skip_bad_rows: bool = False
    limit_factor: float = 1.0  # time limit = run time x this, for rows without a limit


@dataclass(frozen=True)
class Switches:
    """Like sbatch ``--switches=N@WAIT``: at most ``count`` leaf switches, waiting up to ``wait_s``."""

    count: int
    wait_s: float


@dataclass(frozen=True)
class SimulationRun:
    """Everything one simulation needs."""

    trace: str  # a trace file, or SYNTHETIC
    policy: str
    spec: ClusterSpec
    failures: NodeFailures | None
    seed: int = 0
    synthetic: SyntheticTrace = field(default_factory=SyntheticTrace)
    trace_options: TraceOptions = field(default_factory=TraceOptions)
    switches: Switches | None = None
    weights: PriorityWeights = field(default_factory=PriorityWeights)
    backfill: BackfillSettings = field(default_factory=BackfillSettings)
    record_events: bool = False


@dataclass(frozen=True)
class SimulationOutcome:
    result: SimResult
    metrics: Metrics
    output: Output


def load_jobs(run: SimulationRun) -> tuple[Sequence[Job], list[str], list[str]]:
    """The jobs of the run's trace, with the assumptions and warnings of reading or generating it."""
    if run.trace == SYNTHETIC:
        synth = SyntheticSpec(
            run.synthetic.num_jobs,
            run.spec.num_gpus,
            run.spec.gpus_per_node,
            load=run.synthetic.load,
            median_run_s=units.parse_duration_s(run.synthetic.median_run, field="--median-run"),
            seed=run.seed,
        )
        return (
            generate(synth),
            [
                f"synthetic trace: {run.synthetic.num_jobs} jobs, Poisson arrivals at offered load "
                f"{run.synthetic.load:g}, size mix from {size_mix()[2]}",
                f"run times log-normal (median {run.synthetic.median_run}, sigma {synth.run_sigma}) and limits "
                f"= run x U(1, {synth.limit_factor_max:g}) rounded up to minutes: illustrative, not fitted to a trace",
            ],
            [],
        )
    read = read_trace(
        Path(run.trace),
        gpus_per_node=run.spec.gpus_per_node,
        cluster_gpus=run.spec.num_gpus,
        fmt=run.trace_options.fmt,
        skip_bad=run.trace_options.skip_bad_rows,
        missing_limit_factor=run.trace_options.limit_factor,
    )
    assumptions = list(read.assumptions)
    if read.skipped:
        assumptions.append(
            "rows not scheduled: " + ", ".join(f"{n} {why}" for why, n in read.skipped.items())
        )
    return read.jobs, assumptions, list(read.warnings)


def ask_for_switches(jobs: Sequence[Job], switches: Switches) -> str:
    """Every multi-node job asks for ``switches``; returns the assumption that says so."""
    for job in jobs:
        if job.num_nodes > 1:
            job.max_switches, job.switch_wait_s = switches.count, switches.wait_s
    return (
        f"every multi-node job asks for at most {switches.count} leaf switch(es), waiting up to "
        f"{units.format_duration(switches.wait_s)} before taking any nodes (--switches)"
    )


def _failure_notes(run: SimulationRun) -> tuple[list[str], list[str]]:
    failures = run.failures
    if failures is None or failures.rate_per_1000_node_days <= 0:
        return ["no node failures (set --failure-model, --failure-rate, or the scenario's)"], []
    assumption = (
        f"node failures: {failures.rate_per_1000_node_days:.3g} per 1,000 node-days per node, Poisson, from "
        f"{failures.basis}; {units.format_percent(failures.replacement_frac)} of them take the node out "
        f"for {units.format_duration(run.spec.repair_s)} (--node-repair), the rest "
        "only kill its jobs; killed jobs are requeued (JobRequeue=1), at most MaxBatchRequeue=5 times"
    )
    left_out = (
        [
            f"per-job failure categories are not node failures and were left out: {', '.join(failures.left_out)}"
        ]
        if failures.left_out
        else []
    )
    return [assumption], left_out


def run_simulation(run: SimulationRun, progress: ProgressCallback | None = None) -> SimulationOutcome:
    """Simulate ``run``; the output exits 1 when the scheduling gate fails, as ``sched analyze`` does."""
    jobs, assumptions, warnings = load_jobs(run)
    if run.switches is not None:
        assumptions.append(ask_for_switches(jobs, run.switches))
    policy = make_policy(run.policy, run.weights, run.backfill)
    if isinstance(policy, EasyBackfill) and run.spec.nodes_per_leaf:
        assumptions.append(
            "easy: --switches is honoured at start; the reservation counts nodes, not switches"
        )
    result = simulate(
        jobs, run.spec, policy, seed=run.seed, record_events=run.record_events, progress=progress
    )
    metrics = summary.simulation_metrics(result)
    jobs_per_s = len(result.jobs) / result.wall_s if result.wall_s > 0 else None
    failure_assumptions, failure_warnings = _failure_notes(run)
    assumptions += ["utilization is measured over the arrival window (first to last submission)"]
    assumptions += failure_assumptions
    warnings += failure_warnings
    if result.rejected:
        warnings.append(f"{len(result.rejected)} job(s) ask for more than the cluster has and were rejected")
    if result.never_started:
        warnings.append(f"{len(result.never_started)} job(s) could never start")
    spec = run.spec
    output = Output(
        schema="sched.simulate/1",
        inputs={
            "trace": run.trace,
            "policy": run.policy,
            "nodes": spec.num_nodes,
            "gpus_per_node": spec.gpus_per_node,
            "jobs": len(result.jobs),
            "seed": run.seed,
        },
        result=summary.result_dict(metrics)
        | {
            "policy": run.policy,
            "jobs_per_s_simulated": jobs_per_s,
            "simulated_wall_s": result.wall_s,
            "node_failures": result.node_failures,
            "preemptions": result.preemptions,
        },
        assumptions=assumptions,
        warnings=warnings,
        tables=summary.tables(
            metrics, f"{run.policy} on {spec.num_nodes} x {spec.gpus_per_node} GPUs, {len(result.jobs)} jobs"
        ),
        notes=[
            f"simulated {len(result.jobs):,} jobs in {result.wall_s:.2f} s ({jobs_per_s or 0:,.0f} jobs/s)"
        ],
        exit_code=0 if metrics.gate_pass else 1,  # as `sched analyze`: a failed gate is a negative answer
    )
    return SimulationOutcome(result, metrics, output)
