"""From a simulation or a sacct read to metrics, the JSON result, the tables and the HTML report,
with the same layout for both so a simulated replay and reality read alike."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mfukit import units
from mfukit.core.results import Table, shown
from mfukit.report.html import Chart, Report, Section, write_report
from mfukit.report.plots import figure
from mfukit.sched.engine import SimResult
from mfukit.sched.job import Job, size_class
from mfukit.sched.metrics import (
    GATE_IDLE_GAP_S,
    GATE_UTILIZATION,
    Metrics,
    Timeline,
    measure,
    queue_idle_gpu_s,
)


def simulation_metrics(result: SimResult) -> Metrics:
    """Metrics of a simulation over its arrival window (first to last submission), where the load
    is what the trace offers; past the last arrival the cluster only drains."""
    jobs = result.jobs
    first = jobs[0].submit_s if jobs else 0.0
    last_submit = jobs[-1].submit_s if jobs else 0.0
    last_end = max((j.end_s for j in jobs if j.end_s is not None), default=last_submit)
    window = (first, last_submit if last_submit > first else last_end)
    timeline = Timeline.from_steps(result.timeline_t, result.timeline_gpus)
    metrics = measure(jobs, jobs, timeline, result.spec.num_gpus, window, lost_gpu_s=result.lost_gpu_s)
    span = max(last_end - first, 1e-9) * result.spec.num_gpus
    metrics.stranded_gpu_frac = result.stranded_gpu_s / span
    metrics.idle_with_queue_gpu_frac = result.idle_with_queue_gpu_s / span
    metrics.counts["node_failures"] = result.node_failures
    metrics.counts["preemptions"] = result.preemptions
    metrics.counts["rejected_too_large"] = len(result.rejected)
    return metrics


def node_gpus(attempts: Sequence[Job]) -> dict[Hashable, int]:
    """GPUs per node as sacct shows them: the most that one job was given on it (a job's GPUs split
    evenly over its nodes; sacct -X has no per-node count)."""
    nodes: dict[Hashable, int] = {}
    for attempt in attempts:
        per_node = attempt.num_gpus // max(1, len(attempt.node_names) or attempt.num_nodes)
        for name in attempt.node_names:
            nodes[name] = max(nodes.get(name, 0), per_node)
    return nodes


def job_waits(jobs: Sequence[Job], attempts: Sequence[Job], until_s: float) -> list[tuple[float, float, int]]:
    """(from, until, GPUs asked per node) of every wait: submission (eligibility) to the first start,
    and a requeued job's end to its next start; a job that never started waits until ``until_s``."""
    by_job: dict[str, list[Job]] = defaultdict(list)
    for attempt in attempts:
        by_job[attempt.name].append(attempt)
    waits = []
    for job in jobs:
        tries = sorted(by_job.get(job.name, []), key=lambda a: a.start_s or 0.0)
        since = job.submit_s
        for attempt in tries:
            if attempt.start_s is not None:
                waits.append((since, attempt.start_s, job.gpus_per_node))
            since = attempt.end_s if attempt.end_s is not None else until_s
        if not tries:
            waits.append((since, until_s, job.gpus_per_node))
    return waits


def analysis_metrics(
    jobs: Sequence[Job],
    attempts: Sequence[Job],
    nodes: dict[Hashable, int],
    capacity_gpus: int,
    window: tuple[float, float],
) -> Metrics:
    """Metrics of a sacct read; ``nodes`` is :func:`node_gpus` of ``attempts``."""
    timeline = Timeline.from_attempts(attempts, window[1])
    metrics = measure(jobs, attempts, timeline, capacity_gpus, window)
    stranded, idle = queue_idle_gpu_s(
        attempts,
        job_waits(jobs, attempts, window[1]),
        nodes,
        window,
        unseen_free_gpus=max(0, capacity_gpus - sum(nodes.values())),
    )
    span = max(window[1] - window[0], 1e-9) * capacity_gpus
    metrics.stranded_gpu_frac = stranded / span
    metrics.idle_with_queue_gpu_frac = idle / span
    return metrics


def result_dict(metrics: Metrics) -> dict[str, Any]:
    counts = metrics.counts
    return {
        "utilization": metrics.utilization,
        "window_start_s": metrics.window_s[0],
        "window_end_s": metrics.window_s[1],
        "capacity_gpus": metrics.capacity_gpus,
        "wait_s_mean": metrics.wait_s["mean"],
        "wait_s_p50": metrics.wait_s["p50"],
        "wait_s_p95": metrics.wait_s["p95"],
        "wait_s_p99": metrics.wait_s["p99"],
        "wait_s_by_size": metrics.wait_s_by_size,
        "wait_s_by_partition": metrics.wait_s_by_partition,
        "bounded_slowdown_mean": metrics.bounded_slowdown_mean,
        "idle_gap_s_mean": metrics.idle_gap_s["mean"],
        "idle_gap_s_p50": metrics.idle_gap_s["p50"],
        "idle_gap_s_p95": metrics.idle_gap_s["p95"],
        "stranded_gpu_frac": metrics.stranded_gpu_frac,
        "idle_with_queue_gpu_frac": metrics.idle_with_queue_gpu_frac,
        "backfill_share": metrics.backfill_share,
        "makespan_s": metrics.makespan_s,
        "jobs": counts["jobs"],
        "jobs_completed": counts["completed"],
        "jobs_failed": counts["failed"],
        "jobs_timeout": counts["timeout"],
        "jobs_cancelled": counts["cancelled"],
        "jobs_node_fail": counts["node_fail"],
        "jobs_requeued": counts["requeued"],
        "jobs_never_started": counts["never_started"],
        "counts": counts,
        "gpu_hours_lost_to_failures": metrics.gpu_hours_lost_to_failures,
        "scheduling_gate": metrics.gate(),
    }


