"""Does the simulator decide as Slurm did? Put the simulator in the real cluster's state at every
instant Slurm started jobs, let the ``slurm`` policy decide once, and compare.

At each whole second ``t`` at which the real cluster started jobs (from sacct): jobs that started
before ``t`` and had not ended by ``t`` run on their real nodes with their real time limits; jobs
eligible by ``t`` that had not started wait. The simulator's main pass and backfill cycle then start
a set S. Agreement means every job Slurm started at ``t`` is in S, and every other job in S was
started by Slurm within ``tolerance_s``. Decisions are checked one instant at a time, so the
sub-second latencies of a real controller (and sacct's whole seconds) cannot accumulate into drift.
"""

from __future__ import annotations

from dataclasses import dataclass

from mfukit.sched.engine import Simulation
from mfukit.sched.job import RUNNING, Job
from mfukit.sched.slurm.conf import ClusterOptions, node_names


@dataclass(frozen=True)
class Decision:
    at_s: float
    real: tuple[int, ...]  # job ids Slurm started at this second
    simulated: tuple[int, ...]  # job ids the simulator starts in the same state
    missing: tuple[int, ...]  # started by Slurm, not by the simulator
    early: tuple[int, ...]  # started by the simulator, by Slurm only later than the tolerance


def _fresh(job: Job) -> Job:
    return Job(
        job.job_id,
        job.submit_s,
        job.run_s,
        job.limit_s,
        job.num_nodes,
        job.gpus_per_node,
        partition=job.partition,
        qos=job.qos,
        user=job.user,
        nice=job.nice,
    )


def _decide(
    real: list[Job],
    at: float,
    options: ClusterOptions,
    num_nodes: int,
    gpus_per_node: int,
    *,
    ended_by_now: bool,
) -> tuple[int, ...]:
    """Job ids the simulator starts at ``at`` from the real state there.

    ``ended_by_now``: whether jobs that sacct says ended in the same whole second ``at`` count as
    finished (Slurm stores whole seconds, so a pass in that second may have run before or after them).
    """
    index = {name: position for position, name in enumerate(node_names(num_nodes))}
    sim = Simulation([], options.spec(num_nodes, gpus_per_node), options.policy())
    for job in real:
        if job.start_s is None or job.start_s >= at:
            continue
        if job.end_s is not None and (job.end_s < at or (ended_by_now and job.end_s == at)):
            continue
        copy = _fresh(job)
        nodes = tuple(index[name] for name in job.node_names)
        sim.nodes.take_nodes(nodes, copy.gpus_per_node)
        sim.now = job.start_s
        sim.pending_count += 1  # start() counts the job out of the queue
        sim.pending_per_gpus[copy.gpus_per_node] += 1
        sim.start(copy, nodes)
    sim.now = at
    waiting = []
    for job in real:
        if job.submit_s <= at and job.start_s is not None and job.start_s >= at:
            copy = _fresh(job)
            sim.enqueue(copy)
            waiting.append(copy)
    sim.policy.schedule(at, freed=True, arrived=len(waiting), tick=True)
    return tuple(sorted(j.job_id for j in waiting if j.state == RUNNING))


def check_decisions(
    real: list[Job], options: ClusterOptions, num_nodes: int, gpus_per_node: int, tolerance_s: float
) -> list[Decision]:
    """One :class:`Decision` per second at which Slurm started jobs (``real`` from a sacct read).

    Both readings of that second are tried (jobs ending in it finished before the pass, or not);
    the decision agrees when either does.
    """
    started = {job.job_id: job.start_s for job in real if job.start_s is not None}
    decisions = []
    for at in sorted({s for s in started.values() if s is not None}):
        now_real = tuple(sorted(i for i, s in started.items() if s == at))
        candidates = []
        for ended_by_now in (False, True):
            simulated = _decide(real, at, options, num_nodes, gpus_per_node, ended_by_now=ended_by_now)
            candidates.append(
                Decision(
                    at,
                    now_real,
                    simulated,
                    tuple(i for i in now_real if i not in simulated),
                    tuple(i for i in simulated if (started[i] or 0.0) > at + tolerance_s),
                )
            )
        decisions.append(min(candidates, key=lambda d: len(d.missing) + len(d.early)))
    return decisions
