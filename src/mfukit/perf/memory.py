"""Per-GPU peak memory of one training step, as a named breakdown, and whether it fits in HBM.

What is counted, per GPU of the most loaded pipeline stage (the first stage holds the most in-flight
micro-batches and the embedding; the last holds the logits; the peak is the larger of the two):

* **Model states** of mixed-precision Adam under each sharding convention (``optimizer_states``):
  :mod:`mfukit.perf.model_states`.
* **Activations** (:mod:`mfukit.perf.activations`), multiplied by the micro-batches in flight
  (:func:`in_flight_microbatches`), plus the first stage's embedding inputs and the last stage's
  logits and loss buffers.
* **FP8 weight copies** (``fp8_weights``): Transformer Engine with 16-bit primary weights quantizes each
  GEMM weight once per step and keeps the FP8 copy and its transpose across the step's micro-batches
  (``Linear.forward``: ``cache_name = "weight"`` whenever Megatron passes ``is_first_microbatch``, i.e.
  unless ``--disable-parameter-transpose-cache``; not under FSDP): 2 B per GEMM weight
  (:data:`mfukit.perf.model_states.FP8_WEIGHT_COPY_BYTES`). FP8 primary weights (``--fp8-param-gather``, TE ``fp8_model_init``; the
  NeMo FP8 recipes) replace the 16-bit weight by 1 B of FP8 data and 1 B of transpose: as many bytes as
  16-bit weights, no copies. torchao's Float8Linear (torchtitan) casts per GEMM and keeps no copy, also when
  it casts each FSDP shard to FP8 before the all-gather (``gathered``; the gathered units are kept at 16 bits
  here, the conservative side).
* **Buffers and overheads** named one by one: ZeRO-3/FSDP gathered parameters, framework communication
  buckets, NCCL's own buffers per communicator, the CUDA context and allocator fragmentation
  (allowances in ``data/memory_overheads.toml``, each with its source). With
  ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` (``expandable_segments``; NeMo's, Megatron-Bridge's and
  torchtitan's launch scripts set it) the allocator maps and unmaps physical pages inside one growing segment
  per stream, so free memory is never stranded between segments and no fragmentation allowance is added.

Three totals: ``allocated_bytes`` (what ``torch.cuda.max_memory_allocated`` sees), ``reserved_bytes``
(plus fragmentation: ``max_memory_reserved``) and ``total_bytes`` (plus CUDA context and NCCL: what
``nvidia-smi`` sees, compared with HBM by ``fits``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import date
from functools import cache
from pathlib import Path
from typing import Literal

from pydantic import Field

from mfukit.core.model import ModelSpec
from mfukit.core.parallelism import Parallelism, split_stage_layers
from mfukit.core.scenario import (
    NormKernel,
    OptimizerStepDevice,
    Precision,
    parse_headroom,
    read_document,
    stack_alias,
)
from mfukit.core.schema import Bytes, Strict, validate_as
from mfukit.errors import InputError
from mfukit.perf.activations import (
    KERNELS_NAMES,
    ActivationShape,
    Kernels,
    SelectiveRecompute,
    embedding_input_bytes,
    fused_unless_eager,
    layer_activation_bytes,
    layer_input_bytes,
    logits_and_loss_bytes,
    recomputed_share,
)
from mfukit.perf.model_states import (
    FP8_WEIGHT_COPY_BYTES,
    FP8_WEIGHTS_NAMES,
    FP32_BYTES,
    GRADIENTS_FOLLOW_CPU_STEP,
    PARAMETER_SHARDINGS,
    Fp8Weights,
    MainGrads,
    Sharding,
    StateBytesPerParam,
    fp8_weights_with_gather,
    fsdp_shard_ranks,
    gradient_reduce_bytes,
    sharding_of,
    state_bytes_per_param,
    weight_bytes_per_param,
)

OVERHEADS_FILE = Path(__file__).parent / "data" / "memory_overheads.toml"
STACKS_FILE = Path(__file__).parent / "data" / "memory_stacks.toml"
StageKind = Literal["first", "middle", "last", "only"]


class _Allowance(Strict):
    value: Bytes | float
    what: str
    url: str
    retrieved: date


class MemoryOverheads(Strict):
    """Planning allowances for memory outside the model's tensors (see ``data/memory_overheads.toml``)."""

    cuda_context: _Allowance
    nccl_buffer_per_communicator: _Allowance
    allocator_fragmentation: _Allowance
    deepspeed_reduce_bucket: _Allowance = Field(description="elements")
    hbm_headroom: _Allowance = Field(
        description="share of HBM a plan keeps free (cluster.hbm_headroom default)"
    )


