"""What a software stack changes in memory: Transformer Engine's FP8 saved inputs and weight copies, the
expandable-segments allocator, the attention kernel; and the NeMo FP8 recipes that ran on H100 fit."""

from __future__ import annotations

import numpy as np
import pytest

from mfukit import catalog
from mfukit.core.parallelism import Parallelism
from mfukit.core.scenario import TrainingSection
from mfukit.errors import InputError
from mfukit.perf.activations import ActivationShape, layer_activation_bytes, logits_and_loss_bytes
from mfukit.perf.inputs import training_workload
from mfukit.perf.layouts import Workload, grid_of, step_shape
from mfukit.perf.memory import StepShape, estimate_memory, stack_memory, stack_memory_table
from mfukit.perf.memory_grid import grid_memory
from mfukit.perf.model_states import (
    FP8_WEIGHT_COPY_BYTES,
    fp8_weights_with_gather,
    gathered_weight_bytes,
    gradient_reduce_bytes,
    state_bytes_per_param,
)
from mfukit.perf.step_time import machine_for, prepare

LLAMA_8B = catalog.model("llama3.1-8b")
LLAMA_70B = catalog.model("llama3.1-70b")
HBM_H100 = catalog.accelerator("h100-sxm").hbm_bytes


def test_te_fp8_keeps_gemm_inputs_in_fp8() -> None:
    """TE quantizes each GEMM input and saves the FP8 copy: the two norm outputs (QKV and FC1 inputs) and
    the FC2 input drop from 2 B to 1 B; the projection adds a 1 B copy of the attention output, which the
    attention keeps in 16 bits for its own backward."""
    s, t = 8192, 4
    h, f = LLAMA_70B.hidden_size, LLAMA_70B.intermediate_size
    context = LLAMA_70B.num_attention_heads * LLAMA_70B.head_size
    common = {"seq_len": s, "micro_batch_size": 1, "tp": t, "sequence_parallel": True, "kernels": "te"}
    bf16 = layer_activation_bytes(LLAMA_70B, ActivationShape(**common))  # type: ignore[arg-type]
    fp8 = layer_activation_bytes(LLAMA_70B, ActivationShape(fp8=True, **common))  # type: ignore[arg-type]
    saved = s * (2 * h / t + f / t - context / t)  # bytes: one byte less per element of each, one more of O
    assert bf16 - fp8 == pytest.approx(saved)


@pytest.mark.parametrize("kernels", ["fused", "eager"])
def test_fp8_without_te_keeps_16_bit_inputs(kernels: str) -> None:
    common = {"seq_len": 4096, "micro_batch_size": 1, "kernels": kernels}
    assert layer_activation_bytes(LLAMA_8B, ActivationShape(fp8=True, **common)) == pytest.approx(  # type: ignore[arg-type]
        layer_activation_bytes(LLAMA_8B, ActivationShape(**common))  # type: ignore[arg-type]
    )


def _shape(**fields: object) -> StepShape:
    return StepShape(seq_len=4096, num_microbatches=8, **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("fp8_weights", "precision", "layout", "per_param"),
    [
        ("cached", "fp8", Parallelism(tp=2, dp=4, zero=1), FP8_WEIGHT_COPY_BYTES),
        ("cached", "bf16", Parallelism(tp=2, dp=4, zero=1), 0.0),  # no FP8 GEMMs, no copies
        ("cached", "fp8", Parallelism(tp=2, dp=4, fsdp="full"), 0.0),  # TE caches no gathered weight
        ("primary", "fp8", Parallelism(tp=2, dp=4, zero=1), 0.0),
        ("transient", "fp8", Parallelism(tp=2, dp=4, zero=1), 0.0),
    ],
)
def test_fp8_weight_copies(fp8_weights: str, precision: str, layout: Parallelism, per_param: float) -> None:
    stage = estimate_memory(LLAMA_8B, layout, _shape(precision=precision, fp8_weights=fp8_weights)).peak
    layer = LLAMA_8B.attention_params() + LLAMA_8B.dense_mlp_params()
    expected = per_param * LLAMA_8B.num_hidden_layers * layer / layout.tp
    assert stage.fp8_weight_copies_bytes == pytest.approx(expected)


def test_expandable_segments_leave_no_fragmentation() -> None:
    layout = Parallelism(tp=2, dp=4, zero=1)
    default = estimate_memory(LLAMA_8B, layout, _shape()).peak
    expandable = estimate_memory(LLAMA_8B, layout, _shape(expandable_segments=True)).peak
    assert default.allocator_fragmentation_bytes > 0
    assert expandable.allocator_fragmentation_bytes == 0
    assert expandable.allocated_bytes == pytest.approx(default.allocated_bytes)


