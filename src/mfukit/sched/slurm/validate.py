"""Does the simulator decide as Slurm did? Two checks against a real replay's slurmctld log
(:mod:`~mfukit.sched.slurm.ctldlog`) and its sacct accounting.

* :func:`check_passes` — every pass on its own: put the simulator in the real cluster's state just
  before the pass (jobs started and not yet ended, on their real nodes; eligible jobs waiting), run
  the same pass (main or backfill) at the same instant, and compare the jobs started and their nodes
  and, for backfill, every planned start, reservation end and node set that slurmctld logged.
* :func:`replay_on_controller_clock` — the whole trace open loop: the simulator schedules every job
  itself from submission to end and only borrows the controller's clock (the instants of its
  passes; each job runs as long as it really ran). Every job must start in the same pass, hence at
  the same instant, on the same nodes.

Why the controller's clock and not the simulator's own (:class:`~mfukit.sched.policies.slurm.
PeriodicController`): slurmctld's timers free-run (a backfill cycle starts a second after the last
one *ended*, the main pass every ``sched_interval`` on the background loop), so a job that ends
waits a phase-dependent 0-1 s for the next pass, and that wait accumulates along every chain of jobs
that follow one another; and two jobs ending within milliseconds are seen by one pass or by two
depending on where the pass falls. An open-loop replay on a model clock therefore drifts by about
half a second per generation of jobs and can take different but equally valid decisions; on the
controller's clock it must be exact.

The controller's clock is known to a kernel tick, not to the millisecond: slurmctld reads whole
seconds with time(2), which on Linux reads the kernel's coarse clock (advanced once a tick, 1/HZ:
1-10 ms), while the log stamps the fine clock. A pass stamped within a tick after a whole second may
have read the second before, and the log cannot tell which: a job eligible at that very second
(``--begin``) is then not yet eligible. Such a pass is checked at both seconds and agrees if one of
them reproduces what Slurm did; the open-loop replay runs it at the second so found.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field

from mfukit.core.schema import PositiveInt, Strict, validate_as
from mfukit.errors import InputError
from mfukit.sched.engine import Simulation, simulate
from mfukit.sched.job import Job
from mfukit.sched.policies.slurm import ControllerPass, LogController, SlurmPolicy
from mfukit.sched.slurm.conf import ClusterOptions, node_names
from mfukit.sched.slurm.ctldlog import ControllerLog, LoggedPass, read_controller_log
from mfukit.sched.slurm.replay import TRACE_FILE
from mfukit.sched.traces import read_trace

Plan = dict[int, tuple[float, float, tuple[str, ...]]]
COARSE_CLOCK_TICK_S = 0.01  # the longest kernel tick (CONFIG_HZ=100) by which time(2) trails the log


def controller_seconds(at_s: float) -> tuple[int, ...]:
    """The whole seconds slurmctld's clock may have read at a pass stamped ``at_s``, the log's first."""
    second = math.floor(at_s)
    return (second, second - 1) if at_s - second < COARSE_CLOCK_TICK_S else (second,)


@dataclass(frozen=True)
class PassCheck:
    at_s: float
    kind: str
    clock_s: int  # the whole second the pass was checked at (:func:`controller_seconds`)
    real_started: dict[int, tuple[str, ...]]
    simulated_started: dict[int, tuple[str, ...]]
    real_planned: Plan
    simulated_planned: Plan

    @property
    def agrees(self) -> bool:
        return self.real_started == self.simulated_started and self.real_planned == self.simulated_planned


@dataclass(frozen=True)
class StartCheck:
    job_id: int
    real_s: float
    simulated_s: float | None
    real_nodes: tuple[str, ...]
    simulated_nodes: tuple[str, ...]

    @property
    def agrees(self) -> bool:
        return self.real_s == self.simulated_s and self.real_nodes == self.simulated_nodes


def _controller_pass(logged: LoggedPass, real: dict[int, Job], clock_s: int) -> ControllerPass:
    """The logged pass as the simulator replays it, its clock reading ``clock_s``; a job it started
    is timed by its sacct start, Slurm's own whole-second start time (the log's millisecond stamp
    may be a kernel tick ahead)."""
    clocks = {job_id: tuple(times) for job_id, times in logged.job_clock_s.items()}
    for job_id in logged.started:
        start = real[job_id].start_s
        if start is not None:
            clocks[job_id] = (start,)
    return ControllerPass(logged.at_s, logged.kind, clocks, logged.end_s, clock_s)


def _fresh(job: Job, *, submit_s: float | None = None, run_s: float | None = None) -> Job:
    return Job(
        job.job_id,
        job.submit_s if submit_s is None else submit_s,
        job.run_s if run_s is None else run_s,
        job.limit_s,
        job.num_nodes,
        job.gpus_per_node,
        partition=job.partition,
        qos=job.qos,
        user=job.user,
        nice=job.nice,
    )


def _one_pass(
    real: list[Job],
    log: ControllerLog,
    logged: LoggedPass,
    options: ClusterOptions,
    num_nodes: int,
    gpus: int,
    clock_s: int,
) -> PassCheck:
    names = node_names(num_nodes)
    index = {name: position for position, name in enumerate(names)}
    at = logged.at_s
    policy = options.policy()
    sim = Simulation([], options.spec(num_nodes, gpus), policy)
    waiting = []
    for job in real:
        started = log.started_s.get(job.job_id)
        if started is not None and started < at:
            if log.completed_s.get(job.job_id, at) < at:
                released = log.released_s.get(job.job_id, at)
                if released > at:  # ended, but its nodes are still COMPLETING
                    for name in job.node_names:
                        policy.completing_until[index[name]] = released
                continue
            copy = _fresh(job)
            nodes = tuple(index[name] for name in job.node_names)
            sim.nodes.take_nodes(nodes, copy.gpus_per_node)
            sim.now = job.start_s or started  # sacct's start: Slurm's whole-second start time
            sim.pending_count += 1  # start() counts the job out of the queue
            sim.pending_per_gpus[copy.gpus_per_node] += 1
            sim.start(copy, nodes)
        elif job.submit_s <= at:  # sacct's eligible second; the pass's clock decides (_eligible)
            waiting.append(_fresh(job))
    sim.now = at
    for job in waiting:
        sim.enqueue(job)
    policy.run_pass(_controller_pass(logged, {job.job_id: job for job in real}, clock_s), at)
    started_now = {j.job_id: tuple(names[n] for n in j.nodes) for j in waiting if j.start_s is not None}
    planned = {
        p.job_id: (float(p.start_s), float(p.end_s), tuple(names[n] for n in p.nodes))
        for p in (policy.planned if logged.kind == "backfill" else [])
    }
    return PassCheck(at, logged.kind, clock_s, logged.started, started_now, logged.planned, planned)


def check_passes(
    real: list[Job], log: ControllerLog, options: ClusterOptions, num_nodes: int, gpus_per_node: int
) -> list[PassCheck]:
    """One :class:`PassCheck` per logged pass, in the log's order (``real``: the jobs as sacct
    recorded them, with Slurm's job ids, eligible times as ``submit_s`` and their ``nice``), at the
    first of :func:`controller_seconds` that agrees (the log's second when none does)."""
    checks = []
    for logged in log.passes:
        tried = []
        for clock_s in controller_seconds(logged.at_s):
            tried.append(_one_pass(real, log, logged, options, num_nodes, gpus_per_node, clock_s))
            if tried[-1].agrees:
                break
        checks.append(tried[-1] if tried[-1].agrees else tried[0])
    return checks


def _found_jobs(check: PassCheck) -> bool:
    """Whether the pass found jobs waiting (the passes an :class:`Agreement` counts)."""
    return bool(
        check.real_started or check.real_planned or check.simulated_started or check.simulated_planned
    )


def replay_on_controller_clock(
    real: list[Job],
    log: ControllerLog,
    options: ClusterOptions,
    num_nodes: int,
    gpus_per_node: int,
    clock_s: Sequence[int] | None = None,
) -> list[StartCheck]:
    """Simulate ``real`` from submission to end on the logged passes' instants; one
    :class:`StartCheck` per job. Each job runs from its pass to its logged completion; the n-th pass
    reads the whole second ``clock_s[n]`` (:func:`check_passes` finds them), else its log stamp's."""
    seconds = clock_s or [controller_seconds(p.at_s)[0] for p in log.passes]
    names = node_names(num_nodes)
    jobs = []
    for job in real:
        origin = log.started_in(job.job_id)
        done = log.completed_s.get(job.job_id)
        if origin is None or done is None:
            raise ValueError(f"job {job.job_id} did not start and end within the log")
        jobs.append(_fresh(job, run_s=done - origin.at_s))
    by_id = {job.job_id: job for job in real}
    controller = LogController(
        [_controller_pass(p, by_id, second) for p, second in zip(log.passes, seconds, strict=True)],
        log.released_s,
    )
    policy: SlurmPolicy = options.policy(controller)
    result = simulate(jobs, options.spec(num_nodes, gpus_per_node), policy)
    checks = []
    for job in sorted(result.jobs, key=lambda j: j.job_id):
        origin = log.started_in(job.job_id)
        assert origin is not None
        checks.append(
            StartCheck(
                job.job_id,
                origin.at_s,
                job.start_s,
                origin.started[job.job_id],
                tuple(names[n] for n in job.nodes),
            )
        )
    return checks


class _TraceJob(Strict):
    id: int
    slurm_id: int
    submit_s: float = Field(ge=0)
    run_s: float = Field(gt=0)
    limit_s: float = Field(gt=0)
    nodes: PositiveInt
    gpus_per_node: PositiveInt
    partition: str
    qos: str
    nice: int


class _Cluster(Strict):
    nodes: PositiveInt
    gpus_per_node: PositiveInt


class _Trace(Strict):
    cluster: _Cluster
    start_epoch_s: float
    jobs: list[_TraceJob] = Field(min_length=1)


@dataclass
class Replay:
    """A replay directory (:mod:`~mfukit.sched.slurm.replay`), read back."""

    real: list[Job]  # as sacct recorded them: Slurm job ids, eligible times as submit_s, nice from the trace
    log: ControllerLog
    num_nodes: int
    gpus_per_node: int


def load_replay(directory: Path) -> Replay:
    path = directory / TRACE_FILE
    try:
        data: Any = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise InputError(f"cannot read the replay's trace: {error}", source=str(path)) from None
    trace = validate_as(_Trace, data, source=str(path))
    nice = {job.slurm_id: job.nice for job in trace.jobs}
    gpus = trace.cluster.nodes * trace.cluster.gpus_per_node
    read = read_trace(directory / "sacct.txt", gpus_per_node=trace.cluster.gpus_per_node, cluster_gpus=gpus)
    real = [job for job in read.jobs if job.job_id in nice]
    if len(real) != len(nice):
        raise InputError(
            f"sacct lists {len(real)} of the trace's {len(nice)} jobs", source=str(directory / "sacct.txt")
        )
    for job in real:
        job.nice = nice[job.job_id]  # sacct does not record nice
    log = read_controller_log(directory / "slurmctld.log")
    return Replay(real, log, trace.cluster.nodes, trace.cluster.gpus_per_node)


@dataclass(frozen=True)
class Agreement:
    passes: list[PassCheck]
    starts: list[StartCheck]

    @property
    def passes_agreeing(self) -> int:
        return sum(check.agrees for check in self.passes)

    @property
    def starts_agreeing(self) -> int:
        return sum(check.agrees for check in self.starts)

    @property
    def order_matches(self) -> bool:
        """Whether the simulator started the jobs in Slurm's order (ties: same instant)."""
        real = sorted(self.starts, key=lambda c: (c.real_s, c.job_id))
        simulated = sorted(self.starts, key=lambda c: (c.simulated_s is None, c.simulated_s or 0.0, c.job_id))
        return [c.job_id for c in real] == [c.job_id for c in simulated]

    @property
    def max_start_difference_s(self) -> float | None:
        """The largest |simulated - real| start; None when a job never started in the simulator."""
        if any(c.simulated_s is None for c in self.starts):
            return None
        return max((abs((c.simulated_s or 0.0) - c.real_s) for c in self.starts), default=0.0)

    @property
    def agrees(self) -> bool:
        return self.passes_agreeing == len(self.passes) and self.starts_agreeing == len(self.starts)


def check_replay(replay: Replay, options: ClusterOptions) -> Agreement:
    args = (replay.real, replay.log, options, replay.num_nodes, replay.gpus_per_node)
    every = check_passes(*args)
    starts = replay_on_controller_clock(*args, [c.clock_s for c in every])
    return Agreement([c for c in every if _found_jobs(c)], starts)


def _plan_text(plan: tuple[float, float, tuple[str, ...]] | None) -> str:
    return "none" if plan is None else f"{plan[0]:.0f}-{plan[1]:.0f} on {','.join(plan[2])}"


def _pass_difference(check: PassCheck) -> str:
    plans = [
        f"job {job_id} Slurm {_plan_text(check.real_planned.get(job_id))}, "
        f"simulator {_plan_text(check.simulated_planned.get(job_id))}"
        for job_id in sorted(set(check.real_planned) | set(check.simulated_planned))
        if check.real_planned.get(job_id) != check.simulated_planned.get(job_id)
    ]
    return (
        f"pass at {check.at_s:.3f} ({check.kind}, clock {check.clock_s}): Slurm started "
        f"{check.real_started}, the simulator {check.simulated_started}"
        + (f"; plans differ: {'; '.join(plans)}" if plans else "")
    )


def _start_difference(check: StartCheck) -> str:
    return (
        f"job {check.job_id}: Slurm started it at {check.real_s:.3f} on {','.join(check.real_nodes)}, "
        f"the simulator at {check.simulated_s} on {','.join(check.simulated_nodes)}"
    )


def differences(agreement: Agreement, *, most: int = 5) -> list[str]:
    """The first ``most`` passes and starts that disagree, one line each."""
    wrong = [_pass_difference(c) for c in agreement.passes if not c.agrees]
    late = [_start_difference(c) for c in agreement.starts if not c.agrees]
    return wrong[:most] + late[:most]