@cache
def default_overheads() -> MemoryOverheads:
    return validate_as(MemoryOverheads, read_document(OVERHEADS_FILE), source=str(OVERHEADS_FILE))


class StackMemory(Strict):
    """What a software stack does that changes memory (one entry of ``data/memory_stacks.toml``)."""

    kernels: Kernels
    fp8_weights: Fp8Weights
    fp8_all_gather: bool = False  # it can all-gather its weights in FP8 (training.fp8_all_gather)
    fp8_main_grads: MainGrads = "fp32"
    expandable_segments: bool
    fused_cross_entropy: bool | None = None  # None: as the kernels
    fused_norm: bool | None = None  # None: as the kernels
    selective_recompute: SelectiveRecompute = "core-attention"
    what: str
    url: str
    retrieved: date


@cache
def stack_memory_table() -> dict[str, StackMemory]:
    raw = read_document(STACKS_FILE)
    return {
        name: validate_as(StackMemory, entry, source=f"{STACKS_FILE} [{name}]") for name, entry in raw.items()
    }


def headroom_bytes(headroom: str | None, hbm_bytes: float, overheads: MemoryOverheads | None = None) -> float:
    """HBM to keep free: ``cluster.hbm_headroom`` ("5%" of HBM or a size such as "4GiB"), else the default
    share of ``data/memory_overheads.toml``."""
    if headroom is None:
        return float((overheads or default_overheads()).hbm_headroom.value) * hbm_bytes
    kind, value = parse_headroom(headroom)
    return value * hbm_bytes if kind == "share" else value


def stack_memory(framework: str) -> StackMemory | None:
    """The memory behaviour of ``framework`` (its own entry, else that of the stack its name folds into:
    ``llm-foundry`` has fused kernels of its own though it runs as ``fsdp``), or None for a stack not listed."""
    table = stack_memory_table()
    return table.get(framework) or table.get(stack_alias(framework))


def stack_memory_fields(
    framework: str, norm: NormKernel | None = None, compiled: bool = False, fp8_all_gather: bool | None = None
) -> dict[str, object]:
    """The Workload fields of ``framework``'s memory behaviour (kernels, FP8 weights and main gradients,
    allocator, loss kernel, what selective recompute keeps); empty for a stack not listed (the Workload
    defaults). ``norm`` (``training.norm``), when given, says which norm kernel the run used instead.
    ``compiled`` (``training.compile``): torch.compile's Inductor fuses an eager stack's element-wise ops, and
    AOTAutograd's min-cut partitioner saves for the backward what a fused kernel keeps, recomputing the
    element-wise intermediates instead of storing them (PyTorch docs, "torch.compile: min-cut
    rematerialization"): its kernels are read as fused, as the step time reads them
    (``step_time.elementwise_kernels``). ``fp8_all_gather`` (``training.fp8_all_gather``), when given, says
    whether the weights' all-gathers moved FP8 (:func:`model_states.fp8_weights_with_gather`)."""
    stack = stack_memory(framework)
    given: dict[str, object] = {} if norm is None else {"fused_norm": norm == "fused"}
    if fp8_all_gather and not (stack is not None and stack.fp8_all_gather):
        able = ", ".join(name for name, entry in stack_memory_table().items() if entry.fp8_all_gather)
        raise InputError(
            f"the {framework} stack has no FP8 all-gather of its weights",
            field="training.fp8_all_gather",
            expected=f"false, or a stack that has one ({able})",
        )
    if stack is None:
        return given
    return {
        "kernels": "fused" if compiled and stack.kernels == "eager" else stack.kernels,
        "fp8_weights": fp8_weights_with_gather(stack.fp8_weights, fp8_all_gather),
        "fp8_main_grads": stack.fp8_main_grads,
        "expandable_segments": stack.expandable_segments,
        "fused_cross_entropy": stack.fused_cross_entropy,
        "fused_norm": stack.fused_norm,
        "selective_recompute": stack.selective_recompute,
    } | given


