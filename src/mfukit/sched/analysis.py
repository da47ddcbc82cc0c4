"""One ``sched analyze`` read: a real cluster's utilization, idle gaps, waits and failures from
``sacct -P`` or ``sacct --json`` output, with the assumptions that qualify them."""

from __future__ import annotations

from pathlib import Path

from mfukit.core.results import Output
from mfukit.errors import InputError
from mfukit.sched import summary
from mfukit.sched.metrics import Metrics
from mfukit.sched.traces import read_trace


def analyze(
    sacct_file: Path, *, fmt: str = "auto", capacity: int | None = None, skip_bad_rows: bool = False
) -> tuple[Output, Metrics]:
    """The output (exit 1 when the MFU scheduling gate fails) and the metrics of ``sacct_file``;
    ``capacity`` (GPUs) defaults to the nodes seen times the most GPUs each was given."""
    read = read_trace(sacct_file, gpus_per_node=1024, cluster_gpus=10**9, fmt=fmt, skip_bad=skip_bad_rows)
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
    return output, metrics
