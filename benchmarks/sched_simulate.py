"""Simulator speed: 1,000,000 jobs with EASY backfill on a 1,000-node (8,000-GPU) cluster.

Target (scheduling issue): under 60 s on one core, i.e. at least 16,667 jobs/s. The trace is the
synthetic generator's (size mix fitted to Meta's RSC clusters, offered load 0.9, log-normal run
times). Time is the simulation alone (not trace generation), as process CPU time (one core; the
machine is shared, so wall time is printed too). Peer measured in the same run: the same trace under
FIFO, which does no backfill work, so the ratio is what EASY's reservation logic costs on top of the
bare event loop. Writes benchmarks/results/sched_simulate.json.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from mfukit.sched.engine import ClusterSpec, simulate
from mfukit.sched.policies import POLICIES
from mfukit.sched.traces.synthetic import SyntheticSpec, generate

NUM_JOBS = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
NODES, GPUS_PER_NODE = 1000, 8
TARGET_S = 60.0  # for 1,000,000 jobs
TARGET_JOBS_PER_S = 1_000_000 / TARGET_S


def timed(policy: str) -> dict[str, float]:
    jobs = generate(SyntheticSpec(NUM_JOBS, NODES * GPUS_PER_NODE, GPUS_PER_NODE, load=0.9, seed=2026))
    cpu0, wall0 = time.process_time(), time.perf_counter()
    result = simulate(jobs, ClusterSpec(NODES, GPUS_PER_NODE), POLICIES[policy]())
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    done = sum(1 for j in result.jobs if j.end_s is not None)
    return {
        "cpu_s": cpu,
        "wall_s": wall,
        "jobs_per_s": NUM_JOBS / cpu,
        "jobs_completed": done,
        "backfilled": sum(j.backfilled for j in result.jobs),
    }


def main() -> None:
    easy = timed("easy")
    fifo = timed("fifo")
    ratio = easy["jobs_per_s"] / TARGET_JOBS_PER_S
    print(f"{NUM_JOBS:,} jobs, EASY backfill, {NODES} nodes x {GPUS_PER_NODE} GPUs, offered load 0.9")
    print(f"{'policy':<6} {'cpu s':>8} {'wall s':>8} {'jobs/s':>10} {'completed':>10} {'backfilled':>11}")
    for name, row in (("easy", easy), ("fifo", fifo)):
        print(
            f"{name:<6} {row['cpu_s']:>8.1f} {row['wall_s']:>8.1f} {row['jobs_per_s']:>10,.0f} "
            f"{row['jobs_completed']:>10,.0f} {row['backfilled']:>11,.0f}"
        )
    print(f"EASY vs target ({TARGET_JOBS_PER_S:,.0f} jobs/s = 1M jobs in {TARGET_S:.0f} s): {ratio:.2f}x")
    print(
        f"EASY cost vs the FIFO event loop on the same trace: {fifo['jobs_per_s'] / easy['jobs_per_s']:.2f}x"
    )
    out = Path(__file__).parent / "results" / "sched_simulate.json"
    out.parent.mkdir(exist_ok=True)
    record = {
        "jobs": NUM_JOBS,
        "nodes": NODES,
        "gpus_per_node": GPUS_PER_NODE,
        "easy": easy,
        "fifo": fifo,
        "target_jobs_per_s": TARGET_JOBS_PER_S,
        "ratio_to_target": ratio,
    }
    out.write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
