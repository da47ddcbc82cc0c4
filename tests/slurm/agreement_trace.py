"""The small mixed trace replayed on the real Slurm and in the simulator (deterministic).

40 whole-node jobs on 8 nodes: sizes 1-8 nodes, 2-6 s runs, 1-3 min time limits (Slurm's unit is
the minute, so backfill plans on limits 10-90x the runs, as on real clusters), two partitions
(PriorityJobFactor 1 and 10), a few niced jobs, and a second wave eligible 8 s later. Runs and
limits are whole seconds well above Slurm's sub-second launch latency.
"""

from __future__ import annotations

import random

from mfukit.sched.job import Job

NUM_NODES = 8
GPUS_PER_NODE = 8


def agreement_jobs(seed: int = 7) -> list[Job]:
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
                GPUS_PER_NODE,
                partition="prio" if rng.random() < 0.25 else "batch",
                nice=50 if rng.random() < 0.15 else 0,
            )
        )
    return jobs
