"""Replay a trace on a real Slurm: every job is a ``sleep`` batch job with the trace's size, time
limit, partition, QOS and nice value, eligible at a whole second (``--begin``) so that submission
latency does not leak into the schedule; then collect what happened with ``sacct``."""

from __future__ import annotations

import math
import time
from datetime import datetime
from pathlib import Path

from mfukit.sched.job import Job
from mfukit.sched.slurm.devcluster import DevCluster

SACCT_FORMAT = (
    "JobID,JobName,Partition,Account,User,QOS,State,ExitCode,Submit,Eligible,Start,End,ElapsedRaw,"
    "NNodes,AllocTRES,NodeList,TimelimitRaw,Priority,Flags"
)
MINUTE_S = 60.0


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


def capture(cluster: DevCluster, since_s: float, path: Path, *, json_format: bool = False) -> Path:
    """Write ``sacct`` output for every job since ``since_s`` to ``path`` (-P, or --json)."""
    args = ["sacct", "-a", "-X", "-D", "-S", _stamp(since_s - 60), "-E", "now"]
    text = (
        cluster.run(*args, "--json") if json_format else cluster.run(*args, "-P", f"--format={SACCT_FORMAT}")
    )
    path.write_text(text, encoding="utf-8")
    return path