def fp8_weight_copy_bytes_per_param(sharding: Sharding, shape: StepShape) -> float:
    """Bytes per GEMM weight of the FP8 copies a stack keeps across micro-batches (module docstring): TE's
    cached copy and transpose with 16-bit primary weights; none under ZeRO-3/FSDP (TE caches no gathered
    weight), with FP8 primary weights, for torchao's per-GEMM casts, or without FP8."""
    cached = shape.precision == "fp8" and shape.fp8_weights == "cached"
    return FP8_WEIGHT_COPY_BYTES if cached and sharding not in PARAMETER_SHARDINGS else 0.0


def fragmentation_frac(shape: StepShape, allowances: MemoryOverheads) -> float:
    """The caching allocator's reserved/allocated - 1: none with expandable segments (module docstring)."""
    return 0.0 if shape.expandable_segments else float(allowances.allocator_fragmentation.value)


def attention_names(flash_attention: bool, attention_dropout: bool, hidden_dropout: bool) -> str:
    """The attention kernel and the dropout masks a step keeps, as the assumptions line says them (flash
    attention regenerates its dropout mask in backward: it keeps none)."""
    kernel = "flash attention" if flash_attention else "eager attention (s^2 scores stored)"
    masks = (("attention", attention_dropout and not flash_attention), ("hidden", hidden_dropout))
    kept = [name for name, keeps in masks if keeps]
    return f"{kernel}, {' and '.join(kept)} dropout masks" if kept else f"{kernel}, no dropout masks"


def memory_note(shape: StepShape) -> str:
    """What the memory model took the stack to do, as one line for a report's assumptions."""
    # an eager stack's fused kernels of its own (nanotron's Triton norm, its in-place loss)
    overrides = [
        f"but a {name}"
        for name, stated in (
            ("fused norm (its input kept, not its output)", shape.fused_norm),
            ("fused in-place cross-entropy", shape.fused_cross_entropy),
        )
        if shape.kernels == "eager" and fused_unless_eager(stated, shape.kernels)
    ]
    parts = [
        " ".join([KERNELS_NAMES[shape.kernels], *overrides]),
        attention_names(shape.flash_attention, shape.attention_dropout, shape.hidden_dropout),
    ]
    if shape.precision == "fp8":
        parts.append(FP8_WEIGHTS_NAMES[shape.fp8_weights])
        if shape.fp8_main_grads == "16-bit":
            parts.append("bf16 main gradients (grad_reduce_in_fp32 off)")
    parts.append(
        "expandable-segments allocator (no fragmentation allowance)"
        if shape.expandable_segments
        else "default caching allocator"
    )
    return "memory: " + ", ".join(parts)