def test_every_stack_entry_is_sourced() -> None:
    for name, stack in stack_memory_table().items():
        assert stack.url.startswith("https://"), name
        assert stack.what, name
    assert stack_memory("no-such-stack") is None


def test_the_stack_sets_the_workload_memory_fields() -> None:
    training = TrainingSection(seq_len=8192, precision="fp8", framework="nemo")
    workload = training_workload(LLAMA_70B, training, 128)
    assert (workload.kernels, workload.fp8_weights, workload.expandable_segments) == ("te", "primary", True)
    titan = training_workload(LLAMA_8B, training.model_copy(update={"framework": "torchtitan"}), 128)
    assert (titan.kernels, titan.fp8_weights, titan.expandable_segments) == ("eager", "transient", True)
    unknown = training_workload(LLAMA_8B, training.model_copy(update={"framework": "in-house"}), 128)
    assert (unknown.kernels, unknown.fp8_weights) == ("fused", "transient")


def test_nemo_fp8_recipes_keep_and_reduce_their_main_gradients_in_16_bits() -> None:
    # scripts/performance/helpers.py sets grad_reduce_in_fp32 = False for every FP8 recipe, not for bf16
    nemo = TrainingSection(seq_len=8192, precision="fp8", framework="nemo")
    fp8 = training_workload(LLAMA_70B, nemo, 128)
    bf16 = training_workload(LLAMA_70B, nemo.model_copy(update={"precision": "bf16"}), 128)
    core = training_workload(LLAMA_70B, nemo.model_copy(update={"framework": "megatron-core"}), 128)
    dist_opt = Parallelism(tp=8, dp=16, zero=1)
    reduce = [gradient_reduce_bytes(dist_opt, w.precision, w.fp8_main_grads) for w in (fp8, bf16, core)]
    assert reduce == [2.0, 4.0, 4.0]
    # the gradient buffer is the reduction's dtype: 2 + 2 + 12/DP with the distributed optimizer
    states = state_bytes_per_param("distributed-optimizer", 16, fp8.precision, fp8.fp8_main_grads)
    assert states.total == pytest.approx(2 + 2 + 12 / 16)
    # DeepSpeed ZeRO reduces its 16-bit gradients either way, Megatron-FSDP in fp32
    assert gradient_reduce_bytes(Parallelism(dp=16, zero=2, zero_impl="deepspeed"), "fp8", "fp32") == 2.0
    assert gradient_reduce_bytes(Parallelism(dp=16, fsdp="full"), "fp8", "16-bit") == 4.0

    # the memory model holds 2 B less per parameter, the step model reduces 2 B per gradient
    def shape(workload: Workload) -> StepShape:
        return step_shape(workload, dist_opt, micro_batch_size=1, num_microbatches=8, gpus_per_node=8)

    nemo_states = estimate_memory(LLAMA_70B, dist_opt, shape(fp8)).peak
    core_states = estimate_memory(LLAMA_70B, dist_opt, shape(core)).peak
    assert core_states.gradients_bytes == pytest.approx(2 * nemo_states.gradients_bytes)  # 4 B against 2 B
    grid = grid_of([dist_opt], model=LLAMA_70B, micro_batch_size=[1], num_microbatches=[8])
    machine = machine_for(catalog.system("dgx-h100"), catalog.accelerator("h100-sxm"), 128)
    assert (
        prepare(fp8, grid, machine).comm.dp_first.grad_sync_s[0]
        < prepare(core, grid, machine).comm.dp_first.grad_sync_s[0]
    )
    # --fp8-param-gather: FP8 primary weights are all-gathered as FP8, 16-bit ones in 16 bits
    assert gathered_weight_bytes(fp8.precision, fp8.fp8_weights) == 1.0
    assert gathered_weight_bytes(core.precision, core.fp8_weights) == 2.0
    assert gathered_weight_bytes(bf16.precision, bf16.fp8_weights) == 2.0


