"""MFU from the job's own logs, and the MFU to expect.

Measured MFU = model FLOPs per token x tokens/s per GPU / dense peak (``perf.flops``), with tokens/s
taken over the whole logged window — wall-clock stamps when the log has them, so checkpoint saves and
other stalls count (the MFU the job delivers). The steady-state MFU (median step) is reported beside.
Without a model, the MFU the log itself reports (torchtitan ``mfu:``, Megatron TFLOP/s/GPU, ``mfu`` in
mfukit train's metrics.jsonl) is used and its source said.

The expected MFU (:func:`expected_mfu`) is what the performance model (``perf.estimate``, the engine of
``mfukit estimate``) predicts for the job's own layout on its cluster, when the model, batch, layout and
cluster are known; otherwise the accelerator's sourced ``typical_mfu``, with a warning that says what was
missing. Which of the two it is travels with it (``Expected.basis``).

A layout whose memory (``perf.memory``, the same total ``mfukit estimate`` prints) exceeds the GPU's HBM
cannot be what ran: the scenario misdescribes the job (a missing ``zero``/``fsdp``/``recompute``, a larger
micro-batch than the job's). Its MFU is not a target anyone can reach, so the expected MFU is then the
performance model's best layout that fits on the same GPUs at the same global batch (``mfukit plan``'s
search), its basis ``best_fitting_layout``, and ``Expected.layout_problem`` says why (the diagnosis turns it
into a degraded-input warning).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from mfukit import units
from mfukit.core.cluster import Cluster
from mfukit.core.model import ModelSpec
from mfukit.core.parallelism import Parallelism
from mfukit.core.scenario import TrainingSection
from mfukit.diagnose.breakdown import median
from mfukit.diagnose.records import StepRecord, TrainingLog
from mfukit.errors import InputError
from mfukit.perf.estimate import best_plan, training_plan
from mfukit.perf.flops import model_flops_per_token, utilization
from mfukit.perf.inputs import training_workload
from mfukit.perf.memory import headroom_bytes
from mfukit.perf.model_states import sharding_of
from mfukit.perf.planner import Plan

WARMUP_FRACTION = 0.1  # the first 10 % of logged steps (compile, allocator warm-up) are left out


@dataclass(frozen=True)
class MfuEstimate:
    measured: float | None
    steady_state: float | None
    method: str
    source: str
    tokens_per_s_per_gpu: float | None = None
    step_time_s: float | None = None
    effective_step_time_s: float | None = None


@dataclass(frozen=True)
class Expected:
    value: float | None
    source: str
    basis: Literal["performance_model", "best_fitting_layout", "typical_mfu"] | None = None
    step_time_s: float | None = None
    """the performance model's step time (its basis only)"""
    warning: str | None = None
    """why the performance model could not say (the typical MFU stands in)"""
    layout_problem: str | None = None
    """why the job's own layout was not the basis (it does not fit in memory)"""
    breakdown_s: dict[str, float] | None = None
    """the performance model's step, part by part (``Plan.breakdown_s``), to price a cause against"""
    interval: tuple[float, float] | None = None
    """the performance model's MFU interval, when the estimate carries one (``mfu_interval``)"""


def expected_mfu(
    model: ModelSpec | None,
    training: TrainingSection | None,
    layout: Parallelism | None,
    cluster: Cluster | None,
) -> Expected:
    """The MFU this job should reach: the performance model's for its layout, else the typical MFU."""
    if model and training and training.global_batch_sequences and layout and cluster:
        predicted, why = _predicted(model, training, layout, cluster)
        if predicted is not None:
            return predicted
    else:
        needs = (
            ("the model", model),
            ("the global batch", training and training.global_batch_sequences),
            ("the parallel layout (--tp/--pp/--dp or a scenario's parallelism table)", layout),
            ("the cluster", cluster),
        )
        why = "no " + ", no ".join(what for what, have in needs if not have)
    if cluster is None or cluster.accelerator.typical_mfu is None:
        return Expected(None, "no accelerator given (--gpu or a scenario), or it has no typical MFU")
    typical = cluster.accelerator.typical_mfu
    return Expected(
        typical.value,
        f"{cluster.accelerator.name} typical MFU: {typical.what} ({typical.url})",
        "typical_mfu",
        warning=f"expected MFU is {cluster.accelerator.name}'s typical MFU, not the performance model's: {why}",
    )