def held_state_bytes_per_param(sharding: Sharding, shard_ranks: int, shape: StepShape) -> StateBytesPerParam:
    """:func:`state_bytes_per_param` less what ``shape`` offloads to host memory.

    Optimizer offload (DeepSpeed ZeRO-Offload, Ren et al., ATC'21; Megatron ``--optimizer-cpu-offload
    --optimizer-offload-fraction``) moves that share of the fp32 master weights and Adam moments to the host,
    and, when the CPU steps them, for DeepSpeed ZeRO its fp32 gradient partition too
    (``estimate_zero2_model_states_mem_needs`` with ``cpu_offload``: 2P on the GPU; ZeRO-3: 2P/N): ZeRO-2/3
    stream each reduced gradient to the host, ZeRO-1 keeps its whole 16-bit gradients; Megatron keeps its
    gradient buffer on the GPU. States stepped on the GPU (``offload_optimizer_step = "gpu"``) leave the
    gradients where they are; they are counted off the GPU at the peak, the end of the forward passes, when
    they are on the host. They come back during the backward as it frees stored activations (DeepCompile's
    ``offload_adam_states`` reloads them there); a step whose returning states outgrow the activations freed
    would peak at the optimizer step instead, which this model does not count. Parameter offload
    (ZeRO-Infinity ``offload_param``; FSDP2 ``CPUOffloadPolicy``, which moves the gradient shards with them)
    moves that share of the sharded 16-bit parameters: it needs parameters sharded (ZeRO-3, FSDP); other
    layouts keep whole weights on the GPU."""
    state = state_bytes_per_param(sharding, shard_ranks, shape.precision, shape.fp8_main_grads)
    keep_optimizer = 1.0 - shape.offload_optimizer
    gradients = state.gradients
    fp32_partition = 0.0 if shape.precision == "fp32" else FP32_BYTES / shard_ranks
    if shape.offload_optimizer_step == "cpu" and sharding == "zero-1":
        gradients -= shape.offload_optimizer * fp32_partition
    elif shape.offload_optimizer_step == "cpu" and sharding in GRADIENTS_FOLLOW_CPU_STEP:
        gradients *= keep_optimizer
    weights = state.weights
    if sharding in PARAMETER_SHARDINGS:
        weights *= 1.0 - shape.offload_params
        if sharding != "zero-3":
            gradients *= 1.0 - shape.offload_params
    return StateBytesPerParam(weights, gradients, state.optimizer * keep_optimizer)


# ---------------------------------------------------------------------------------------------- pipeline


def in_flight_microbatches(pp: int, vpp: int, rank: int, num_microbatches: int) -> float:
    """Micro-batches whose activations pipeline ``rank`` holds at its peak, in units of the whole stage.

    1F1B (Narayanan et al., SC21, §2.2): rank r runs p - r - 1 warm-up forwards, then one more before
    its first backward, so it holds min(p - r, m). Interleaved 1F1B with v model chunks (Megatron
    ``forward_backward_pipelining_with_interleaving``): 2(p - r - 1) + (v - 1)p + 1 chunk micro-batches,
    each 1/v of the stage; for r = 0 that is p·(1 + (p - 1)/(p·v)) (Korthikanti et al. 2022, §4.2.3).
    """
    m = num_microbatches
    if pp == 1:
        return 1.0
    if vpp == 1:
        return float(min(pp - rank, m))
    chunks = 2 * (pp - rank - 1) + (vpp - 1) * pp + 1
    return min(chunks, m * vpp) / vpp


# ---------------------------------------------------------------------------------------------- result


