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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from mfukit.core.cluster import Cluster
from mfukit.core.model import ModelSpec
from mfukit.core.parallelism import Parallelism
from mfukit.core.scenario import TrainingSection
from mfukit.diagnose.breakdown import median
from mfukit.diagnose.records import StepRecord, TrainingLog
from mfukit.errors import InputError
from mfukit.perf.estimate import training_plan
from mfukit.perf.flops import model_flops_per_token, utilization
from mfukit.perf.memory import sharding_of

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
    basis: Literal["performance_model", "typical_mfu"] | None = None
    step_time_s: float | None = None
    """the performance model's step time (its basis only)"""
    warning: str | None = None
    """why the performance model could not say (the typical MFU stands in)"""


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
            ("the parallel layout (--tp/--pp/--dp or [parallelism])", layout),
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
    chosen = plan.layout
    text = (
        f"performance model (`mfukit estimate`) for TP {chosen.tp} x PP {chosen.pp} x DP {chosen.dp} "
        f"(recompute {chosen.recompute}, sharding {sharding_of(chosen)}) on {cluster.num_gpus} x "
        f"{cluster.accelerator.name}, micro-batch {plan.micro_batch_size}: step {plan.step_time_s:.3g} s"
    )
    return Expected(plan.mfu, text, "performance_model", plan.step_time_s), ""


def _steady(steps: list[StepRecord]) -> list[StepRecord]:
    skip = int(len(steps) * WARMUP_FRACTION) if len(steps) >= 10 else 0
    return steps[skip:]


def _tokens_per_step(log: TrainingLog, training: TrainingSection | None) -> float | None:
    if training is None:
        return None
    sequences = log.global_batch_size or training.global_batch_sequences
    if sequences is None:
        return None
    return float(sequences * training.seq_len)


def measure(
    logs: list[TrainingLog],
    model: ModelSpec | None,
    training: TrainingSection | None,
    cluster: Cluster | None,
) -> MfuEstimate:
    """MFU from the first log that allows it (see the module docstring for the order of methods)."""
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
    per_gpu = [s.tokens_per_s_per_gpu for s in steps if s.tokens_per_s_per_gpu is not None]
    if per_gpu:
        mean = sum(per_gpu) / len(per_gpu)
        return MfuEstimate(
            utilization(flops_per_token, mean, peak),
            utilization(flops_per_token, median(per_gpu), peak),
            "tokens/s per GPU from the log x model FLOPs per token / peak",
            log.file,
            tokens_per_s_per_gpu=mean,
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