def test_attention_eager_stores_the_scores() -> None:
    flash = training_workload(LLAMA_8B, TrainingSection(seq_len=4096), 64)
    eager = training_workload(LLAMA_8B, TrainingSection(seq_len=4096, attention="eager"), 64)
    assert flash.flash_attention and not eager.flash_attention
    layout = Parallelism(tp=8, dp=8, zero=1)

    def peak(workload: Workload) -> float:
        shape = step_shape(workload, layout, micro_batch_size=1, num_microbatches=8, gpus_per_node=8)
        return estimate_memory(LLAMA_8B, layout, shape).peak.activations_bytes

    scores = 2 * 4096 * 4096 * LLAMA_8B.num_attention_heads / 8 * LLAMA_8B.num_hidden_layers  # 16-bit s^2
    assert peak(eager) - peak(flash) == pytest.approx(scores, rel=0.01)


@pytest.mark.parametrize(
    ("model", "layout", "micro_batches", "precision"),
    [
        # NeMo 25.09 performance summary, DGX-H100: Llama 3 70B FP8 on 64 GPUs, TP 4 PP 8 VP 5, GBS 128
        (LLAMA_70B, Parallelism(tp=4, pp=8, vpp=5, dp=2, sequence_parallel=True, zero=1), 64, "fp8"),
        # Llama 3 8B FP8 on 8 GPUs with Megatron-FSDP, GBS 128
        (LLAMA_8B, Parallelism(dp=8, fsdp="full"), 16, "fp8"),
        # NeMo's BF16 recipe for Llama 3 8B on 8 H100s: CP 2, distributed optimizer
        (LLAMA_8B, Parallelism(cp=2, dp=4, zero=1), 32, "bf16"),
    ],
)
def test_nemo_recipes_that_ran_fit(model, layout, micro_batches, precision) -> None:  # type: ignore[no-untyped-def]
    training = TrainingSection(seq_len=8192, precision=precision, framework="nemo")
    workload = training_workload(model, training, 128)
    shape = step_shape(workload, layout, micro_batch_size=1, num_microbatches=micro_batches, gpus_per_node=8)
    assert estimate_memory(model, layout, shape).fits(HBM_H100)


@pytest.mark.parametrize("framework", ["nemo", "megatron-core", "torchtitan"])
@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_grid_agrees_with_the_scalar_model(framework: str, precision: str) -> None:
    training = TrainingSection(seq_len=4096, precision=precision, framework=framework)
    workload = training_workload(LLAMA_8B, training, 256)
    layouts = [
        Parallelism(tp=2, pp=2, dp=2, sequence_parallel=True, zero=1),
        Parallelism(tp=1, pp=1, dp=8, zero=0),
        Parallelism(tp=2, pp=1, dp=4, fsdp="full", recompute="full"),
        Parallelism(tp=4, pp=2, dp=1, vpp=2, recompute="selective"),
    ]
    micro = [1, 2, 1, 1]
    counts = [64, 16, 64, 256]
    grid = grid_of(layouts, model=LLAMA_8B, micro_batch_size=micro, num_microbatches=counts)
    peaks = grid_memory(workload, grid, gpus_per_node=8).peak_bytes
    scalar = [
        estimate_memory(
            LLAMA_8B,
            layout,
            step_shape(workload, layout, micro_batch_size=b, num_microbatches=m, gpus_per_node=8),
        ).peak_bytes
        for layout, b, m in zip(layouts, micro, counts, strict=True)
    ]
    np.testing.assert_allclose(peaks, scalar, rtol=1e-9)


def test_torchtitan_selective_is_per_op_checkpointing() -> None:
    """torchtitan's op-level SAC keeps the layer input, wq, wv, w1 and w2 outputs (every other matmul), the
    SDPA output and its log-sum-exp; Megatron's selective keeps everything but the attention scores."""
    s, b = 8192, 2
    h, f, d = LLAMA_8B.hidden_size, LLAMA_8B.intermediate_size, LLAMA_8B.head_size
    heads, kv = LLAMA_8B.num_attention_heads, LLAMA_8B.kv_heads
    common = {"seq_len": s, "micro_batch_size": b, "kernels": "eager", "recompute": "selective"}
    op = layer_activation_bytes(LLAMA_8B, ActivationShape(selective="op", **common))  # type: ignore[arg-type]
    widths = h + heads * d + kv * d + heads * d + f + h
    assert op == pytest.approx(s * b * (2 * widths + 4 * heads))
    megatron = layer_activation_bytes(LLAMA_8B, ActivationShape(**common))  # type: ignore[arg-type]
    none = layer_activation_bytes(LLAMA_8B, ActivationShape(**(common | {"recompute": "none"})))  # type: ignore[arg-type]
    full = layer_activation_bytes(LLAMA_8B, ActivationShape(**(common | {"recompute": "full"})))  # type: ignore[arg-type]
    assert full < op < megatron <= none