@dataclass(frozen=True)
class StageMemory:
    """Peak memory of one GPU of one pipeline stage, by named part (bytes)."""

    stage: StageKind
    weights_bytes: float
    gradients_bytes: float
    optimizer_states_bytes: float
    activations_bytes: float
    recompute_working_set_bytes: float
    embedding_bytes: float
    logits_and_loss_bytes: float
    parameter_gather_buffers_bytes: float
    communication_buffers_bytes: float
    fp8_weight_copies_bytes: float
    allocator_fragmentation_bytes: float
    nccl_buffers_bytes: float
    cuda_context_bytes: float

    @property
    def allocated_bytes(self) -> float:
        """Tensors in the PyTorch caching allocator (``torch.cuda.max_memory_allocated``)."""
        return (
            self.weights_bytes
            + self.gradients_bytes
            + self.optimizer_states_bytes
            + self.activations_bytes
            + self.recompute_working_set_bytes
            + self.embedding_bytes
            + self.logits_and_loss_bytes
            + self.parameter_gather_buffers_bytes
            + self.communication_buffers_bytes
            + self.fp8_weight_copies_bytes
        )

    @property
    def reserved_bytes(self) -> float:
        """What the caching allocator holds (``torch.cuda.max_memory_reserved``)."""
        return self.allocated_bytes + self.allocator_fragmentation_bytes

    @property
    def total_bytes(self) -> float:
        """Everything on the device, as ``nvidia-smi`` shows it."""
        return self.reserved_bytes + self.nccl_buffers_bytes + self.cuda_context_bytes

    @property
    def required_bytes(self) -> float:
        """What must fit in HBM for the step to run: everything but the fragmentation allowance. When a
        ``cudaMalloc`` fails, PyTorch's caching allocator frees its cached unused blocks and retries
        (``num_alloc_retries`` in ``torch.cuda.memory_stats``; PyTorch CUDA memory-management notes), so a
        run whose allocated peak fits does run, slower near the limit; the allowance is what it reserves on
        top when HBM is free (``total_bytes``, what ``nvidia-smi`` shows)."""
        return self.total_bytes - self.allocator_fragmentation_bytes

    def parts(self) -> dict[str, float]:
        """The breakdown as ``{name: bytes}`` in a fixed order (names as a person reads them)."""
        return {
            "weights": self.weights_bytes,
            "gradients": self.gradients_bytes,
            "optimizer states": self.optimizer_states_bytes,
            "activations": self.activations_bytes,
            "recompute working set": self.recompute_working_set_bytes,
            "embedding inputs": self.embedding_bytes,
            "logits and loss": self.logits_and_loss_bytes,
            "parameter gather buffers": self.parameter_gather_buffers_bytes,
            "communication buffers": self.communication_buffers_bytes,
            "FP8 weight copies": self.fp8_weight_copies_bytes,
            "allocator fragmentation": self.allocator_fragmentation_bytes,
            "NCCL buffers": self.nccl_buffers_bytes,
            "CUDA context": self.cuda_context_bytes,
        }


@dataclass(frozen=True)
class MemoryEstimate:
    """The per-GPU peak (the largest of the first, the second and the last pipeline stage) and their
    breakdowns. The second (``middle``, pp > 2) holds the most micro-batches in flight of the middle stages;
    with an uneven split (fewer layers on the first and last) it can hold the most activations."""

    sharding: Sharding
    first: StageMemory
    last: StageMemory
    middle: StageMemory | None = None

    @property
    def stages(self) -> list[StageMemory]:
        """Each stage once (one for a single stage, whose first and last are the same)."""
        if self.first is self.last:
            return [self.first]
        return [self.first, *([self.middle] if self.middle is not None else []), self.last]

    @property
    def peak(self) -> StageMemory:
        return max(self.stages, key=lambda stage: stage.total_bytes)

    @property
    def peak_bytes(self) -> float:
        return self.peak.total_bytes

    @property
    def required_bytes(self) -> float:
        """The largest stage's :attr:`StageMemory.required_bytes`."""
        return max(stage.required_bytes for stage in self.stages)

    def fits(self, hbm_bytes: float) -> bool:
        """Whether the step runs in ``hbm_bytes``: its required bytes fit (the allocator gives back its cache
        before it fails)."""
        return self.required_bytes <= hbm_bytes


@dataclass(frozen=True)
class StepShape:
    """What one step feeds one GPU: sequence length, micro-batch, micro-batches per step, precision."""

    seq_len: int
    micro_batch_size: int = 1
    num_microbatches: int | None = None  # per pipeline per step; None: at least pp (the worst case)
    precision: Precision = "bf16"
    flash_attention: bool = True
    attention_dropout: bool = (
        False  # a mask on the attention probabilities (stored with eager attention only)
    )
    hidden_dropout: bool = False  # masks after attention, the MLP and the embedding
    kernels: Kernels = "fused"
    fp8_weights: Fp8Weights = "transient"
    fp8_main_grads: MainGrads = "fp32"
    expandable_segments: bool = False  # PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
    fused_cross_entropy: bool | None = None  # None: as the kernels (fused unless eager)
    fused_norm: bool | None = None  # None: as the kernels (fused unless eager)
    selective_recompute: SelectiveRecompute = "core-attention"
    # shares (0..1) kept in host memory: optimizer states, parameter shards, stored layer activations
    offload_optimizer: float = 0.0
    offload_params: float = 0.0
    offload_activations: float = 0.0
    offload_optimizer_step: OptimizerStepDevice = "cpu"  # "gpu": the gradients stay on the GPU
    gpus_per_node: int = 8
    # Uneven pipeline splits (Megatron --decoder-first/last-pipeline-num-layers; Llama 3 took one layer
    # off the first and last stage): layers on the first and last stage; None = num_layers / pp.
    first_stage_layers: int | None = None
    last_stage_layers: int | None = None


