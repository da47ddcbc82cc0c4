"""The Standard Workload Format of the Parallel Workloads Archive (Feitelson et al.,
https://www.cs.huji.ac.il/labs/parallel/workload/swf.html): 18 whitespace-separated fields per job,
``;`` comments, -1 for unknown. Here the processor columns count GPUs.

Fields used: 1 job number, 2 submit time (s), 4 run time (s), 5 allocated processors (8 requested
processors when 5 is unknown), 9 requested time (the time limit), 11 status (1 completed, 0 failed,
5 cancelled), 12 user, 16 partition.
"""

from __future__ import annotations

import math
from pathlib import Path

from mfukit.sched.job import CANCELLED, COMPLETED, FAILED
from mfukit.sched.traces.common import MAX_TIME_S, Rows, TraceRead
from mfukit.sched.traces.shape import JobFactory

NUM_FIELDS = 18
_STATUS = {1: COMPLETED, 0: FAILED, 5: CANCELLED}


def read_swf(path: Path, factory: JobFactory, rows: Rows) -> TraceRead:
    jobs = []
    with path.open(encoding="utf-8", errors="replace") as handle:
        for line_no, line in enumerate(handle, start=1):
            text = line.strip()
            if not text or text.startswith(";"):
                continue
            fields = text.split()
            if len(fields) < NUM_FIELDS:
                rows.reject(line_no, f"has {len(fields)} fields, SWF has {NUM_FIELDS}")
                continue
            try:
                values = [float(field) for field in fields[:NUM_FIELDS]]
            except ValueError:
                rows.reject(line_no, "has a field that is not a number")
                continue
            if not all(math.isfinite(value) and abs(value) <= MAX_TIME_S for value in values):
                rows.reject(line_no, f"has a field that is NaN, infinite or beyond {MAX_TIME_S:g}")
                continue
            job_id, submit_s, run_s = int(values[0]), values[1], values[3]
            gpus = int(values[4]) if values[4] > 0 else int(values[7])
            if run_s <= 0:
                rows.skip("never ran (run time <= 0)")
                continue
            if submit_s < 0:
                rows.reject(line_no, f"submit time {submit_s:g} is negative")
                continue
            if gpus <= 0:
                rows.reject(line_no, "has neither allocated (field 5) nor requested (field 8) processors")
                continue
            limit_s = values[8] if values[8] > 0 else None
            job = factory.make(
                job_id,
                submit_s,
                run_s,
                limit_s,
                gpus,
                user=f"u{int(values[11])}" if values[11] >= 0 else "",
                partition=f"p{int(values[15])}" if values[15] >= 0 else "batch",
                exit_state=_STATUS.get(int(values[10]), COMPLETED),
            )
            if job is None:
                rows.reject(line_no, f"asks for {gpus} GPUs, more than the cluster has")
                continue
            jobs.append(job)
    return rows.finish(jobs, "swf", factory.assumptions())