def test_a_fused_cross_entropy_keeps_one_float32_copy_of_the_logits() -> None:
    common = {"seq_len": 4096, "micro_batch_size": 1, "kernels": "eager"}
    eager = logits_and_loss_bytes(LLAMA_8B, ActivationShape(**common))  # type: ignore[arg-type]
    fused = logits_and_loss_bytes(LLAMA_8B, ActivationShape(fused_cross_entropy=True, **common))  # type: ignore[arg-type]
    assert eager - fused == pytest.approx(4 * 4096 * LLAMA_8B.vocab_size)


def test_a_fused_norm_keeps_its_input_not_also_its_output() -> None:
    # nanotron's modules are eager but its TritonRMSNorm is flash-attn's Triton layer_norm_fn: each of a
    # layer's two norms keeps its input (and per-row statistics), not also the normalised 16-bit output
    s, b = 4096, 2
    common = {"seq_len": s, "micro_batch_size": b, "kernels": "eager"}
    eager = layer_activation_bytes(LLAMA_8B, ActivationShape(**common))  # type: ignore[arg-type]
    fused = layer_activation_bytes(LLAMA_8B, ActivationShape(fused_norm=True, **common))  # type: ignore[arg-type]
    assert eager - fused == pytest.approx(2 * 2 * s * b * LLAMA_8B.hidden_size)
    nanotron = stack_memory("nanotron")
    assert nanotron is not None and nanotron.kernels == "eager" and nanotron.fused_norm is True
    workload = training_workload(LLAMA_8B, TrainingSection(framework="nanotron"), 8)
    assert workload.fused_norm is True


def test_torch_compile_reads_an_eager_stacks_kernels_as_fused() -> None:
    """Under torch.compile Inductor fuses the element-wise ops and the min-cut partitioner saves what a fused
    kernel keeps: an eager stack's memory is a fused one's (OLMo-core's 1B, compiled, ran 8 x 4096 tokens
    per micro-batch on 80 GB without recompute: read as eager it needed 90 GiB). A stack whose kernels are
    already fused or Transformer Engine's does not change."""
    eager = training_workload(LLAMA_8B, TrainingSection(framework="torchtitan"), 8)
    compiled = training_workload(LLAMA_8B, TrainingSection(framework="torchtitan", compile=True), 8)
    assert (eager.kernels, compiled.kernels) == ("eager", "fused")
    te = training_workload(LLAMA_8B, TrainingSection(framework="megatron-core", compile=True), 8)
    assert te.kernels == "te"
    layout = Parallelism(dp=8, fsdp="full")

    def peak(workload: Workload) -> float:
        shape = workload.memory_shape(micro_batch_size=2, num_microbatches=1, gpus_per_node=8)
        return estimate_memory(LLAMA_8B, layout, shape).peak_bytes

    assert peak(compiled) < peak(eager)


@pytest.mark.parametrize(
    ("stack", "fp8_all_gather", "expected"),
    [
        ("cached", None, "cached"),
        ("cached", True, "primary"),
        ("primary", False, "cached"),
        ("transient", True, "gathered"),
        ("gathered", False, "transient"),
        ("transient", False, "transient"),
        ("primary", True, "primary"),
    ],
)
def test_fp8_all_gather_turns_each_stack_way_into_its_gathered_twin(
    stack: str, fp8_all_gather: bool | None, expected: str
) -> None:
    assert fp8_weights_with_gather(stack, fp8_all_gather) == expected  # type: ignore[arg-type]


def test_the_scenario_field_reaches_the_workload_and_a_stack_without_it_is_refused() -> None:
    spec = catalog.model("llama3.1-8b")
    fields = {"seq_len": 8192, "global_batch_size": 64, "precision": "fp8"}
    gathered = training_workload(
        spec, TrainingSection(framework="torchtitan", fp8_all_gather=True, **fields), 64
    )
    assert gathered.fp8_weights == "gathered"
    default = training_workload(spec, TrainingSection(framework="torchtitan", **fields), 64)
    assert default.fp8_weights == "transient"
    plain = training_workload(spec, TrainingSection(framework="nemo", fp8_all_gather=False, **fields), 64)
    assert plain.fp8_weights == "cached"
    with pytest.raises(InputError) as raised:
        training_workload(spec, TrainingSection(framework="deepspeed", fp8_all_gather=True, **fields), 64)
    assert raised.value.field == "training.fp8_all_gather" and "torchtitan" in raised.value.render()
