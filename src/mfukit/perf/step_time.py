"""Step time and MFU of a training step, for many layouts at once.

Compute. Every GEMM of a layer (QKV or MLA's projections, attention output, MLP or routed/shared experts,
router, logits) is timed by the accelerator's GEMM curve (:mod:`mfukit.perf.gemm`): output tiles spread
over its SMs in waves, the best of a few tile sizes and split-K factors, each tile paying its operand loads
and prologue/epilogue, bounded below by the memory roofline, plus a fixed launch cost (Calculon, Isaev et
al. SC23, uses measured per-size efficiency tables to the same end). Backward = 2 x forward for GEMMs
(activation and weight gradients). Flash attention executes the causal half of the s² scores (Dao 2023:
blocks above the diagonal are skipped) at its own efficiency, backward 2.5 x forward (five matmuls against
two); without flash attention the scores are computed by two batched GEMMs over all s keys and moved
through HBM by the softmax and dropout. Element-wise kernels (norms, residual adds, RoPE, the activation,
MoE permutation, cross-entropy) move their bytes at a fraction of HBM bandwidth; Adam reads and writes 30
bytes per local parameter. Recompute repeats the forward (full: the whole layer with its TP collectives;
selective: the core attention).

Host. The host launches a layer's kernels while the GPU runs earlier ones, so its launch time is a floor
under the layer's GPU time, not an addition: small layers are launch-bound (the ``other`` part of the
breakdown is the floor's excess). The framework also adds a fixed cost per micro-batch on a stage, per
TP/CP/EP and ZeRO-3/FSDP collective (synchronisation) and per pipeline send. The constants come from
:mod:`mfukit.perf.efficiency`, fitted to measured runs; what a framework overlaps, and the dtype and buckets
of its gradient reduction, are facts read from its code (framework profiles).

Communication (:mod:`mfukit.perf.step_comm`): TP collectives are exposed in forward; in backward the
input-gradient reduction overlaps the weight-gradient GEMM (Megatron's asynchronous TP all-reduce). CP ring
steps hide behind the attention they feed. EP all-to-alls are exposed. Pipeline stages exchange one
activation per micro-batch each way; a 1F1B stage waits for it at every step, the interleaved schedule only
while filling and draining. DP gradients are reduced in the framework's buckets (each collective paying its
latency); the framework's facts say how much hides under the last micro-batch's backward (all but the last
bucket, with Megatron-Core's --overlap-grad-reduce or nanotron's hook; nothing with Megatron's local DDP),
and whether a sharded optimizer's weight all-gather hides under the next forward. ZeRO-3/FSDP gather each
layer while the previous one computes (prefetch) and reduce-scatter its gradients under the next layer's
backward, every micro-batch (once per step where the framework keeps weights gathered under a pipeline).

Pipeline (Narayanan et al., SC21): with per-micro-batch stage times t_r, 1F1B takes (m - 1) max t_r + sum t_r
(= (m + p - 1) t for equal stages: the bubble (p - 1)/m); interleaving with v chunks takes
m max t_r + (p - 1)/v mean t_r. Uneven splits (a lighter first or last stage) enter through t_r.

The stack (``Workload.framework``) decides what its code does: TP collectives chunked under their GEMMs
(Megatron-Core and NeMo on Hopper), ZeRO-3 gathers per layer with the next unit prefetched (FSDP) or per
weight matrix with a bounded prefetch (DeepSpeed: the part of a unit beyond the prefetch cannot hide), the
attention kernel's rate. A collective hidden under compute still holds NCCL's SMs, slowing the GEMMs it
overlaps (:func:`hidden_cost`). Every rank waits for the slowest at each synchronisation: the step grows by
the expected maximum of the ranks' jitter (:func:`straggler_factor`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace

import numpy as np

from mfukit.comm.topology import SCALE_OUT_NOTE, CommTopology, from_system
from mfukit.core.hardware import Accelerator, System
from mfukit.core.model import ModelSpec
from mfukit.core.parallelism import Parallelism
from mfukit.core.scenario import Precision
from mfukit.perf import flops
from mfukit.perf.activations import stages_recomputed_share
from mfukit.perf.efficiency import (
    CURRENT_SCALING,
    EagerElementwise,
    Efficiency,
    NetworkProfile,
    efficiency_for,
    model_gemm_curve,
    network_name,
    network_profile_of,
)
from mfukit.perf.layouts import (
    RECOMPUTES,
    SHARDINGS,
    Bools,
    Floats,
    Ints,
    LayoutGrid,
    Workload,
    per_unique,
    sharding_fields,
)
from mfukit.perf.memory_grid import stage_params_grid
from mfukit.perf.model_states import (
    ADAM_STEP_BYTES_PER_PARAM,
    GRADIENTS_FOLLOW_CPU_STEP,
    REDUCED_EVERY_MICROBATCH,
    gradient_reduce_bytes,
)
from mfukit.perf.offload import cpu_steps, offload_time
from mfukit.perf.step_comm import CommInputs, CommTimes, DataParallelTimes, communication_times
from mfukit.perf.step_shapes import FLASH_BACKWARD_TO_FORWARD, LayerShapes, layer_shapes

GRAD_PASS_BYTES_PER_PARAM = 8.0  # reading the fp32 main gradients for the norm and zeroing them
HOST_BACKWARD_TO_FORWARD = 2.0  # kernels autograd launches for a layer's backward per forward kernel
# Kernels a GPT/Llama layer's forward launches: fused (Megatron-DeepSpeed, which the host floor is fitted on:
# layer norm, QKV, scores, fused softmax, dropout, values, the output copy, projection, bias-dropout-add,
# layer norm, two MLP GEMMs with fused bias-GeLU, bias-dropout-add; torch.compile's Inductor graph launches as
# many) against torchtitan's eager Llama layer (two composite RMSNorms of 8 kernels, wq/wk/wv, RoPE of 3
# kernels on Q and on K, two repeat_kv copies, SDPA, the output copy, wo, two adds, w1, silu, w3, mul, w2).
LAYER_KERNELS = {"fused": 14.0, "composite": 38.0}
BREAKDOWN = (
    "compute",
    "memory_bound",
    "grad_accumulation",
    "recompute",
    "tp_comm",
    "cp_comm",
    "ep_comm",
    "fsdp_comm",
    "pp_comm",
    "pipeline_bubble",
    "dp_comm",
    "optimizer",
    "offload",
    "other",
    "stragglers",
)
# the parts that run on the compute stream: what collectives beside them can hide under
COMPUTE_STREAM_PARTS = ("compute", "memory_bound", "grad_accumulation", "recompute")
_SHARDED_STATES = np.asarray([name != "none" for name in SHARDINGS])
_DDP_STYLE = frozenset({"none", "distributed-optimizer"})  # reductions of the framework's own gradient buffer
_GATHERS_PARAMS = np.asarray([name in {"zero-3", "fsdp-full", "fsdp-hybrid"} for name in SHARDINGS])
_REDUCED_EVERY_MICROBATCH = np.asarray([name in REDUCED_EVERY_MICROBATCH for name in SHARDINGS])
_SHARDED_GRADIENTS = _GATHERS_PARAMS | _REDUCED_EVERY_MICROBATCH


@dataclass(frozen=True)
class Machine:
    """The hardware one estimate runs on: the node, its accelerator, the network and the efficiency profile."""

    system: System
    accelerator: Accelerator
    topology: CommTopology
    assumptions: tuple[str, ...] = ()

    @property
    def gpus_per_node(self) -> int:
        return self.system.gpus_per_node


def machine_for(
    system: System, accelerator: Accelerator, num_gpus: int, *, topology: CommTopology | None = None
) -> Machine:
    """The machine of ``num_gpus`` GPUs of ``system`` (its network built by :func:`comm.topology.from_system`,
    with the fitted profile of its network where it has one)."""
    notes: list[str] = []
    if topology is None:
        topology, notes = from_system(
            system, accelerator, num_nodes=math.ceil(num_gpus / system.gpus_per_node)
        )
        topology, notes = with_network_profile(topology, network_name(system), notes)
    return Machine(system, accelerator, topology, tuple(notes))


def with_network_profile(
    topology: CommTopology, name: str, notes: list[str], profile: NetworkProfile | None = None
) -> tuple[CommTopology, list[str]]:
    """``topology`` with the fitted NCCL efficiency and step latency of network ``name`` (a scale-out link or a
    system; ``profile``, or the installed one), if it has them."""
    profile = profile or network_profile_of(name)
    if profile is None or profile.efficiency is None or profile.step_latency_s is None:
        return topology, notes
    fitted = topology.with_options(
        net_efficiency=profile.efficiency, net_step_latency_s=profile.step_latency_s
    )
    # the profile replaces the scale-out efficiency (and any nccl-tests latency) from_system assumed
    kept = [note for note in notes if not note.startswith(SCALE_OUT_NOTE)]
    return fitted, [
        *kept,
        f"{SCALE_OUT_NOTE} network profile {name}, fitted on the training runs that crossed it "
        f"(perf/data/efficiency.toml): collectives move {profile.efficiency:.0%} of the NICs' line rate, "
        f"+{profile.step_latency_s * 1e6:.1f} us per network step",
    ]


@dataclass(frozen=True)
class Prepared:
    """Everything of a step that does not depend on the efficiency constants (shapes, bytes, collectives)."""

    workload: Workload
    grid: LayoutGrid
    machine: Machine
    shapes: LayerShapes
    comm: CommTimes
    optimizer_params: tuple[Floats, Floats]  # local optimizer-state parameters, first and last stage
    gradient_params: tuple[Floats, Floats]  # local fp32 gradients, first and last stage
    model_flops_per_token: float
    hardware_flops_per_token: Floats  # with the recompute of each layout (HFU)
    executed_flops_per_token: Floats  # the least the GPUs must execute (the compute bound)
    # the share of its FP8 GEMMs' weights a rank casts each micro-batch: all of them, or, where a ZeRO-3/FSDP
    # unit is all-gathered in FP8 (fp8_weights "gathered"), its own shard of the dense weights, cast before the
    # gather (an expert's shard is ep times larger; expert weights are charged the dense share too)
    fp8_weight_cast_share: Floats


@dataclass(frozen=True)
class StepEstimate:
    """Per configuration: the step time, its breakdown (seconds per step, summing to it) and the rates."""

    step_time_s: Floats
    breakdown_s: dict[str, Floats]
    mfu: Floats
    hfu: Floats
    model_flops_per_s_per_gpu: Floats
    tokens_per_s: Floats
    compute_bound_s: Floats  # the step if every matmul ran at the dense peak and nothing else took time

    def row(self, i: int) -> dict[str, float]:
        return {name: float(values[i]) for name, values in self.breakdown_s.items()}

    @property
    def kernel_ceiling(self) -> Floats:
        """How many times faster each step would run if nothing but its GEMMs and attention (with their
        recompute) took time, at the GPU family's fitted kernel curves: no communication, element-wise work,
        host time, bubble or stragglers. Under the shipped constants 99 % of the measured runs lie below it
        (``docs/performance-model.md`` section Intervals), so an interval's high end stops there."""
        kernels = self.breakdown_s["compute"] + self.breakdown_s["recompute"]
        return np.asarray(np.maximum(1.0, self.step_time_s / np.maximum(kernels, 1e-30)), dtype=np.float64)


