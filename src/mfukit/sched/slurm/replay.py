"""Replay a trace on a real Slurm and keep what it did: every job is a ``sleep`` batch job with the
trace's size, time limit, partition, QOS and nice value, eligible at a whole second (``--begin``) so
that submission latency does not leak into the schedule; afterwards ``sacct`` and the slurmctld log
lines that :mod:`~mfukit.sched.slurm.ctldlog` reads are written to a *replay directory*:

``trace.json`` (the cluster, the jobs and their Slurm job ids), ``sacct.txt`` (``sacct -P``),
``sacct.json`` (``sacct --json``) and ``slurmctld.log``.
"""

from __future__ import annotations

import json
import math
import random
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from mfukit.sched.job import Job
from mfukit.sched.slurm.ctldlog import scheduler_lines
from mfukit.sched.slurm.devcluster import DevCluster

SACCT_FORMAT = (
    "JobID,JobName,Partition,Account,User,QOS,State,ExitCode,Submit,Eligible,Start,End,ElapsedRaw,"
    "NNodes,AllocTRES,NodeList,TimelimitRaw,Priority,Flags"
)
MINUTE_S = 60.0
TRACE_FILE = "trace.json"
MIXED_TRACE_NODES = 8
MIXED_TRACE_GPUS_PER_NODE = 8


def mixed_trace(seed: int = 7) -> list[Job]:
    """The small mixed trace replayed on the dev Slurm and in the simulator.

    40 whole-node jobs for 8 nodes: sizes 1-8 nodes, 2-6 s runs, 1-3 min time limits (Slurm's unit
    is the minute, so backfill plans on limits 10-90x the runs, as on real clusters), two partitions
    (PriorityJobFactor 1 and 10), a few niced jobs, and a second wave eligible 8 s later.
    """
    rng = random.Random(seed)
    sizes = [1, 1, 1, 1, 2, 2, 2, 3, 4, 4, 6, 8]
    jobs = []
    for job_id in range(1, 41):
        nodes = rng.choice(sizes)
        jobs.append(
            Job(
                job_id,
                0.0 if job_id <= 30 else 8.0,
                float(rng.randint(2, 6)),
                60.0 * rng.randint(1, 3),
                nodes,
                MIXED_TRACE_GPUS_PER_NODE,
                partition="prio" if rng.random() < 0.25 else "batch",
                nice=50 if rng.random() < 0.15 else 0,
            )
        )
    return jobs


def _stamp(epoch_s: float) -> str:
    # Slurm reads and writes local time; the dev cluster runs where this runs
    return datetime.fromtimestamp(epoch_s).strftime("%Y-%m-%dT%H:%M:%S")


def submit(cluster: DevCluster, jobs: list[Job], *, lead_s: float = 3.0) -> tuple[float, dict[int, str]]:
    """Submit ``jobs`` (``submit_s`` relative to the replay's start) and return (start epoch, job -> Slurm id).

    Time limits are whole minutes (Slurm's unit); a job whose run time exceeds its limit is killed
    by Slurm, as in the simulator.
    """
    workdir = cluster.workdir / "jobs"
    workdir.mkdir(exist_ok=True)
    t0 = math.ceil(time.time() + lead_s + 0.02 * len(jobs))
    ids: dict[int, str] = {}
    for job in sorted(jobs, key=lambda j: (j.submit_s, j.job_id)):
        command = [
            "sbatch",
            "--parsable",
            f"--job-name=r{job.job_id}",
            f"--nodes={job.num_nodes}",
            "--ntasks-per-node=1",
            f"--gpus-per-node={job.gpus_per_node}",
            f"--time={max(1, math.ceil(job.limit_s / MINUTE_S))}",
            f"--partition={job.partition}",
            f"--qos={job.qos}",
            f"--nice={job.nice}",
            f"--begin={_stamp(t0 + job.submit_s)}",
            f"--chdir={workdir}",
            f"--output={workdir}/%j.out",
            f"--wrap=sleep {job.run_s:g}",
        ]
        ids[job.job_id] = cluster.run(*command).strip().split(";")[0]
    return float(t0), ids


def wait_done(cluster: DevCluster, ids: list[str], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        left = cluster.run("squeue", "-h", "-o", "%i", "-j", ",".join(ids), check=False).split()
        if not left:
            return
        time.sleep(1.0)
    raise TimeoutError(f"jobs still queued or running after {timeout_s:.0f} s")


def capture(
    cluster: DevCluster,
    since_s: float,
    path: Path,
    *,
    json_format: bool = False,
    ids: list[str] | None = None,
) -> Path:
    """Write ``sacct`` output for every job since ``since_s`` (only ``ids`` if given) to ``path``
    (-P, or --json)."""
    args = ["sacct", "-a", "-X", "-D", "-S", _stamp(since_s - 60), "-E", "now"]
    if ids:
        args.append(f"--jobs={','.join(ids)}")
    text = (
        cluster.run(*args, "--json") if json_format else cluster.run(*args, "-P", f"--format={SACCT_FORMAT}")
    )
    path.write_text(text, encoding="utf-8")
    return path


def _log_path(cluster: DevCluster) -> Path:
    return cluster.workdir / "log" / "slurmctld.log"


def run(cluster: DevCluster, jobs: list[Job], out_dir: Path, *, timeout_s: float = 300.0) -> Path:
    """Replay ``jobs`` on ``cluster`` and write the replay directory ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    log = _log_path(cluster)
    mark = log.stat().st_size
    t0, ids = submit(cluster, jobs)
    wait_done(cluster, list(ids.values()), timeout_s=timeout_s)
    capture(cluster, t0, out_dir / "sacct.txt", ids=list(ids.values()))
    capture(cluster, t0, out_dir / "sacct.json", json_format=True, ids=list(ids.values()))
    with log.open("rb") as handle:
        handle.seek(mark)
        text = handle.read().decode("utf-8", errors="replace")
    (out_dir / "slurmctld.log").write_text("".join(scheduler_lines(text)), encoding="utf-8")
    trace: dict[str, Any] = {
        "cluster": {"nodes": len(cluster.nodes), "gpus_per_node": cluster.gpus_per_node},
        "start_epoch_s": t0,
        "jobs": [
            {
                "id": job.job_id,
                "slurm_id": int(ids[job.job_id]),
                "submit_s": job.submit_s,
                "run_s": job.run_s,
                "limit_s": job.limit_s,
                "nodes": job.num_nodes,
                "gpus_per_node": job.gpus_per_node,
                "partition": job.partition,
                "qos": job.qos,
                "nice": job.nice,
            }
            for job in jobs
        ],
    }
    (out_dir / TRACE_FILE).write_text(json.dumps(trace, indent=1) + "\n", encoding="utf-8")
    return out_dir