def _predicted(
    model: ModelSpec, training: TrainingSection, layout: Parallelism, cluster: Cluster
) -> tuple[Expected | None, str]:
    try:
        plan, how = training_plan(
            model, training, cluster.system, cluster.accelerator, cluster.num_gpus, layout
        )
    except InputError as error:
        return None, f"the performance model cannot run it ({error.message})"
    if plan is None:
        return None, how
    hbm_bytes = cluster.accelerator.hbm_bytes
    if plan.memory_bytes <= hbm_bytes:
        return Expected(
            plan.mfu,
            _describe(plan, cluster),
            "performance_model",
            plan.step_time_s,
            breakdown_s=dict(plan.breakdown_s),
            interval=plan.mfu_interval,
        ), ""
    problem = (
        f"the job's layout as described ({_layout_text(plan)}) needs "
        f"{units.format_bytes(plan.memory_bytes)} per GPU, more than the {units.format_bytes(hbm_bytes)} of "
        f"{cluster.accelerator.name}: it cannot be what ran (check the scenario's parallelism zero/fsdp/recompute and the "
        "micro-batch against the job's launch flags)"
    )
    sequences = training.global_batch_sequences or 0  # known: expected_mfu asks for it
    # the planner's best on the same GPUs and batch, with the HBM headroom `plan` keeps free
    best, _ = best_plan(
        training_workload(model, training, sequences),
        cluster.system,
        cluster.accelerator,
        cluster.num_gpus,
        headroom_bytes=headroom_bytes(None, hbm_bytes),
    )
    if best is None:
        return None, f"{problem}; and no layout fits on {cluster.num_gpus:,} GPUs"
    return Expected(
        best.mfu,
        f"best layout that fits: {_describe(best, cluster)}",
        "best_fitting_layout",
        best.step_time_s,
        breakdown_s=dict(best.breakdown_s),
        interval=best.mfu_interval,
        layout_problem=f"{problem}; expected MFU {units.format_percent(best.mfu)} from the best layout that "
        f"fits ({_layout_text(best)}), not {units.format_percent(plan.mfu)} from the one that does not",
    ), ""


def _layout_text(plan: Plan) -> str:
    chosen = plan.layout
    return (
        f"TP {chosen.tp} x PP {chosen.pp} x DP {chosen.dp}, recompute {chosen.recompute}, sharding "
        f"{sharding_of(chosen)}, micro-batch {plan.micro_batch_size}"
    )


def _describe(plan: Plan, cluster: Cluster) -> str:
    return (
        f"performance model (`mfukit estimate`) for {_layout_text(plan)} on {cluster.num_gpus} x "
        f"{cluster.accelerator.name}: step {plan.step_time_s:.3g} s"
    )


def _steady(steps: list[StepRecord]) -> list[StepRecord]:
    skip = int(len(steps) * WARMUP_FRACTION) if len(steps) >= 10 else 0
    return steps[skip:]


def _tokens_per_step(log: TrainingLog, training: TrainingSection | None) -> float | None:
    if training is None:
        return None
    if log.global_batch_size:  # the batch the job logged comes before the scenario's
        return float(log.global_batch_size * training.seq_len)
    tokens = training.tokens_per_step
    return float(tokens) if tokens is not None else None


def measure(
    logs: list[TrainingLog],
    model: ModelSpec | None,
    training: TrainingSection | None,
    cluster: Cluster | None,
) -> MfuEstimate:
    """MFU from the first log that allows it (see the module docstring for the order of methods); an MFU
    outside 0-100 % is no measurement (the log, the model or the GPU count is wrong) and is not returned."""
    estimate = _measure(logs, model, training, cluster)
    values = [v for v in (estimate.measured, estimate.steady_state) if v is not None]
    if all(0.0 < v <= 1.0 for v in values):
        return estimate
    shown = ", ".join(f"{v:.1%}" for v in values)
    return MfuEstimate(
        None,
        None,
        f"not computed: {estimate.method} gives an MFU of {shown}, outside 0-100 %; check the model, the "
        "global batch and the GPU count against the job",
        estimate.source,
    )


def _measure(
    logs: list[TrainingLog],
    model: ModelSpec | None,
    training: TrainingSection | None,
    cluster: Cluster | None,
) -> MfuEstimate:
    reasons: list[str] = []
    for log in logs:
        steps = _steady([s for s in log.steps if s.rank in (None, 0)])
        if not steps:
            continue
        estimate = _from_throughput(log, steps, model, training, cluster)
        if estimate is not None:
            return estimate
        reported = [s.mfu for s in steps if s.mfu is not None]
        if reported:
            value = sum(reported) / len(reported)
            return MfuEstimate(value, median(reported), "reported by the log", log.file)
        tflops = [s.tflops_per_gpu for s in steps if s.tflops_per_gpu is not None]
        if tflops and cluster is not None and training is not None:
            peak = cluster.accelerator.peak_flops(training.precision)
            value = median(tflops) * 1e12 / peak
            return MfuEstimate(value, value, "log TFLOP/s per GPU / dense peak", log.file)
        reasons.append(f"{log.file}: no throughput the model can turn into FLOPs")
    if model is None or cluster is None:
        method = "not computed: give --model with --gpu and --gpus (or a scenario) and a training log"
    else:
        method = "not computed: no training log with step times or tokens/s" + (
            f" ({'; '.join(reasons)})" if reasons else ""
        )
    return MfuEstimate(None, None, method, "")


