"""The analytic fault-tolerance plan: MTBF, optimum intervals, expected ETTR and a policy comparison."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mfukit.catalog.resolved import ResolvedScenario
from mfukit.errors import InputError
from mfukit.ft import checkpoint_io as ckio
from mfukit.ft.interval import Expected, daly_interval_s, expected_run, kokolis_ettr, young_interval_s
from mfukit.ft.restart import no_spare_probability, spares_for
from mfukit.ft.setup import FtInputs, ft_inputs
from mfukit.perf.planner import Plan

COMPARED_INTERVALS_S = (1800.0, 3600.0)
"""Fixed intervals every comparison shows beside the optimum: the half-hourly and hourly saves common
in practice (Kokolis et al. 2025: 'hourly checkpointing is typical for large jobs')."""
SPARE_WAIT_TARGET = 0.01
"""Hot spares are recommended so that at most 1 % of replacements wait for a node."""
STORAGE_DUTY_LIMIT = 0.5
"""Largest share of the time the job's checkpoint writes should keep the storage busy. Daly's optimum only
prices the save's cost to this job; the storage tier is shared with the data loader and other jobs, and
checkpoint traffic is meant to be a burst (Llama 3 §3.3.4: writes "saturate the storage fabric for short
durations"; BLOOM-176B saved 2.3 TB every 3 h, about 0.4 % of a 58 GB/s tier). An async save that persists
for most of its interval also leaves no slack: one slow write stalls the next save. Half the time is a
conservative ceiling that still leaves the tier idle as often as busy."""


@dataclass(frozen=True)
class StorageLoad:
    """How busy the checkpoint writes keep the storage tier at the interval used."""

    write_bytes_per_s: float
    """the rate a save is written at (the tier's aggregate, or the job's NICs when they are slower)"""
    duty: float
    """share of wall clock the tier spends writing this job's checkpoints (write time / segment)"""
    duty_limit: float
    interval_at_limit_s: float
    """the shortest interval (whole steps) that keeps the duty within ``duty_limit``"""
    ettr_at_limit: float

    @property
    def too_busy(self) -> bool:
        return self.duty > self.duty_limit


def storage_load(inputs: FtInputs, duty_limit: float = STORAGE_DUTY_LIMIT) -> StorageLoad:
    """The storage duty cycle of the checkpoint writes: one checkpoint of S bytes written at rate B every
    interval + blocking, S / B / (interval + blocking), and the interval that brings it to ``duty_limit``."""
    ckpt = inputs.checkpoint
    run = inputs.run
    write_s = ckpt.checkpoint_bytes / ckpt.write_bytes_per_s
    at_limit = max(write_s / duty_limit - run.blocking_s, inputs.step_time_s or 0.0)
    step = inputs.step_time_s
    if step:
        at_limit = math.ceil(at_limit / step - 1e-9) * step
    policy = inputs.policy(inputs.mode, at_limit, inputs.scenario.ft.hot_spares)
    return StorageLoad(
        write_bytes_per_s=ckpt.write_bytes_per_s,
        duty=min(1.0, write_s / run.segment_s),
        duty_limit=duty_limit,
        interval_at_limit_s=at_limit,
        ettr_at_limit=expected_run(run.with_policy(policy)).ettr,
    )


@dataclass(frozen=True)
class PolicyOutcome:
    mode: ckio.Mode
    interval_s: float
    interval_steps: int | None
    hot_spares: int
    blocking_s: float
    expected: Expected
    recommended: bool


@dataclass
class FtPlan:
    inputs: FtInputs
    young_interval_s: float
    daly_interval_s: float
    expected: Expected
    """under the user's policy (the recommended interval when none is given)"""
    expected_at_optimum: Expected
    first_order_ettr: float
    recommended_hot_spares: int | None
    no_spare_probability: float
    policies: list[PolicyOutcome]
    storage: StorageLoad

    @property
    def expected_interruptions(self) -> float:
        return self.expected.interruptions_per_s * self.expected.wall_s

    def gpu_hours_lost_per_day(self) -> dict[str, float]:
        gpus = self.inputs.cluster.num_gpus
        return {cause: share * gpus * 24.0 for cause, share in self.expected.lost_fractions.items()}


def _outcome(inputs: FtInputs, mode: ckio.Mode, interval_s: float | None, spares: int) -> PolicyOutcome:
    policy = inputs.policy(mode, interval_s, spares)
    run = inputs.run.with_policy(policy)
    return PolicyOutcome(
        mode=mode,
        interval_s=policy.interval_s,
        interval_steps=inputs.steps(policy.interval_s),
        hot_spares=spares,
        blocking_s=policy.blocking_s,
        expected=expected_run(run),
        recommended=interval_s is None,
    )


def plan(inputs: FtInputs) -> FtPlan:
    run = inputs.run
    ft = inputs.scenario.ft
    mtbf = run.mtbf_s
    blocking = inputs.policy(inputs.mode, None, ft.hot_spares).blocking_s
    expected = expected_run(run)
    optimum = _outcome(inputs, inputs.mode, None, ft.hot_spares)
    failures = inputs.failures
    node_rate = failures.failure_rate_per_s / failures.num_nodes
    no_spare = no_spare_probability(run.restart, failures.replacement_rate_per_s, expected.wall_s)
    replaced = failures.replacement_rate_per_s / failures.failure_rate_per_s
    restart_s = run.restart.typical_restart_s(run.restart.replacement_s * replaced * no_spare)
    first_order = kokolis_ettr(failures.num_nodes, node_rate, restart_s, run.interval_s, run.blocking_s)
    recommended_spares = spares_for(run.restart, failures.replacement_rate_per_s, SPARE_WAIT_TARGET)
    modes: list[ckio.Mode] = ["sync", "async"] if inputs.mode != "single" else ["single", "sync", "async"]
    intervals: list[float | None] = [None, inputs.user_interval_s, *COMPARED_INTERVALS_S]
    unique_intervals = list(dict.fromkeys(intervals))
    spares = sorted({0, ft.hot_spares, recommended_spares or 0})
    policies = [
        _outcome(inputs, mode, interval, count)
        for mode in modes
        for interval in unique_intervals
        for count in spares
    ]
    return FtPlan(
        inputs=inputs,
        young_interval_s=young_interval_s(blocking, mtbf),
        daly_interval_s=daly_interval_s(blocking, mtbf),
        expected=expected,
        expected_at_optimum=optimum.expected,
        first_order_ettr=first_order,
        recommended_hot_spares=recommended_spares,
        no_spare_probability=no_spare,
        policies=policies,
        storage=storage_load(inputs),
    )


CURVE_MODES: tuple[ckio.Mode, ...] = ("sync", "async")
"""The policies an ETTR-vs-interval chart draws."""


def optimum_intervals_s(inputs: FtInputs) -> dict[ckio.Mode, float]:
    """Each charted policy's recommended interval (its optimum) at the scenario's hot spares."""
    spares = inputs.scenario.ft.hot_spares
    return {mode: inputs.policy(mode, None, spares).interval_s for mode in CURVE_MODES}


def interval_grid_s(inputs: FtInputs, points: int = 25) -> list[float]:
    """Intervals for an ETTR-vs-interval curve: log-spaced from a tenth of the shortest optimum (of the
    scenario's mode and every charted policy) to ten times the longest, so every policy's optimum is inside
    (and never below one step)."""
    centres = [inputs.recommended_interval_s, *optimum_intervals_s(inputs).values()]
    low = max(min(centres) / 10.0, inputs.step_time_s or 0.0, 1.0)
    high = max(max(centres) * 10.0, low * 2.0, (inputs.user_interval_s or 0.0) * 1.5)
    return [float(x) for x in np.geomspace(low, high, points)]


def ettr_curve(inputs: FtInputs, mode: ckio.Mode, intervals_s: list[float]) -> list[float]:
    spares = inputs.scenario.ft.hot_spares
    return [expected_run(inputs.run.with_policy(inputs.policy(mode, i, spares))).ettr for i in intervals_s]


def plan_for_layout(scene: ResolvedScenario, layout: Plan) -> tuple[FtPlan | None, str]:
    """The plan of ``scene`` run on the GPU count and layout of a performance-model plan (its step time from
    the model), or None and why there is none."""
    try:
        sized = ft_inputs(
            scene, num_gpus=layout.num_gpus, step_time_s=layout.step_time_s, parallelism=layout.layout
        )
        return plan(sized), ""
    except InputError as error:
        return None, f"No fault-tolerance plan: {error.render()}"
