"""Alibaba PAI GPU cluster trace 2020 (github.com/alibaba/clusterdata, cluster-trace-gpu-v2020),
task table ``pai_task_table.csv``: job_name, task_name, inst_num, status, start_time, end_time,
plan_cpu, plan_mem, plan_gpu, gpu_type. The released files have no header line; a header is accepted.

Each task is one job of ``inst_num`` instances x ``plan_gpu``/100 GPUs (plan_gpu is in percent of a
GPU), rounded up to whole GPUs, since the simulator places whole GPUs. The table records when a task
started, not when it was submitted: each task is submitted at its recorded start, so waits measure
only the simulated scheduler. CPU-only tasks (no plan_gpu) and unfinished tasks are skipped.
"""

from __future__ import annotations

import math
from pathlib import Path

from mfukit.sched.job import COMPLETED, FAILED
from mfukit.sched.traces.common import Rows, TraceRead, csv_records, parse_timestamp
from mfukit.sched.traces.shape import JobFactory

COLUMNS = (
    "job_name",
    "task_name",
    "inst_num",
    "status",
    "start_time",
    "end_time",
    "plan_cpu",
    "plan_mem",
    "plan_gpu",
    "gpu_type",
)
_STATUS = {"Terminated": COMPLETED, "Failed": FAILED}


def read_alibaba(path: Path, factory: JobFactory, rows: Rows) -> TraceRead:
    jobs = []
    index = {name: i for i, name in enumerate(COLUMNS)}
    for line_no, fields in csv_records(path):
        if fields[0].strip() == "job_name":
            index = {name.strip(): i for i, name in enumerate(fields)}
            continue
        try:
            record = {name: fields[i].strip() for name, i in index.items()}
        except IndexError:
            rows.reject(line_no, f"has {len(fields)} columns, the task table has {len(COLUMNS)}")
            continue
        status = _STATUS.get(record.get("status", ""))
        if status is None:
            rows.skip(f"status {record.get('status')!r} (not finished)")
            continue
        plan_gpu = record.get("plan_gpu", "")
        try:
            share = _finite(plan_gpu, "plan_gpu") if plan_gpu and plan_gpu.lower() != "nan" else 0.0
            if share <= 0:
                rows.skip("CPU-only task (no plan_gpu)")
                continue
            start = parse_timestamp(record["start_time"])
            end = parse_timestamp(record["end_time"])
            gpus = math.ceil(_finite(record["inst_num"], "inst_num") * share / 100.0)
        except (KeyError, ValueError, OverflowError) as error:
            rows.reject(line_no, f"unreadable field: {error}")
            continue
        if start is None or end is None or end < start:
            rows.reject(line_no, "needs a start_time and an end_time not before it")
            continue
        job = factory.make(
            line_no,
            start,
            max(end - start, 1.0),
            None,
            gpus,
            name=f"{record.get('job_name', '')}/{record.get('task_name', '')}",
            exit_state=status,
        )
        if job is None:
            rows.reject(line_no, f"asks for {gpus} GPUs, more than the cluster has")
            continue
        jobs.append(job)
    assumptions = [
        "Alibaba's task table has no submit time: each task is submitted at its recorded start_time",
        *factory.assumptions(),
    ]
    return rows.finish(jobs, "alibaba", assumptions)


def _finite(text: str, column: str) -> float:
    """A finite non-negative number from ``column`` (``1O0`` with a letter O, inf or -1 are ValueErrors)."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{column} {text!r} is not a number") from None
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{column} {text!r} is not a finite non-negative number")
    return value