def _from_throughput(
    log: TrainingLog,
    steps: list[StepRecord],
    model: ModelSpec | None,
    training: TrainingSection | None,
    cluster: Cluster | None,
) -> MfuEstimate | None:
    if model is None or cluster is None or training is None:
        return None
    flops_per_token = model_flops_per_token(model, training.seq_len, training.attention_flops)
    peak = cluster.accelerator.peak_flops(training.precision)
    rated = [s for s in steps if s.tokens_per_s_per_gpu]
    per_gpu = [s.tokens_per_s_per_gpu for s in rated if s.tokens_per_s_per_gpu is not None]
    if per_gpu:
        # each step holds the same tokens: the rate over the window is the steps' harmonic mean weighted
        # by the steps each line covers (a line after a checkpoint save covers the save's wall time too)
        covered = sum(max(1, s.interval_steps) for s in rated)
        mean = covered / sum(max(1, s.interval_steps) / (s.tokens_per_s_per_gpu or 1.0) for s in rated)
        return MfuEstimate(
            utilization(flops_per_token, mean, peak),
            utilization(flops_per_token, median(per_gpu), peak),
            "tokens/s per GPU from the log (over the logged window) x model FLOPs per token / peak",
            log.file,
            tokens_per_s_per_gpu=mean,
            step_time_s=median(steps_s)
            if (steps_s := [s.step_time_s for s in rated if s.step_time_s])
            else None,
        )
    job = [s.tokens_per_s for s in steps if s.tokens_per_s is not None]
    if job:
        mean = sum(job) / len(job) / cluster.num_gpus
        return MfuEstimate(
            utilization(flops_per_token, mean, peak),
            utilization(flops_per_token, median(job) / cluster.num_gpus, peak),
            "job tokens/s from the log / GPUs x model FLOPs per token / peak",
            log.file,
            tokens_per_s_per_gpu=mean,
        )
    samples = [s.samples_per_s for s in steps if s.samples_per_s is not None]
    if samples:
        mean = sum(samples) / len(samples) * training.seq_len / cluster.num_gpus
        value = utilization(flops_per_token, mean, peak)
        sequences = log.global_batch_size or training.global_batch_sequences
        return MfuEstimate(
            value,
            utilization(flops_per_token, median(samples) * training.seq_len / cluster.num_gpus, peak),
            f"job samples/s from the log x seq len {training.seq_len:,} (each sample a full "
            "sequence) / GPUs x model FLOPs per token / peak",
            log.file,
            tokens_per_s_per_gpu=mean,
            step_time_s=sequences / median(samples) if sequences else None,
        )
    tokens = _tokens_per_step(log, training)
    timed = [s for s in steps if s.step_time_s is not None]
    if tokens is None or not timed:
        return None
    steady_step = median([s.step_time_s for s in timed if s.step_time_s is not None])
    effective = _effective_step_time(timed)
    per_gpu_effective = tokens / effective / cluster.num_gpus
    per_gpu_steady = tokens / steady_step / cluster.num_gpus
    return MfuEstimate(
        utilization(flops_per_token, per_gpu_effective, peak),
        utilization(flops_per_token, per_gpu_steady, peak),
        "global batch tokens / step time (wall clock where stamped) x model FLOPs per token / peak",
        log.file,
        tokens_per_s_per_gpu=per_gpu_effective,
        step_time_s=steady_step,
        effective_step_time_s=effective,
    )


def _effective_step_time(steps: list[StepRecord]) -> float:
    """Wall time per step over the window (stalls included) when stamped, else the mean step time."""
    stamped = [s for s in steps if s.wall_s is not None]
    if len(stamped) >= 2:
        first, last = stamped[0], stamped[-1]
        covered = sum(s.interval_steps for s in stamped[1:])
        if (
            covered > 0
            and last.wall_s is not None
            and first.wall_s is not None
            and last.wall_s > first.wall_s
        ):
            return (last.wall_s - first.wall_s) / covered
    total = sum((s.step_time_s or 0.0) * s.interval_steps for s in steps)
    return total / sum(s.interval_steps for s in steps)