# ---------------------------------------------------------------------------------------------- the model


@dataclass(frozen=True)
class StageParams:
    dense: float  # parameters replicated across EP (attention, dense MLPs, norms, embeddings), per GPU
    expert: float  # routed-expert parameters, per GPU
    largest_unit: float  # the largest FSDP/ZeRO-3 unit (a layer or the embedding), per GPU
    gemm: float = 0.0  # weights of the layers' GEMMs (attention and MLP; not norms, embedding, head), per GPU
    # dense parameters outside the layers (embedding, output layer, final norm), per GPU: FSDP's root unit
    outside_layers: float = 0.0


def stage_params(
    model: ModelSpec, layout: Parallelism, layers: range, *, first: bool, last: bool
) -> StageParams:
    t = layout.tp
    norms = model.layer_params(moe_layer=False) - model.attention_params() - model.dense_mlp_params()
    dense = expert = largest = gemm = 0.0
    for index in layers:
        layer_dense = model.attention_params() / t + norms
        layer_expert = 0.0
        moe = model.moe
        if moe is not None and model.is_moe_layer(index):
            routed = moe.num_experts * model.routed_expert_params()
            layer_dense += (model.moe_layer_params() - routed) / t
            layer_expert = routed / (layout.ep * t)  # expert tensor parallel = tp (Megatron-Core default)
        else:
            layer_dense += model.dense_mlp_params() / t
        dense += layer_dense
        expert += layer_expert
        gemm += layer_dense + layer_expert - norms
        largest = max(largest, layer_dense + layer_expert)
    in_layers = dense
    vocab = model.vocab_size * model.hidden_size / t  # vocab-parallel embedding and output layer
    if first:
        embedding = model.embedding_params() / t
        dense += embedding
        largest = max(largest, embedding)
    if last:
        # Untied: the output layer. Tied with pp > 1: Megatron keeps a copy of the embedding on the last stage.
        if not model.tie_word_embeddings or not first:
            dense += vocab
            largest = max(largest, vocab)
        dense += model.output_params() - (
            0 if model.tie_word_embeddings else model.vocab_size * model.hidden_size
        )
    return StageParams(dense, expert, largest, gemm, dense - in_layers)


def parameters_per_gpu(model: ModelSpec, layout: Parallelism, shape: StepShape) -> tuple[float, float]:
    """Dense and routed-expert parameters one GPU computes with, before ZeRO/FSDP sharding, on the more
    loaded of the first and last pipeline stage."""
    stages = {0, layout.pp - 1}
    held = [
        stage_params(
            model,
            layout,
            stage_layers(model.num_hidden_layers, layout.pp, rank, shape),
            first=rank == 0,
            last=rank == layout.pp - 1,
        )
        for rank in stages
    ]
    most = max(held, key=lambda params: params.dense + params.expert)
    return most.dense, most.expert


def stage_layers(num_layers: int, pp: int, rank: int, shape: StepShape) -> range:
    """The layer indices pipeline ``rank`` holds (the first, the second, a middle one, or the last), split as the
    step time splits them (:func:`~mfukit.core.parallelism.split_stage_layers`)."""
    if pp == 1:
        return range(num_layers)
    first_count, _, last_count = split_stage_layers(
        num_layers, pp, shape.first_stage_layers, shape.last_stage_layers
    )
    first, last = int(first_count), int(last_count)
    if rank == 0:
        return range(first)
    if rank == pp - 1:
        return range(num_layers - last, num_layers)
    middle = (num_layers - first - last) // (pp - 2)  # the rest split evenly over the middle stages
    return range(first + (rank - 1) * middle, first + rank * middle)


