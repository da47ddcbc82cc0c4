"""The failure-free step time the fault-tolerance model runs on.

In order of precedence: the step time as given (``--step-time``); one derived from an MFU as given
(``--mfu``: step = tokens x FLOPs/token / (GPUs x peak x MFU)); the performance model's step time for the
scenario's layout, or for the best layout the planner finds on the cluster (:mod:`mfukit.perf.estimate`);
and, when the performance model cannot run (no global batch, no layout that fits), the accelerator's
typical MFU, said in ``how``.
"""

from __future__ import annotations

from dataclasses import dataclass

from mfukit import units
from mfukit.core.cluster import Cluster
from mfukit.core.model import ModelSpec
from mfukit.core.parallelism import Parallelism
from mfukit.core.scenario import FtSection, TrainingSection
from mfukit.errors import InputError
from mfukit.perf import flops
from mfukit.perf.estimate import training_plan


@dataclass(frozen=True)
class Throughput:
    step_time_s: float | None
    tokens_per_step: float | None
    tokens_per_s: float | None
    how: str


def throughput(
    model: ModelSpec,
    training: TrainingSection,
    cluster: Cluster,
    ft: FtSection,
    *,
    source: str,
    parallelism: Parallelism | None = None,
    step_time_s: float | None = None,
) -> Throughput:
    """``step_time_s``: the step time as given (``ft.step_time``, or a search's candidate)."""
    sequences = training.global_batch_sequences
    steps_tokens = training.tokens_per_step
    tokens_per_step = float(steps_tokens) if steps_tokens is not None else None
    if step_time_s is not None:
        if step_time_s <= 0:
            raise InputError("must be positive", source=source, field="ft.step_time", value=step_time_s)
        rate = tokens_per_step / step_time_s if tokens_per_step else None
        return Throughput(step_time_s, tokens_per_step, rate, f"step time {step_time_s:g} s as given")
    fallback = ""
    if ft.mfu is None and sequences is not None:
        plan, chosen = training_plan(
            model, training, cluster.system, cluster.accelerator, cluster.num_gpus, parallelism
        )
        if plan is not None:
            return Throughput(
                plan.step_time_s,
                float(plan.global_batch_sequences * training.seq_len),  # the batch the layout runs
                plan.tokens_per_s,
                f"step time {plan.step_time_s:.2f} s from the performance model ({chosen}: TP {plan.layout.tp} x "
                f"PP {plan.layout.pp} x DP {plan.layout.dp}, MFU {plan.mfu:.1%})",
            )
        fallback = f"; the performance model has no step time ({chosen})"
    elif ft.mfu is None:
        fallback = "; the performance model needs the global batch (training.global_batch_tokens)"
    return _from_mfu(model, training, cluster, ft, tokens_per_step, source=source, fallback=fallback)


def _from_mfu(
    model: ModelSpec,
    training: TrainingSection,
    cluster: Cluster,
    ft: FtSection,
    tokens_per_step: float | None,
    *,
    source: str,
    fallback: str,
) -> Throughput:
    if ft.mfu is not None:
        mfu, mfu_from = ft.mfu, "as given"
    elif cluster.accelerator.typical_mfu is not None:
        typical = cluster.accelerator.typical_mfu
        mfu, mfu_from = typical.value, f"typical for {cluster.accelerator.name}: {typical.what}{fallback}"
    else:
        raise InputError(
            f"{cluster.accelerator.name} has no typical MFU in the catalog{fallback}",
            source=source,
            field="ft.mfu",
            hint="give ft.mfu, e.g. 0.4, or ft.step_time, e.g. 6s",
        )
    if mfu <= 0:
        raise InputError("must be positive to derive a step time", source=source, field="ft.mfu", value=mfu)
    per_token = flops.model_flops_per_token(model, training.seq_len, training.attention_flops)
    rate = cluster.num_gpus * cluster.accelerator.peak_flops(training.precision) * mfu / per_token
    step = tokens_per_step / rate if tokens_per_step else None
    how = (
        f"{'step time' if step else 'throughput'} from {units.format_flops(per_token)}/token "
        f"({flops.ATTENTION_CONVENTION_NAMES[training.attention_flops]}), "
        f"{cluster.num_gpus} x {cluster.accelerator.name} {training.precision} peak and MFU {mfu:.2f} ({mfu_from})"
    )
    return Throughput(step, tokens_per_step, rate, how)
