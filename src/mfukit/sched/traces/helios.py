"""Philly- and Helios-style job CSVs with a header line: Helios/Acme (SenseTime, Hu et al. SC'21;
Shanghai AI Lab, NSDI'24) ``cluster_log.csv`` (job_id, user, vc, gpu_num, cpu_num, node_num, state,
submit_time, start_time, end_time, duration, ...) and Philly-derived CSVs (jobid, user, vc,
submitted_time, start_time, end_time, num_gpus, status). Times are epoch seconds or date-times.
Columns are found by name; ``vc`` (virtual cluster) becomes the partition.
"""

from __future__ import annotations

import math
from pathlib import Path

from mfukit.sched.job import COMPLETED, PENDING, RUNNING
from mfukit.sched.traces.common import (
    MAX_TIME_S,
    Rows,
    TraceRead,
    named_records,
    normalize_state,
    parse_timestamp,
)
from mfukit.sched.traces.shape import JobFactory

ALIASES: dict[str, tuple[str, ...]] = {
    "id": ("job_id", "jobid", "id"),
    "submit": ("submit_time", "submitted_time", "submission_time", "submit"),
    "start": ("start_time", "start"),
    "end": ("end_time", "end"),
    "duration": ("duration", "run_time", "runtime"),
    "gpus": ("gpu_num", "num_gpus", "gpus", "gpu", "num_gpu"),
    "nodes": ("node_num", "num_nodes", "nodes"),
    "user": ("user", "user_id", "username"),
    "partition": ("vc", "virtual_cluster", "partition"),
    "state": ("state", "status"),
    "limit": ("time_limit", "timelimit", "limit"),
}


def _lacking(found: set[str]) -> list[str]:
    missing = [key for key in ("submit", "gpus") if key not in found]
    if "duration" not in found and not {"start", "end"} <= found:
        missing.append("duration (or start_time and end_time)")
    return missing


def read_helios(path: Path, factory: JobFactory, rows: Rows) -> TraceRead:
    jobs = []
    expected = "a Helios/Philly-style header: job_id, submit_time, gpu_num, start_time, end_time"
    for line_no, get in named_records(path, ALIASES, _lacking, expected):
        state = normalize_state(get("state")) or COMPLETED
        if state in (PENDING, RUNNING):
            rows.skip("not finished")
            continue
        try:
            submit = parse_timestamp(get("submit"))
            start, end = parse_timestamp(get("start")), parse_timestamp(get("end"))
            duration = _finite(get("duration"), "duration") if get("duration") else None
            gpus = int(_finite(get("gpus") or "0", "gpu_num"))
            nodes = int(_finite(get("nodes"), "node_num")) if get("nodes") else None
            limit = _finite(get("limit"), "time_limit") if get("limit") else None
        except ValueError as error:
            rows.reject(line_no, str(error))
            continue
        if gpus <= 0:
            rows.skip("CPU-only job (no GPUs)")
            continue
        run = end - start if start is not None and end is not None else duration
        if submit is None or run is None or run < 0:
            rows.reject(line_no, "needs a submit time and a duration (or start and end times)")
            continue
        if run == 0:
            rows.skip("never ran (duration 0)")
            continue
        raw_id = get("id")
        job = factory.make(
            int(raw_id) if raw_id.isdigit() else line_no,
            submit,
            run,
            limit,
            gpus,
            nodes=nodes,
            user=get("user"),
            partition=get("partition") or "batch",
            name=raw_id,
            exit_state=state,
        )
        if job is None:
            rows.reject(line_no, f"asks for {gpus} GPUs, more than the cluster has")
            continue
        jobs.append(job)
    return rows.finish(jobs, "helios", factory.assumptions())


def _finite(text: str, column: str) -> float:
    """A finite non-negative number (at most MAX_TIME_S) from ``column``; anything else a ValueError."""
    value = float(text)
    if not (math.isfinite(value) and 0 <= value <= MAX_TIME_S):
        raise ValueError(f"{column} {text!r} is not a finite non-negative number")
    return value