def communicators(layout: Parallelism) -> int:
    """Process groups with more than one rank that this GPU belongs to (each owns NCCL buffers)."""
    sizes = (layout.tp, layout.pp, layout.dp * layout.cp, layout.cp, layout.ep)
    return sum(1 for size in sizes if size > 1)


def activation_shape(layout: Parallelism, shape: StepShape) -> ActivationShape:
    """The activation model's view of one micro-batch on one GPU of ``layout``."""
    return ActivationShape(
        seq_len=shape.seq_len,
        micro_batch_size=shape.micro_batch_size,
        tp=layout.tp,
        cp=layout.cp,
        sequence_parallel=layout.sequence_parallel,
        recompute=layout.recompute,
        flash_attention=shape.flash_attention,
        attention_dropout=shape.attention_dropout,
        hidden_dropout=shape.hidden_dropout,
        act_bytes=FP32_BYTES if shape.precision == "fp32" else 2.0,
        kernels=shape.kernels,
        fp8=shape.precision == "fp8",
        fused_cross_entropy=shape.fused_cross_entropy,
        fused_norm=shape.fused_norm,
        selective=shape.selective_recompute,
    )


def estimate_memory(
    model: ModelSpec,
    layout: Parallelism,
    shape: StepShape,
    overheads: MemoryOverheads | None = None,
) -> MemoryEstimate:
    """Peak memory per GPU for ``model`` trained with ``layout`` on ``shape``."""
    allowances = overheads or default_overheads()
    sharding = sharding_of(layout)
    m = shape.num_microbatches if shape.num_microbatches is not None else layout.pp * layout.vpp
    act = activation_shape(layout, shape)

    def stage(kind: StageKind, rank: int) -> StageMemory:
        return _stage_memory(model, layout, shape, allowances, sharding, kind, rank, m, act)

    if layout.pp == 1:
        only = stage("only", 0)
        return MemoryEstimate(sharding=sharding, first=only, last=only)
    middle = stage("middle", 1) if layout.pp > 2 else None
    return MemoryEstimate(sharding, stage("first", 0), stage("last", layout.pp - 1), middle)