def tables(metrics: Metrics, title: str) -> list[Table]:
    summary = Table(title, ["metric", "value"], csv_columns=["metric", "value"])
    rows: list[tuple[str, Any]] = [
        ("GPU utilization (allocated / capacity)", shown(metrics.utilization, units.format_percent)),
        ("wait mean", shown(metrics.wait_s["mean"], units.format_duration)),
        ("wait p50 / p95 / p99", " / ".join(_opt(metrics.wait_s[k]) for k in ("p50", "p95", "p99"))),
        ("bounded slowdown mean (tau 10 s)", shown(metrics.bounded_slowdown_mean, lambda v: f"{v:.2f}")),
        (
            "GPU idle gap between jobs mean / p95",
            f"{_opt(metrics.idle_gap_s['mean'])} / {_opt(metrics.idle_gap_s['p95'])}",
        ),
        (
            "fragmentation: free GPUs no waiting job fits",
            shown(metrics.stranded_gpu_frac, units.format_percent),
        ),
        ("free GPUs while jobs wait", shown(metrics.idle_with_queue_gpu_frac, units.format_percent)),
        ("jobs started by backfill", shown(metrics.backfill_share, units.format_percent)),
        ("makespan", shown(metrics.makespan_s, units.format_duration)),
        (
            "jobs completed / failed / timeout",
            f"{metrics.counts['completed']} / {metrics.counts['failed']} / {metrics.counts['timeout']}",
        ),
        (
            "jobs requeued / node-fail / never started",
            f"{metrics.counts['requeued']} / {metrics.counts['node_fail']} / {metrics.counts['never_started']}",
        ),
        ("GPU-hours lost to failures", shown(metrics.gpu_hours_lost_to_failures, lambda v: f"{v:,.1f}")),
        (
            f"scheduling gate (util >= {GATE_UTILIZATION:.0%}, idle gap <= {units.format_duration(GATE_IDLE_GAP_S, 0)})",
            "pass" if metrics.gate_pass else "FAIL",
        ),
    ]
    for name, value in rows:
        summary.add(name, value)
    by_size = Table(
        "wait by job size",
        ["size", "jobs", "p50", "p95", "p99"],
        csv_columns=["size_class", "jobs", "wait_s_p50", "wait_s_p95", "wait_s_p99"],
    )
    counts: dict[str, int] = {}
    for job in metrics.jobs:
        counts[size_class(job.num_gpus)] = counts.get(size_class(job.num_gpus), 0) + 1
    for name, stats in metrics.wait_s_by_size.items():
        by_size.add(
            name, counts.get(name), *(shown(stats[k], units.format_duration) for k in ("p50", "p95", "p99"))
        )
    result = [summary, by_size]
    if len(metrics.wait_s_by_partition) > 1:
        by_part = Table(
            "wait by partition",
            ["partition", "p50", "p95", "p99"],
            csv_columns=["partition", "wait_s_p50", "wait_s_p95", "wait_s_p99"],
        )
        for name, stats in metrics.wait_s_by_partition.items():
            by_part.add(name, *(shown(stats[k], units.format_duration) for k in ("p50", "p95", "p99")))
        result.append(by_part)
    return result


def _opt(value: float | None) -> str:
    return "—" if value is None else units.format_duration(value)


def write(metrics: Metrics, out_dir: Path, title: str, assumptions: list[str], warnings: list[str]) -> Path:
    """The HTML report: headline figures, the tables, utilization over time and the wait CDF."""
    start, end = metrics.window_s
    fig, axes = figure()
    times, values = metrics.timeline.sampled(start, end)
    hours = [(t - start) / units.SECONDS_PER_HOUR for t in times]
    axes.plot(hours, [v / metrics.capacity_gpus for v in values], linewidth=1.2)
    axes.axhline(
        GATE_UTILIZATION,
        color="#c23b3b",
        linestyle="--",
        linewidth=0.8,
        label="scheduling gate (utilization)",
    )
    axes.set_xlabel("hours since window start")
    axes.set_ylabel("allocated GPUs / capacity")
    axes.set_ylim(0, 1.05)
    axes.legend(loc="lower right")
    usage = Chart("utilization.png", fig, "GPU allocation over time")
    fig2, axes2 = figure()
    by_class: dict[str, list[float]] = {}
    for job in metrics.jobs:
        wait = job.wait_s
        if wait is not None:
            by_class.setdefault(size_class(job.num_gpus), []).append(wait)
    for name, waits in sorted(by_class.items(), key=lambda item: len(item[1]), reverse=True):
        ordered = np.sort(np.maximum(np.asarray(waits), 1.0))
        axes2.step(ordered, np.arange(1, ordered.size + 1) / ordered.size, where="post", label=name)
    axes2.set_xscale("log")
    axes2.set_xlabel("wait (s, floored at 1 s)")
    axes2.set_ylabel("fraction of jobs")
    axes2.legend(loc="lower right")
    cdf = Chart("wait_cdf.png", fig2, "Wait-time CDF by job size")
    report = Report(
        title,
        summary=[
            ("utilization", units.format_percent(metrics.utilization)),
            ("wait p50", _opt(metrics.wait_s["p50"])),
            ("wait p95", _opt(metrics.wait_s["p95"])),
            ("idle gap mean", _opt(metrics.idle_gap_s["mean"])),
            ("scheduling gate", "pass" if metrics.gate_pass else "FAIL"),
        ],
        sections=[Section("Scheduling", tables=tables(metrics, "summary"), charts=[usage, cdf])],
        assumptions=assumptions,
        warnings=warnings,
    )
    return write_report(report, out_dir)