def prepare(workload: Workload, grid: LayoutGrid, machine: Machine) -> Prepared:
    """Shapes and collective times of every layout of ``grid`` (the efficiency-independent half)."""
    # the gradient's bytes and buckets in the DP reduction: the framework's own (facts), or the sharding's;
    # its element-wise ops fused (torch.compile, or a framework whose eager kernels are fused) or composite
    facts = efficiency_for(machine.accelerator, workload.framework)
    shapes = layer_shapes(workload, grid, kernels=elementwise_kernels(workload, facts))
    first = stage_params_grid(workload, grid, 0, machine.gpus_per_node)
    last = stage_params_grid(workload, grid, 1, machine.gpus_per_node)
    reduce_bytes = facts.grad_reduce_bytes
    layouts_grad = np.asarray(
        [
            reduce_bytes
            if reduce_bytes is not None and name in _DDP_STYLE
            else gradient_reduce_bytes(_sharding_layout(name), workload.precision, workload.fp8_main_grads)
            for name in SHARDINGS
        ]
    )
    hybrid_ranks = np.maximum(
        1, np.minimum(grid.dp * grid.cp, machine.gpus_per_node // (grid.tp * grid.cp) * grid.cp)
    )
    dense_ranks = np.where(
        np.asarray(SHARDINGS)[grid.sharding] == "fsdp-hybrid", hybrid_ranks, grid.dp * grid.cp
    )
    expert_ranks = np.maximum(1, dense_ranks // grid.ep)
    inputs = CommInputs(
        activation_bytes=shapes.activation_bytes,
        kv_chunk_bytes=shapes.kv_chunk_bytes,
        dispatch_bytes=shapes.dispatch_bytes,
        p2p_bytes=shapes.activation_bytes / grid.tp,
        grad_bytes_per_param=layouts_grad[grid.sharding],
        weight_bytes_per_param=shapes.weight_bytes,
        first_params=(first.dense, first.expert),
        last_params=(last.dense, last.expert),
        first_unit_params=first.largest_unit,
        last_unit_params=last.largest_unit,
        first_units=(shapes.first_counts[0] + shapes.first_counts[1], first.outside_layers),
        last_units=(shapes.last_counts[0] + shapes.last_counts[1], last.outside_layers),
        hybrid_shard_ranks=hybrid_ranks,
        bucket_params=facts.grad_bucket_params or math.inf,
        unit_collectives=float(weight_matrices_per_layer(workload.model))
        if facts.zero3_gathers == "per-matrix"
        else 1.0,
        prefetch_params=facts.zero3_prefetch_params or math.inf,
    )
    sharded = _SHARDED_STATES[grid.sharding]

    def local(stage_dense: Floats, stage_expert: Floats) -> tuple[Floats, Floats]:
        states = np.where(
            sharded, stage_dense / dense_ranks + stage_expert / expert_ranks, stage_dense + stage_expert
        )
        gathers = _GATHERS_PARAMS[grid.sharding]
        grads = np.where(gathers, states, stage_dense + stage_expert)
        return states, grads

    first_local, last_local = local(first.dense, first.expert), local(last.dense, last.expert)
    cast_on_shard = workload.fp8_weights == "gathered" and _GATHERS_PARAMS[grid.sharding]
    fp8_weight_cast_share = np.where(cast_on_shard, 1.0 / dense_ranks, 1.0)
    # full recompute of part of the layers (recompute_layers) executes that share of the layers' forward again
    share = per_unique(
        functools.partial(_model_share, workload.model.num_hidden_layers),
        grid.recompute,
        grid.recompute_layers,
        grid.vpp,
        grid.pp,
        *(np.add(*counts) for counts in (shapes.first_counts, shapes.middle_counts, shapes.last_counts)),
    )

    def per_token(convention: flops.AttentionConvention) -> Floats:
        def of(mode: int, recomputed: float) -> float:
            model, seq = workload.model, workload.seq_len
            return flops.hardware_flops_per_token(model, seq, RECOMPUTES[mode], convention, recomputed)

        return per_unique(of, grid.recompute, share)

    return Prepared(
        workload=workload,
        grid=grid,
        machine=machine,
        shapes=shapes,
        comm=communication_times(grid, inputs, machine.topology),
        optimizer_params=(first_local[0], last_local[0]),
        gradient_params=(first_local[1], last_local[1]),
        model_flops_per_token=flops.model_flops_per_token(
            workload.model, workload.seq_len, workload.attention
        ),
        hardware_flops_per_token=per_token(workload.attention),
        # the least the GPUs must execute: with causal attention, since flash attention skips the masked half
        executed_flops_per_token=per_token("causal"),
        fp8_weight_cast_share=fp8_weight_cast_share,
    )


def _model_share(
    num_layers: int, recompute: int, layers: int, vpp: int, pp: int, first: float, middle: float, last: float
) -> float:
    """:func:`~mfukit.perf.activations.model_recomputed_share` of one layout of a grid, from the layers of its
    first, a middle and its last stage."""
    full = RECOMPUTES[recompute] == "full"
    return stages_recomputed_share(full, layers, vpp, pp, (first, middle, last), num_layers)


def weight_matrices_per_layer(model: ModelSpec) -> int:
    """Weight matrices of one layer as framework modules hold them: fused QKV and the output projection in
    GPT-style models (Megatron, GPT-2/3, BLOOM), separate Q, K, V and O in the GQA-era Hugging Face models
    (Llama, Mistral, Qwen); two MLP matrices, three with SwiGLU."""
    attention = 4 if model.num_key_value_heads is not None else 2
    return attention + (3 if model.mlp == "swiglu" else 2)


def elementwise_kernels(workload: Workload, facts: Efficiency) -> EagerElementwise:
    """How the workload's element-wise ops run: fused under torch.compile, else as its framework's eager ops."""
    return "fused" if workload.compile else facts.eager_elementwise


def _sharding_layout(name: str) -> Parallelism:
    return Parallelism.model_validate(sharding_fields(name))


@dataclass(frozen=True)
class _PerLayer:
    """Forward times of one layer for one micro-batch on one GPU (seconds)."""

    gemm: Floats
    window: Floats  # the QKV and first MLP GEMMs: their weight gradients hide the TP reduction
    alternate: Floats  # the GEMM time an every-second-matmul recompute policy repeats
    attention: Floats  # the core attention (scores, softmax, values), forward
    attention_backward: Floats
    memory: Floats
    casts: Floats  # FP8 scaling and casts, forward
    casts_backward: Floats
    grad_accumulation: Floats  # the stack's pass adding the layer's weight gradients into their buffers

    @property
    def forward(self) -> Floats:
        return self.gemm + self.attention + self.memory + self.casts

    @property
    def backward(self) -> Floats:
        return (
            2 * self.gemm
            + self.attention_backward
            + 2 * self.memory
            + self.casts_backward
            + self.grad_accumulation
        )


class _Timer:
    def __init__(self, p: Prepared, eff: Efficiency):
        accelerator = p.machine.accelerator
        precision = p.workload.precision
        self.attention_peak = (
            accelerator.peak_flops("fp32" if precision == "fp32" else "bf16") * eff.attention_fraction
        )
        self.hbm = accelerator.hbm_bytes_per_s * eff.hbm_fraction
        wide: Precision = "bf16" if precision == "fp8" else precision  # the output layer's and router's dtype
        self.curves = {
            fp8: model_gemm_curve(accelerator, eff, "fp8" if fp8 else wide)
            for fp8 in ((False, True) if precision == "fp8" else (False,))
        }
        recipe = eff.model_copy(update=CURRENT_SCALING) if p.workload.fp8_recipe == "current" else eff
        self.cast_bytes = (
            recipe.fp8_input_cast_bytes,
            recipe.fp8_grad_cast_bytes,
            recipe.fp8_weight_cast_bytes,
        )
        self.fused_input_casts = recipe.fp8_fused_input_casts > 0
        self.weight_cast_share = p.fp8_weight_cast_share
        self.shapes = p.shapes
        self.unsharded_gradients = ~_SHARDED_GRADIENTS[p.grid.sharding]
        self.accumulation_bytes = eff.grad_accumulation_bytes(precision)

    def accumulation(self, name: str) -> Floats:
        """Time of one micro-batch's gradient accumulation over the weights of ``name`` (a layer kind or the
        head) on one GPU: their elements are the K x N of its GEMMs, expert GEMMs once per local expert. Zero
        where the gradients are sharded: ZeRO-2/3 and FSDP reduce-scatter each micro-batch's gradients, and
        only the rank's shard accumulates."""
        weights = sum(
            (gemm.count * gemm.k * gemm.n for gemm in self.shapes.gemms[name]),
            np.zeros_like(self.shapes.tokens),
        )
        moved = np.where(self.unsharded_gradients, self.accumulation_bytes, 0.0)
        return np.asarray(weights * moved / self.hbm, dtype=np.float64)

    def gemms(self, name: str) -> tuple[Floats, Floats, Floats]:
        """Forward time of the GEMMs of ``name`` (a layer kind or the head), of its window GEMMs and of the share
        an every-second-matmul recompute repeats."""
        total = np.zeros_like(self.shapes.tokens)
        window = np.zeros_like(self.shapes.tokens)
        alternate = np.zeros_like(self.shapes.tokens)
        for gemm in self.shapes.gemms[name]:
            time = np.where(gemm.count > 0, gemm.count * self.curves[gemm.fp8].time_s(gemm.distinct), 0.0)
            total = total + time
            alternate = alternate + gemm.alternate * time
            if gemm.window:
                window = window + time
        return total, window, alternate

    def casts(self, name: str) -> tuple[Floats, Floats]:
        """FP8 scaling of the GEMMs of ``name``, forward and backward (seconds): the recipe's bytes per element
        of each FP8 GEMM's input (M x K; none where a fused norm or activation kernel casts it, as the stack's
        facts say) and weight (K x N, or the rank's shard of it where FSDP gathers it in FP8) in the forward, of
        its output gradient (M x N) in the backward."""
        input_bytes, grad_bytes, weight_bytes = self.cast_bytes
        forward = np.zeros_like(self.shapes.tokens)
        backward = np.zeros_like(self.shapes.tokens)
        for gemm in self.shapes.gemms[name]:
            if gemm.fp8:
                own = 0.0 if gemm.fused_input and self.fused_input_casts else input_bytes
                forward = forward + gemm.count * gemm.k * (
                    gemm.m * own + gemm.n * weight_bytes * self.weight_cast_share
                )
                backward = backward + gemm.count * gemm.m * gemm.n * grad_bytes
        return forward / self.hbm, backward / self.hbm

    def layer(self, name: str) -> _PerLayer:
        gemm, window, alternate = self.gemms(name)
        s = self.shapes
        flash = s.attention_flops / self.attention_peak
        batched, _, _ = self.gemms("core")  # unfused attention: its GEMMs (backward 2x) and score traffic
        scores_forward, scores_backward = (bytes_ / self.hbm for bytes_ in s.score_bytes)
        casts, casts_backward = self.casts(name)
        return _PerLayer(
            gemm,
            window,
            alternate,
            flash + batched + scores_forward,
            FLASH_BACKWARD_TO_FORWARD * flash + 2 * batched + scores_backward,
            s.memory_bytes[name] / self.hbm,
            casts,
            casts_backward,
            self.accumulation(name),
        )


def _kept_to_last_microbatch(g: LayoutGrid, eff: Efficiency) -> Bools:
    """Layouts whose stack keeps each pipeline stage's weights gathered and its gradients unreduced across
    the micro-batches of a step (torchtitan's FSDP2 under a pipeline): one gather and one reduction a step."""
    return np.asarray((g.pp > 1) & (eff.fsdp_gathers_once_with_pipeline > 0))


def _stage(
    p: Prepared,
    dense: _PerLayer,
    moe: _PerLayer,
    counts: tuple[Floats, Floats],
    head: Floats,
    embedding: Floats,
    dp: DataParallelTimes,
    eff: Efficiency,
) -> dict[str, Floats]:
    """Per-micro-batch time of one pipeline stage by part."""
    g, c = p.grid, p.comm
    n_dense, n_moe = counts
    layers = n_dense + n_moe
    recompute = np.asarray(RECOMPUTES)[g.recompute]
    recomputed = g.recomputed_share(layers)  # of the stage's layers, under full recompute
    cp_ring = np.maximum(g.cp - 1, 0)
    # collectives a layer launches per micro-batch: 2 (+ 2 with SP) forward, 2 (+ 4 with SP) backward
    tp_forward_calls = np.where(g.tp > 1, np.where(g.sp, 4.0, 2.0), 0.0)
    tp_calls = np.where(g.tp > 1, np.where(g.sp, 10.0, 4.0), 0.0)
    # ZeRO-3/FSDP: each layer's weights gathered for forward and again for backward (one collective, or one
    # per weight matrix), its gradients reduce-scattered, every micro-batch, each with its fixed
    # synchronisation cost
    unit_calls = 2 * dp.unit_collectives + np.where(_GATHERS_PARAMS[g.sharding], 1.0, 0.0)
    # a framework that keeps the stage's weights gathered across micro-batches under a pipeline pays the
    # gathers and the reduction once per step: spread over the step's micro-batches here
    per_microbatch = np.where(_kept_to_last_microbatch(g, eff), 1.0 / g.num_microbatches, 1.0)
    dp = replace(
        dp,
        unit_gather_s=dp.unit_gather_s * per_microbatch,
        unit_reduce_s=dp.unit_reduce_s * per_microbatch,
    )
    unit_calls = unit_calls * per_microbatch

    def per_layer(kind: _PerLayer, routed: bool) -> dict[str, Floats]:
        # the column-parallel GEMMs' backward: weight gradients only, or (SP) input gradients too
        window = np.where(g.sp, 2.0, 1.0) * kind.window
        tp_fwd = c.tp_fwd_s
        tp = tp_fwd + c.tp_bwd_blocking_s + np.maximum(0.0, c.tp_bwd_overlappable_s - window)
        # each collective's fixed synchronisation cost, on the compute stream; chunked under its GEMM (TP
        # overlap with SP) it runs on the communication stream and hides with the transfer
        exposed_calls = np.where(g.sp, 0.0, tp_calls) if tp_overlap else tp_calls
        if tp_overlap:
            overlapped_fwd, overlapped = tp_overlapped_s(c, kind, g.tp, eff.collective_overhead_s)
            tp_fwd, tp = np.where(g.sp, overlapped_fwd, tp_fwd), np.where(g.sp, overlapped, tp)
        tp = tp + exposed_calls * eff.collective_overhead_s
        cp_fwd = (
            np.maximum(0.0, cp_ring * c.cp_fwd_step_s - kind.attention) + cp_ring * eff.collective_overhead_s
        )
        cp_bwd = np.maximum(0.0, cp_ring * c.cp_bwd_step_s - kind.attention_backward)
        cp_bwd = cp_bwd + cp_ring * eff.collective_overhead_s
        all_to_all = c.ep_all_to_all_s + np.where(g.ep > 1, eff.collective_overhead_s, 0.0)
        ep = 4 * all_to_all if routed else np.zeros_like(all_to_all)
        full = kind.forward + tp_fwd + cp_fwd + tp_forward_calls * eff.collective_overhead_s + ep / 2
        # selective: Megatron's core attention again, or torchtitan's op-level policy: every second matmul of
        # the layer and its element-wise ops (attention and the other matmuls' outputs are saved)
        selective = (
            kind.attention
            if eff.selective_recompute == "attention"
            else kind.alternate + kind.memory + kind.casts
        )
        parts = {
            "compute": 3 * kind.gemm + kind.attention + kind.attention_backward,
            "memory_bound": 3 * kind.memory + kind.casts + kind.casts_backward,
            "grad_accumulation": kind.grad_accumulation,
            "recompute": np.where(
                recompute == "full", recomputed * full, np.where(recompute == "selective", selective, 0.0)
            ),
            "tp_comm": tp,
            "cp_comm": cp_fwd + cp_bwd,
            "ep_comm": ep,
            "fsdp_comm": hidden_cost(dp.unit_gather_s, kind.forward * dp.unit_prefetch_share, sm_share)
            + hidden_cost(
                dp.unit_gather_s + dp.unit_reduce_s, kind.backward * dp.unit_prefetch_share, sm_share
            )
            + unit_calls * eff.collective_overhead_s,
        }
        # The host launches the layer's kernels while the GPU runs earlier ones: it only costs time when it
        # is the slower of the two (small layers: the step is launch-bound). Backward launches about twice
        # the forward's kernels (input and weight gradients); full recompute launches the forward again.
        host = eff.host_layer_s * (1 + HOST_BACKWARD_TO_FORWARD + recomputed) * launches
        gpu = np.sum(np.stack(list(parts.values())), axis=0)
        parts["other"] = np.maximum(0.0, host - gpu)
        return parts

    tp_overlap = tp_comm_overlap(p.workload, p.machine.accelerator, eff)
    sm_share = nccl_sm_share(p.machine.accelerator)
    # the host floor was fitted on fused layers; composite eager ops launch more kernels per layer
    launches = LAYER_KERNELS[elementwise_kernels(p.workload, eff)] / LAYER_KERNELS["fused"]
    d = per_layer(dense, routed=False)
    if np.any(n_moe > 0):
        m = per_layer(moe, routed=True)
        parts = {name: n_dense * d[name] + n_moe * m[name] for name in d}
    else:  # a dense model: no MoE layer to time
        parts = {name: n_dense * d[name] for name in d}
    parts["compute"] = parts["compute"] + 3 * head
    parts["memory_bound"] = parts["memory_bound"] + 3 * embedding
    # The first layer's gather and the last layer's reduce-scatter have nothing to hide behind.
    parts["fsdp_comm"] = parts["fsdp_comm"] + np.where(layers > 0, dp.unit_gather_s + dp.unit_reduce_s, 0.0)
    parts["other"] = parts["other"] + eff.microbatch_overhead_s
    return parts


# NCCL runs a collective as one thread block per channel, each on its own SM; a real Megatron-LM log of 8 A100s
# on InfiniBand reports "24 coll channels" (shared/reference/artifacts/real_logs/megatron), NCCL's init
# summary on H100 nodes 32
NCCL_COLL_CHANNELS = 24


def nccl_sm_share(accelerator: Accelerator) -> float:
    """The share of the GPU's SMs a running collective holds: the GEMMs it overlaps run on the rest."""
    if accelerator.compute_units is None:  # no SM count in the catalog: take an A100-sized GPU
        return NCCL_COLL_CHANNELS / 108
    return min(1.0, NCCL_COLL_CHANNELS / accelerator.compute_units)


def hidden_cost(comm_s: Floats, window_s: Floats, sm_share: float) -> Floats:
    """Time a collective of ``comm_s`` adds when ``window_s`` of compute can run beside it: the part that
    outlasts the window, plus the compute it slows while both run (its SMs taken by NCCL's channels;
    overlap is not free, Rashidi et al., ISCA 2021; Jangda et al., ASPLOS 2022)."""
    hidden = np.minimum(comm_s, np.maximum(window_s, 0.0))
    return np.asarray(comm_s - hidden + sm_share * hidden, dtype=np.float64)


def tp_comm_overlap(workload: Workload, accelerator: Accelerator, eff: Efficiency) -> bool:
    """Whether TP collectives run chunked under their GEMMs: as the workload says, else the stack's default,
    which its recipes turn on only on GPUs with FP8 tensor cores (Hopper and later: Transformer Engine's
    userbuffers overlap ships in their H100 recipes)."""
    if workload.tp_comm_overlap is not None:
        return workload.tp_comm_overlap
    return eff.tp_comm_overlap > 0 and "fp8" in accelerator.peak_flops_per_s


def tp_overlapped_s(
    c: CommTimes, kind: _PerLayer, tp: Ints, collective_overhead_s: float = 0.0
) -> tuple[Floats, Floats]:
    """Exposed TP communication of one layer, forward and forward + backward, when each sequence-parallel
    all-gather and reduce-scatter runs in ``tp`` chunks pipelined with the GEMM it feeds or drains (torchtitan's
    async TP, micro-pipelined over symmetric memory; Megatron's --tp-comm-overlap; Wang et al., ASPLOS 2023):
    a collective of time C split with its GEMM of time G over n chunks exposes (n - 1)/n max(0, C - G), and a
    reduce-scatter also its last chunk C/n. The all-gathers feed the column-parallel GEMMs (QKV, first MLP) and
    the reduce-scatters drain the row-parallel ones; backward, the output-gradient all-gathers feed the
    row-parallel input-gradient GEMMs, the input-gradient reduce-scatters drain the column-parallel ones, and
    the re-gathered inputs hide under the column-parallel weight gradients as without the overlap. Each
    collective's fixed cost (``collective_overhead_s``) travels with its transfer."""
    n = np.maximum(tp, 1).astype(np.float64)
    column, row = kind.window, kind.gemm - kind.window
    gather = 2 * (c.tp_all_gather_s + collective_overhead_s)
    scatter = 2 * (c.tp_reduce_scatter_s + collective_overhead_s)

    def fed(comm: Floats, gemm: Floats) -> Floats:
        return (n - 1) / n * np.maximum(0.0, comm - gemm)

    forward = fed(gather, column) + fed(scatter, row) + scatter / n
    backward = fed(gather, row) + fed(scatter, column) + scatter / n + np.maximum(0.0, gather - column)
    return forward, forward + backward


def _total(parts: dict[str, Floats]) -> Floats:
    return np.asarray(np.sum(np.stack(list(parts.values())), axis=0), dtype=np.float64)


def evaluate(p: Prepared, efficiency: Efficiency | None = None) -> StepEstimate:
    """Step time, breakdown and MFU of every layout of ``p`` under ``efficiency`` (the machine's by default)."""
    eff = efficiency or efficiency_for(p.machine.accelerator, p.workload.framework)
    g, s = p.grid, p.shapes
    timer = _Timer(p, eff)
    dense, moe = timer.layer("dense"), timer.layer("moe")
    head, _, _ = timer.gemms("head")
    head_memory = s.memory_bytes["head"] / timer.hbm
    embedding_memory = s.memory_bytes["embedding"] / timer.hbm
    zero = np.zeros_like(head)
    single = g.pp == 1
    first = _stage(
        p, dense, moe, s.first_counts, np.where(single, head, 0.0), embedding_memory, p.comm.dp_first, eff
    )
    first["memory_bound"] = first["memory_bound"] + np.where(single, 3 * head_memory, 0.0)
    last = _stage(
        p, dense, moe, s.last_counts, head, np.where(single, embedding_memory, 0.0), p.comm.dp_last, eff
    )
    last["memory_bound"] = last["memory_bound"] + 3 * head_memory
    # the embedding's gradient on the first stage, the output layer's on the last (one stage: both, unless
    # they are one tied matrix)
    untied = 0.0 if p.workload.model.tie_word_embeddings else 1.0
    vocabulary_accumulation = timer.accumulation("head") * (1.0 + np.where(single, untied, 0.0))
    for stage in (first, last):
        stage["grad_accumulation"] = stage["grad_accumulation"] + vocabulary_accumulation
    # a middle stage exists only with pp > 2 (its parts are zero elsewhere)
    middle = (
        _stage(p, dense, moe, s.middle_counts, zero, zero, p.comm.dp_first, eff)
        if np.any(g.pp > 2)
        else {name: np.zeros_like(head) for name in first}
    )
    totals = np.stack([_total(first), _total(middle), _total(last)])
    totals[1] = np.where(g.pp > 2, totals[1], -np.inf)
    slowest = np.argmax(totals, axis=0)
    t_max = totals[slowest, np.arange(len(g))]
    middle_stages = np.maximum(g.pp - 2, 0)
    stage_sum = np.where(
        single, totals[0], totals[0] + totals[2] + middle_stages * np.where(g.pp > 2, totals[1], 0.0)
    )
    m = g.num_microbatches.astype(np.float64)
    interleaved = g.vpp > 1
    pipeline_s = np.where(
        interleaved, m * t_max + (g.pp - 1) / g.vpp * stage_sum / g.pp, (m - 1) * t_max + stage_sum
    )
    breakdown: dict[str, Floats] = {}
    stages = (first, middle, last)
    for name in first:
        stacked = np.stack([stage[name] for stage in stages])
        breakdown[name] = m * stacked[slowest, np.arange(len(g))]
    breakdown["pipeline_bubble"] = pipeline_s - m * t_max
    p2p = 2 * (p.comm.pp_p2p_s + np.where(g.pp > 1, eff.p2p_overhead_s, 0.0))
    breakdown["pp_comm"] = np.where(interleaved, p2p * (g.pp - 1), p2p * (m + g.pp - 1))
    windows = []
    # ZeRO-2 and hybrid FSDP reduce each micro-batch's gradients under that micro-batch's backward, so every one
    # exposes what the last one does (a stack that keeps a pipeline stage's gradients to the last micro-batch
    # reduces once)
    reductions = np.where(_REDUCED_EVERY_MICROBATCH[g.sharding] & ~_kept_to_last_microbatch(g, eff), m, 1.0)
    passes: list[tuple[Floats, Floats]] = []  # one micro-batch's forward and backward, first and last stage
    for stage_dp, counts, extra in (
        (p.comm.dp_first, s.first_counts, 0.0),
        (p.comm.dp_last, s.last_counts, head),
    ):
        forward = counts[0] * dense.forward + counts[1] * moe.forward + extra
        backward = counts[0] * dense.backward + counts[1] * moe.backward + 2 * extra
        passes.append((forward, backward))
        # what the framework overlaps (its facts): all but the last bucket of the gradient reduction can run
        # under the last micro-batch's backward, the weight all-gather under the next forward
        grad_hidden = np.minimum(
            eff.grad_reduce_overlap * (stage_dp.grad_sync_s - stage_dp.bucket_s), np.maximum(backward, 0.0)
        )
        gather_hidden = np.minimum(eff.param_gather_overlap * stage_dp.param_gather_s, forward)
        share = nccl_sm_share(p.machine.accelerator)
        windows.append(
            reductions * (stage_dp.grad_sync_s - grad_hidden + share * grad_hidden)
            + stage_dp.param_gather_s
            - gather_hidden
            + share * gather_hidden
        )
    breakdown["dp_comm"] = np.maximum(windows[0], windows[1])
    hbm = timer.hbm
    # the GPU steps the states it holds, and offloaded ones it is given back (offload_optimizer_step "gpu");
    # what the CPU steps, it also takes the norm of and zeroes where the gradients went with them (ZeRO-2/3)
    cpu_share = p.workload.offload_optimizer if cpu_steps(p.workload) else 0.0
    gradients_moved = np.isin(g.sharding, [SHARDINGS.index(n) for n in GRADIENTS_FOLLOW_CPU_STEP])
    gpu_gradients = 1.0 - np.where(gradients_moved, cpu_share, 0.0)
    breakdown["optimizer"] = np.maximum(
        *(
            (1.0 - cpu_share) * states * ADAM_STEP_BYTES_PER_PARAM / hbm
            + gpu_gradients * grads * GRAD_PASS_BYTES_PER_PARAM / hbm
            for states, grads in zip(p.optimizer_params, p.gradient_params, strict=True)
        )
    )
    # host-memory offload (mfukit.perf.offload): copies over the host link and the CPU optimizer step
    machine = p.machine
    breakdown["offload"] = offload_time(
        p.workload,
        g,
        machine.system,
        machine.accelerator,
        p.optimizer_params,
        passes,
        eff.cpu_optimizer_params_per_s_per_core,
    ).exposed_s
    breakdown["stragglers"] = np.zeros_like(head)
    ordered = {name: breakdown[name] for name in BREAKDOWN}
    step = np.sum(np.stack(list(ordered.values())), axis=0)
    ordered["stragglers"] = step * straggler_factor(g.world_size, eff.sync_jitter_cv)
    return _rates(p, ordered, step + ordered["stragglers"])


def straggler_factor(ranks: Ints, jitter_cv: float) -> Floats:
    """The share by which the slowest of ``ranks`` synchronised ranks exceeds a typical one when each rank's
    step time varies with coefficient of variation ``jitter_cv`` (clock and thermal throttling, OS and host
    noise, uneven network paths): every DP collective and pipeline hand-off waits for the slowest rank, and
    the expected maximum of n independent normal deviates is about sigma sqrt(2 ln n) (extreme-value
    asymptotics, Cramer 1946; the tail-at-scale effect of Dean and Barroso, CACM 2013). This is why MFU falls
    with scale at a fixed per-GPU layout; ``jitter_cv`` is fitted per GPU family on multi-node runs."""
    n = np.maximum(np.asarray(ranks, dtype=np.float64), 1.0)
    return np.asarray(jitter_cv * np.sqrt(2.0 * np.log(n)), dtype=np.float64)


def _rates(p: Prepared, breakdown: dict[str, Floats], step: Floats) -> StepEstimate:
    g = p.grid
    peak = p.machine.accelerator.peak_flops(p.workload.precision)
    gpus = g.world_size.astype(np.float64)
    tokens_per_step = (g.dp * g.num_microbatches * g.mbs * p.workload.seq_len).astype(np.float64)
    tokens_per_s = tokens_per_step / step
    return StepEstimate(
        step_time_s=step,
        breakdown_s=breakdown,
        mfu=p.model_flops_per_token * tokens_per_s / gpus / peak,
        hfu=p.hardware_flops_per_token * tokens_per_s / gpus / peak,
        model_flops_per_s_per_gpu=p.model_flops_per_token * tokens_per_s / gpus,
        tokens_per_s=tokens_per_s,
        compute_bound_s=p.executed_flops_per_token * tokens_per_step / gpus / peak,
    )


def estimate_steps(workload: Workload, grid: LayoutGrid, machine: Machine) -> StepEstimate:
    """Step time and MFU of every layout of ``grid`` on ``machine``."""
    return evaluate(prepare(workload, grid, machine))