def _stage_memory(
    model: ModelSpec,
    layout: Parallelism,
    shape: StepShape,
    allowances: MemoryOverheads,
    sharding: Sharding,
    kind: StageKind,
    rank: int,
    num_microbatches: int,
    act: ActivationShape,
) -> StageMemory:
    layers = stage_layers(model.num_hidden_layers, layout.pp, rank, shape)
    first, last = rank == 0, rank == layout.pp - 1
    params = stage_params(model, layout, layers, first=first, last=last)
    dense_ranks = (
        fsdp_shard_ranks(layout, shape.gpus_per_node) if sharding == "fsdp-hybrid" else layout.dp * layout.cp
    )
    expert_ranks = max(1, dense_ranks // layout.ep)
    dense_state = held_state_bytes_per_param(sharding, dense_ranks, shape)
    expert_state = held_state_bytes_per_param(sharding, expert_ranks, shape)

    in_flight = in_flight_microbatches(layout.pp, layout.vpp, rank, num_microbatches)
    # full recompute of part of the layers (recompute_layers): those keep their inputs, the rest store all
    share = float(
        recomputed_share(layout.recompute == "full", layout.recompute_layers or 0, layout.vpp, len(layers))
    )
    rest = replace(act, recompute="none") if layout.recompute == "full" else act
    # activation offload (Megatron/NeMo --cpu-offloading-num-layers, TE get_cpu_offload_context) keeps that
    # share of the layers' stored activations in host memory until their backward
    stored_per_microbatch = (1.0 - shape.offload_activations) * sum(
        share * layer_activation_bytes(model, act, moe_layer=model.is_moe_layer(i), stored=True)
        + (1.0 - share) * layer_activation_bytes(model, rest, moe_layer=model.is_moe_layer(i), stored=True)
        for i in layers
    )
    working_set = 0.0
    if layout.recompute == "full" and len(layers):
        # Backward re-runs one layer's forward at a time: its full activations exist while it runs
        # (Chen et al. 2016; Korthikanti et al. 2022 §5). Its checkpointed input is already counted.
        index = layers[0]
        working_set = layer_activation_bytes(
            model, act, moe_layer=model.is_moe_layer(index), stored=False
        ) - layer_input_bytes(model, act)
    w = weight_bytes_per_param(shape.precision)
    gather = 0.0
    if sharding in PARAMETER_SHARDINGS:
        # The unit being computed and the one prefetched are unsharded in the 16-bit dtype, and one unit's
        # gradient exists unsharded before its reduce-scatter (FSDP2 implicit prefetch; DeepSpeed's
        # estimate_zero3_model_states_mem_needs counts 4 B x largest layer for the same buffers).
        gather = params.largest_unit * (
            2 * w + gradient_reduce_bytes(layout, shape.precision, shape.fp8_main_grads)
        )
    comm = framework_buffers(model, layout, sharding, act, w, allowances)
    fp8_copies = params.gemm * fp8_weight_copy_bytes_per_param(sharding, shape)
    allocated = (
        params.dense * dense_state.total
        + params.expert * expert_state.total
        + stored_per_microbatch * in_flight
        + working_set
        + (embedding_input_bytes(model, act) * in_flight if first else 0.0)
        + (logits_and_loss_bytes(model, act) if last else 0.0)
        + gather
        + comm
        + fp8_copies
    )
    fragmentation = fragmentation_frac(shape, allowances) * allocated
    return StageMemory(
        stage=kind,
        weights_bytes=params.dense * dense_state.weights + params.expert * expert_state.weights,
        gradients_bytes=params.dense * dense_state.gradients + params.expert * expert_state.gradients,
        optimizer_states_bytes=params.dense * dense_state.optimizer + params.expert * expert_state.optimizer,
        activations_bytes=stored_per_microbatch * in_flight,
        recompute_working_set_bytes=working_set,
        embedding_bytes=embedding_input_bytes(model, act) * in_flight if first else 0.0,
        logits_and_loss_bytes=logits_and_loss_bytes(model, act) if last else 0.0,
        parameter_gather_buffers_bytes=gather,
        communication_buffers_bytes=comm,
        fp8_weight_copies_bytes=fp8_copies,
        allocator_fragmentation_bytes=fragmentation,
        nccl_buffers_bytes=communicators(layout) * float(allowances.nccl_buffer_per_communicator.value),
        cuda_context_bytes=float(allowances.cuda_context.value),
    )


def framework_buffers(
    model: ModelSpec,
    layout: Parallelism,
    sharding: Sharding,
    act: ActivationShape,
    weight_bytes: float,
    allowances: MemoryOverheads,
) -> float:
    """Communication buffers the framework allocates in the caching allocator.

    DeepSpeed ZeRO-1/2 reduce gradients through a 16-bit bucket of ``reduce_bucket_size`` elements;
    Megatron reduces in place in its contiguous gradient buffer (nothing extra). Pipeline stages send and
    receive one activation tensor each way; sequence parallelism all-gathers one layer input; MoE
    all-to-all dispatch holds the routed tokens before and after the exchange.
    """
    total = 0.0
    if sharding in {"zero-1", "zero-2"}:
        total += float(allowances.deepspeed_reduce_bucket.value) * weight_bytes
    hidden = layer_input_bytes(model, act)
    if layout.pp > 1:
        total += 2 * hidden
    if layout.tp > 1 and layout.sequence_parallel:
        total += hidden * layout.tp
    if model.moe is not None:
        total += 2 * hidden * model.moe.num_experts_per_tok
    return total
