"""Model states of mixed-precision Adam, per parameter on one GPU, under each sharding convention: the
working weights, the gradients the backward accumulates and reduces, and the optimizer's fp32 master copy and
moments. The memory model (:mod:`mfukit.perf.memory`), the step time's collectives and the traffic check read
the same accounting.

Megatron without sharding 2 (bf16 weights) + 4 (fp32 main grads) + 12 (fp32 master + Adam m, v) =
18 B/param; Megatron's distributed optimizer 6 + 12/DP (main grads 2 B where an FP8 recipe reduces in
16 bits, ``fp8_main_grads``: NeMo's); DeepSpeed ZeRO-1 4 + 16/DP, ZeRO-2 2 + 18/DP,
ZeRO-3 18/DP (16-bit grads plus an fp32 gradient partition, DeepSpeed PR #5099 accounting); FSDP2
16/DP (sharded fp32 parameters are the master copy), hybrid FSDP sharding inside a node only.
Dense parameters shard over DP x CP, expert parameters over the expert-data-parallel DP x CP / EP.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from mfukit.core.parallelism import Parallelism
from mfukit.core.scenario import Precision

FP32_BYTES = 4.0
ADAM_STATE_BYTES = 8.0  # Adam m and v in fp32 (Kingma & Ba 2015; every mixed-precision recipe)
# Adam's step per parameter: fp32 master, m and v read and written (24 B), the fp32 gradient read (4 B), the
# 16-bit weight written (2 B); on a GPU against HBM, on a CPU (ZeRO-Offload, Ren et al. 2021 §4.2) against DRAM
ADAM_STEP_BYTES_PER_PARAM = 6 * FP32_BYTES + FP32_BYTES + 2.0
# TE's cached FP8 weight: row-wise data for the forward GEMM and column-wise (transposed) data for dgrad,
# 1 B each (Hopper's FP8 GEMMs take only TN layouts; MXFP8 keeps both layouts too)
FP8_WEIGHT_COPY_BYTES = 2.0

# How a stack holds FP8 GEMM weights (Workload.fp8_weights; only read when the precision is fp8)
Fp8Weights = Literal["cached", "primary", "transient", "gathered"]
FP8_WEIGHTS_NAMES: dict[Fp8Weights, str] = {
    "cached": "16-bit weights plus Transformer Engine's cached FP8 copy and transpose (Megatron-Core default)",
    "primary": "FP8 primary weights (--fp8-param-gather, TE fp8_model_init: NeMo FP8 recipes)",
    "transient": "16-bit weights cast to FP8 per GEMM, no copy kept (torchao Float8Linear: torchtitan)",
    "gathered": "16-bit weight shards cast to FP8 before FSDP's all-gather (torchao "
    "enable_fsdp_float8_all_gather)",
}
# What training.fp8_all_gather turns each stack's way of holding FP8 weights into: Megatron's
# --fp8-param-gather makes them FP8 primary weights; torchao's enable_fsdp_float8_all_gather casts each rank's
# shard to FP8 (precompute_float8_dynamic_scale_for_fsdp: one amax pass over the shards) and all-gathers FP8
_WITH_FP8_GATHER: dict[Fp8Weights, Fp8Weights] = {"cached": "primary", "transient": "gathered"}


def fp8_weights_with_gather(stack: Fp8Weights, fp8_all_gather: bool | None) -> Fp8Weights:
    """How a run holds its FP8 weights: the stack's way (``fp8_all_gather`` None), with its weights
    all-gathered in FP8 (True), or in 16 bits (False)."""
    if fp8_all_gather is None:
        return stack
    if fp8_all_gather:
        return _WITH_FP8_GATHER.get(stack, stack)
    return next((plain for plain, gathered in _WITH_FP8_GATHER.items() if gathered == stack), stack)


# The dtype of Megatron's main gradients, the buffer its backward accumulates into and its data-parallel
# reduction moves (Workload.fp8_main_grads, read only with precision fp8): fp32 unless told otherwise (Megatron-LM
# sets --accumulate-allreduce-grads-in-fp32 for bf16; DistributedDataParallelConfig.grad_reduce_in_fp32 sizes
# the buffer), 16-bit where a stack's FP8 recipes turn it off (NeMo's scripts/performance FP8 runs:
# plugins.grad_reduce_in_fp32 = False)
MainGrads = Literal["fp32", "16-bit"]

Sharding = Literal[
    "none",
    "distributed-optimizer",
    "zero-1",
    "zero-2",
    "zero-3",
    "fsdp-full",
    "fsdp-hybrid",
]
PARAMETER_SHARDINGS: frozenset[Sharding] = frozenset({"zero-3", "fsdp-full", "fsdp-hybrid"})
# DeepSpeed ZeRO-2/3 with a CPU optimizer stream each reduced gradient partition to the host, where the CPU
# takes the norm and steps; ZeRO-1 and Megatron keep their gradients on the GPU
GRADIENTS_FOLLOW_CPU_STEP: frozenset[Sharding] = frozenset({"zero-2", "zero-3"})
# The data-parallel gradient reduction of every micro-batch, not of the last one only (the step time's DP window
# and the traffic check both read this): ZeRO-2 (DeepSpeed stage 2, FSDP SHARD_GRAD_OP) keeps full weights but
# reduce-scatters every micro-batch's gradients, as ZeRO-3 and FSDP do (DeepSpeed engine.allreduce_gradients:
# "ZeRO stage >= 2 communicates during non gradient accumulation boundaries as well"; FSDP outside no_sync);
# hybrid FSDP all-reduces each micro-batch's shards across the replicas after that reduce-scatter (FSDP1
# HYBRID_SHARD; FSDP2 unless set_requires_all_reduce(False))
REDUCED_EVERY_MICROBATCH: frozenset[Sharding] = frozenset({"zero-2", "fsdp-hybrid"})
SHARDING_NAMES: dict[Sharding, str] = {
    "none": "no sharding (Megatron DDP: bf16 weights, fp32 main grads, fp32 master + Adam)",
    "distributed-optimizer": "Megatron distributed optimizer (6 + 12/DP bytes/param)",
    "zero-1": "DeepSpeed ZeRO-1 (4 + 16/DP bytes/param)",
    "zero-2": "DeepSpeed ZeRO-2 (2 + 18/DP bytes/param)",
    "zero-3": "DeepSpeed ZeRO-3 (18/DP bytes/param + gathered layers)",
    "fsdp-full": "FSDP2 full shard (16/DP bytes/param + gathered layers)",
    "fsdp-hybrid": "FSDP2 hybrid shard inside a node (16/shard bytes/param + gathered layers)",
}


def sharding_of(layout: Parallelism) -> Sharding:
    """The sharding convention a layout names (``fsdp`` wins; ``zero=1`` follows ``zero_impl``)."""
    if layout.fsdp == "full":
        return "fsdp-full"
    if layout.fsdp == "hybrid":
        return "fsdp-hybrid"
    if layout.zero == 1:
        return "distributed-optimizer" if layout.zero_impl == "megatron" else "zero-1"
    if layout.zero == 2:
        return "zero-2"
    if layout.zero == 3:
        return "zero-3"
    return "none"


def weight_bytes_per_param(precision: Precision) -> float:
    """Bytes of the working copy of a weight: fp32 for fp32 training, 16-bit otherwise (FP8 recipes such
    as Transformer Engine and torchao keep 16-bit weights and cast per GEMM)."""
    return FP32_BYTES if precision == "fp32" else 2.0


def gathered_weight_bytes(precision: Precision, fp8_weights: Fp8Weights) -> float:
    """Bytes per weight a data-parallel all-gather of the weights moves (the distributed optimizer's updated
    weights, ZeRO-3/FSDP units): FP8 primary weights and torchao's FP8 all-gather travel as FP8 (1 B), others in
    their working dtype."""
    gathered_in_fp8 = fp8_weights in ("primary", "gathered")
    return 1.0 if precision == "fp8" and gathered_in_fp8 else weight_bytes_per_param(precision)


def main_grad_bytes(precision: Precision, fp8_main_grads: MainGrads) -> float:
    """Bytes of one of Megatron's main gradients (:data:`MainGrads`): 2 for an FP8 recipe that reduces in
    16 bits, else 4."""
    return 2.0 if precision == "fp8" and fp8_main_grads == "16-bit" else FP32_BYTES


def gradient_reduce_bytes(layout: Parallelism, precision: Precision, fp8_main_grads: MainGrads) -> float:
    """Bytes per gradient element in the data-parallel reduction: Megatron's main gradients (fp32 unless
    --grad-reduce-in-bf16 or an FP8 recipe's grad_reduce_in_fp32 = False), fp32 for FSDP2 (torchtitan's
    default reduce dtype); the 16-bit gradient for DeepSpeed ZeRO."""
    sharding = sharding_of(layout)
    if sharding in {"zero-1", "zero-2", "zero-3"}:
        return weight_bytes_per_param(precision)
    if sharding in {"none", "distributed-optimizer"}:
        return main_grad_bytes(precision, fp8_main_grads)
    return FP32_BYTES


@dataclass(frozen=True)
class StateBytesPerParam:
    """Bytes per parameter on one GPU for weights, gradients and optimizer states."""

    weights: float
    gradients: float
    optimizer: float

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer


def state_bytes_per_param(
    sharding: Sharding, shard_ranks: int, precision: Precision, fp8_main_grads: MainGrads
) -> StateBytesPerParam:
    """Mixed-precision Adam model states per parameter when ``shard_ranks`` GPUs share one copy.

    ``w`` is the working weight (2 B, or 4 B in fp32); ``master`` the fp32 master copy (absent in fp32).
    Megatron: ``megatron/training/theoretical_memory_usage.py`` (18 B/param; 6 + 12/DP with the
    distributed optimizer). DeepSpeed: ``estimate_zero2/3_model_states_mem_needs`` after PR #5099
    (2 + 18/DP for ZeRO-2: 16-bit grads + fp32 grad partition + fp32 master + Adam, sharded; 18/DP for
    ZeRO-3, whose 16-bit gradient partition is transient); ZeRO-1 keeps the 16-bit gradients whole. FSDP2 (``fully_shard`` with ``MixedPrecisionPolicy(param_dtype=bf16)``):
    the sharded fp32 parameter is the master copy, its fp32 gradient and Adam states are sharded too.
    Megatron's main gradients are 16-bit under an FP8 recipe that reduces in 16 bits (:data:`MainGrads`).
    """
    d = float(shard_ranks)
    w = weight_bytes_per_param(precision)
    master = 0.0 if precision == "fp32" else FP32_BYTES
    fp32_grad_partition = 0.0 if precision == "fp32" else FP32_BYTES
    main_grads = main_grad_bytes(precision, fp8_main_grads)
    if sharding == "none":
        return StateBytesPerParam(w, main_grads, master + ADAM_STATE_BYTES)
    if sharding == "distributed-optimizer":
        return StateBytesPerParam(w, main_grads, (master + ADAM_STATE_BYTES) / d)
    if sharding == "zero-1":
        return StateBytesPerParam(w, w + fp32_grad_partition / d, (master + ADAM_STATE_BYTES) / d)
    if sharding == "zero-2":
        return StateBytesPerParam(w, (w + fp32_grad_partition) / d, (master + ADAM_STATE_BYTES) / d)
    if sharding == "zero-3":
        # the estimator's 18P/N: 16-bit parameter shard, fp32 gradient shard, fp32 master + Adam shards
        return StateBytesPerParam(w / d, (fp32_grad_partition or w) / d, (master + ADAM_STATE_BYTES) / d)
    return StateBytesPerParam(FP32_BYTES / d, FP32_BYTES / d, ADAM_STATE_BYTES / d)


def fsdp_shard_ranks(layout: Parallelism, gpus_per_node: int) -> int:
    """GPUs sharing one copy of the dense parameters: DP x CP, or the DP ranks of one node for hybrid FSDP."""
    group = layout.dp * layout.cp
    if layout.fsdp == "hybrid":
        return max(1, min(group, gpus_per_node // (layout.tp * layout.cp) * layout.cp))
    return group
