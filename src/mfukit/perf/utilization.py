"""MFU and HFU of a running job from what its log shows: tokens/s (total or per GPU) or step time + batch.

MFU = model FLOPs per token x tokens/s per GPU / peak; HFU counts the recompute the GPU executes too
(Chowdhery et al. 2022, App. B). FLOPs per token and both attention conventions come from
:mod:`mfukit.perf.flops`; every result names the convention it used and also gives the other one.
"""

from __future__ import annotations

from dataclasses import dataclass

from mfukit.core.model import ModelSpec
from mfukit.errors import InputError
from mfukit.perf.flops import (
    ATTENTION_CONVENTION_NAMES,
    AttentionConvention,
    RecomputeMode,
    hardware_flops_per_token,
    model_flops_per_token,
    utilization,
)


@dataclass(frozen=True)
class Utilization:
    convention: AttentionConvention
    recompute: RecomputeMode
    tokens_per_s_per_gpu: float
    peak_flops_per_s: float
    model_flops_per_token: float
    hardware_flops_per_token: float
    mfu: float
    hfu: float
    mfu_by_convention: dict[str, float]

    @property
    def model_flops_per_s_per_gpu(self) -> float:
        return self.model_flops_per_token * self.tokens_per_s_per_gpu

    @property
    def hardware_flops_per_s_per_gpu(self) -> float:
        return self.hardware_flops_per_token * self.tokens_per_s_per_gpu

    @property
    def convention_name(self) -> str:
        return ATTENTION_CONVENTION_NAMES[self.convention]


def tokens_per_s_per_gpu(
    *,
    tokens_per_s: float | None = None,
    per_gpu: float | None = None,
    step_s: float | None = None,
    batch_tokens: float | None = None,
    num_gpus: int | None = None,
) -> float:
    """Per-GPU throughput from exactly one of: tokens/s per GPU, total tokens/s (needs the GPU count), or
    step time with the global batch in tokens (needs the GPU count)."""
    given = [
        name
        for name, value in (
            ("--tokens-per-s", tokens_per_s),
            ("--tokens-per-s-per-gpu", per_gpu),
            ("--step-time", step_s),
        )
        if value is not None
    ]
    if len(given) != 1:
        raise InputError(
            "give exactly one measured rate" if given else "needs a measured rate",
            source="command line",
            field=", ".join(given) or "--tokens-per-s-per-gpu",
            hint="pass --tokens-per-s-per-gpu, --tokens-per-s with cluster.num_gpus, or ft.step_time with cluster.num_gpus and the batch",
        )
    if per_gpu is not None:
        return _positive(per_gpu, "--tokens-per-s-per-gpu")
    if num_gpus is None:
        raise InputError(
            "needs the GPU count to turn a total rate into a per-GPU one",
            source="command line",
            field="--gpus",
            hint="give cluster.num_gpus (or cluster.num_nodes with cluster.system)",
        )
    if tokens_per_s is not None:
        return _positive(tokens_per_s, "--tokens-per-s") / num_gpus
    if batch_tokens is None:
        raise InputError(
            "a step time needs the global batch",
            source="command line",
            field="--global-batch-tokens",
            hint='give training.global_batch_tokens ("4M") or training.global_batch_size with training.seq_len',
        )
    return batch_tokens / _positive(step_s or 0.0, "--step-time") / num_gpus


def _positive(value: float, flag: str) -> float:
    if value <= 0:
        raise InputError("must be positive", source="command line", field=flag, value=value)
    return value


def measure(
    model: ModelSpec,
    *,
    seq_len: int,
    tokens_per_s_per_gpu: float,
    peak_flops_per_s: float,
    recompute: RecomputeMode,
    convention: AttentionConvention,
    recomputed_share: float = 1.0,
) -> Utilization:
    """MFU, HFU and model/hardware FLOP/s per GPU of a run of ``model`` at ``tokens_per_s_per_gpu``; full
    recompute covers ``recomputed_share`` of the layers."""
    model_flops = model_flops_per_token(model, seq_len, convention)
    hardware = hardware_flops_per_token(model, seq_len, recompute, convention, recomputed_share)
    by_convention: dict[str, float] = {
        name: utilization(model_flops_per_token(model, seq_len, name), tokens_per_s_per_gpu, peak_flops_per_s)
        for name in ATTENTION_CONVENTION_NAMES
    }
    return Utilization(
        convention=convention,
        recompute=recompute,
        tokens_per_s_per_gpu=tokens_per_s_per_gpu,
        peak_flops_per_s=peak_flops_per_s,
        model_flops_per_token=model_flops,
        hardware_flops_per_token=hardware,
        mfu=utilization(model_flops, tokens_per_s_per_gpu, peak_flops_per_s),
        hfu=utilization(hardware, tokens_per_s_per_gpu, peak_flops_per_s),
        mfu_by_convention=by_convention,
    )
