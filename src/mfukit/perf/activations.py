"""Activation memory of one transformer layer for one micro-batch, per GPU (Korthikanti et al. 2022).

"Reducing Activation Recomputation in Large Transformer Models" (Korthikanti et al., MLSys 2023,
arXiv:2205.05198), §4: a GPT layer with 16-bit activations and 1-byte dropout masks stores
``s·b·h·(34 + 5·a·s/h)`` bytes: attention 11·sbh + 5·a·s²·b, MLP 19·sbh, two layer norms 4·sbh. With tensor
parallelism t the 10·sbh outside the TP regions (norm inputs, QKV and MLP inputs, dropout masks) stay
whole unless sequence parallelism shards them too: ``sbh·(10 + 24/t + 5as/(ht))`` without SP,
``sbh/t·(34 + 5as/h)`` with it. Selective recompute drops the 5·a·s²·b of the core attention; full
recompute keeps only each layer's input.

This module generalises those terms instead of hard-coding 34, so that the same code is exact for a
GPT layer and right for today's models: Q, K and V sized by their own head counts (GQA/MQA, MLA),
SwiGLU's gate/up/product (6·s·b·f, Megatron's fused ``bias_swiglu`` keeps [gate, up] and the product)
instead of GeLU's 4·s·b·f, dropout masks only when the model uses dropout (LLaMA-family models do not),
flash attention keeping the output and a float32 log-sum-exp per row instead of the s² scores
(Dao et al. 2022), and context parallelism splitting the sequence (each CP rank keeps s/cp queries).
With ``attention_dropout`` and ``hidden_dropout`` on, GeLU, MHA, no flash attention this returns exactly 34·sbh + 5·a·s²·b.

FP8 with Transformer Engine (``kernels="te"``, ``fp8=True``): a TE ``Linear``/``LayerNormLinear`` quantizes
its input for the FP8 GEMM and saves that FP8 copy, column-wise data only, for the weight gradient
(``transformer_engine/pytorch/module/linear.py``, ``_Linear.forward``: "Discard row-wise data since it is
not needed in backward pass"): the norm outputs feeding QKV and FC1 and the FC2 input are kept in 1 byte.
The core attention still keeps its 16-bit output for its own backward, and the output projection an FP8
copy of it beside that. torchao's Float8Linear (torchtitan) and Megatron-DeepSpeed keep 16-bit inputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from mfukit.core.model import ModelSpec
from mfukit.core.parallelism import Parallelism, Recompute, stage_layer_counts

MASK_BYTES = 1.0  # a dropout mask is one byte per element (Korthikanti et al. 2022, §4.1)
FP32_BYTES = 4.0
TOKEN_ID_BYTES = 8.0  # int64 token ids and labels
FP8_BYTES = 1.0
# What recompute = "selective" keeps (Workload.selective_recompute, set per stack): Megatron's core-attention
# recompute (Korthikanti et al. 2022) or torchtitan's per-op activation checkpointing
SelectiveRecompute = Literal["core-attention", "op"]
# What a stack's kernels keep for backward (Workload.kernels, set per training.framework):
Kernels = Literal["te", "fused", "eager"]
KERNELS_NAMES: dict[Kernels, str] = {
    "te": "Transformer Engine kernels (Megatron-Core, NeMo: norm+GEMM, fused attention, fused SwiGLU and CE; "
    "FP8 GEMM inputs saved in FP8)",
    "fused": "fused kernels (Megatron-DeepSpeed, Megatron without TE: fused SwiGLU, norm, vocab-parallel CE; "
    "16-bit GEMM inputs)",
    "eager": "eager PyTorch modules (HF-style: nanotron, torchtitan without compile)",
}


def recomputed_share(
    full: npt.ArrayLike, layers_per_chunk: npt.ArrayLike, vpp: npt.ArrayLike, stage_layers: npt.ArrayLike
) -> npt.NDArray[np.float64]:
    """Share of a pipeline stage's layers whose forward full recompute runs again in the backward: every
    layer, unless ``layers_per_chunk`` (> 0) caps each of the stage's ``vpp`` model chunks (Megatron's
    ``--recompute-method block --recompute-num-layers N`` checkpoints the first N layers of each chunk and
    lets the rest store their activations); none where ``full`` is false (selective recompute is timed and
    sized apart)."""
    chunks = np.asarray(layers_per_chunk, dtype=np.float64) * np.asarray(vpp, dtype=np.float64)
    capped = np.minimum(1.0, chunks / np.maximum(np.asarray(stage_layers, dtype=np.float64), 1.0))
    share = np.where(np.asarray(layers_per_chunk) > 0, capped, 1.0)
    return np.asarray(np.where(full, share, 0.0), dtype=np.float64)


def layout_recompute(layout: Parallelism | None, num_layers: int) -> tuple[Recompute, float]:
    """The recompute mode of ``layout`` (none without one) and the share of the layers full recompute covers
    (:func:`model_recomputed_share`): what HFU needs of a layout."""
    if layout is None:
        return "none", 0.0
    return layout.recompute, model_recomputed_share(layout, num_layers)


def model_recomputed_share(layout: Parallelism, num_layers: int) -> float:
    """Share of all ``num_layers`` layers whose forward full recompute runs again under ``layout``: 1 for every
    layer, 0 without full recompute (what HFU adds is this share of the layers' forward)."""
    return stages_recomputed_share(
        layout.recompute == "full",
        layout.recompute_layers or 0,
        layout.vpp,
        layout.pp,
        stage_layer_counts(layout, num_layers),
        num_layers,
    )


def stages_recomputed_share(
    full: bool,
    layers_per_chunk: int,
    vpp: int,
    pp: int,
    stage_layers: tuple[float, float, float],
    num_layers: int,
) -> float:
    """:func:`model_recomputed_share` from the layers of the first, a middle and the last stage."""
    if not full:
        return 0.0

    def recomputed(layers: float) -> float:
        return float(recomputed_share(True, layers_per_chunk, vpp, layers)) * layers

    first, middle, last = stage_layers
    if pp == 1:
        return recomputed(first) / num_layers
    return (recomputed(first) + recomputed(last) + (pp - 2) * recomputed(middle)) / num_layers


def fused_unless_eager(stated: bool | None, kernels: Kernels) -> bool:
    """Whether a stack's norm or loss kernel is fused: as its memory entry states, else as its kernels (fused
    unless eager)."""
    return kernels != "eager" if stated is None else stated


@dataclass(frozen=True)
class ActivationShape:
    seq_len: int
    micro_batch_size: int
    tp: int = 1
    cp: int = 1
    sequence_parallel: bool = False
    recompute: Recompute = "none"
    flash_attention: bool = True
    attention_dropout: bool = False  # a mask on the attention probabilities (kept by eager attention only)
    hidden_dropout: bool = False  # masks after attention and the MLP (and the embedding, first stage)
    act_bytes: float = 2.0  # 16-bit activations; 4 in fp32 training
    kernels: Kernels = "fused"
    fp8: bool = False  # FP8 GEMMs (precision "fp8")
    # a fused (vocab-parallel / sharded / in-place) cross-entropy; None: as the kernels (fused unless eager)
    fused_cross_entropy: bool | None = None
    # a fused norm kernel (apex, Triton) that keeps only its input and the per-row statistics; None: as the
    # kernels (an eager norm also keeps its normalised output)
    fused_norm: bool | None = None
    selective: SelectiveRecompute = "core-attention"

    @property
    def fp8_saved_inputs(self) -> bool:
        """Whether GEMM inputs are saved for backward in FP8 (Transformer Engine with FP8 GEMMs)."""
        return self.fp8 and self.kernels == "te"

    @property
    def tokens(self) -> float:
        """Tokens of one micro-batch on one CP rank (s/cp · b)."""
        return self.seq_len / self.cp * self.micro_batch_size

    @property
    def replicated_share(self) -> float:
        """The share of a tensor outside the TP regions each rank keeps: 1/t with SP, all of it without."""
        return 1.0 / self.tp if self.sequence_parallel else 1.0


def layer_input_bytes(model: ModelSpec, shape: ActivationShape) -> float:
    """One hidden-state tensor (s·b·h) as a rank keeps it: the checkpoint of full recompute."""
    return shape.act_bytes * shape.tokens * model.hidden_size * shape.replicated_share


def _gemm_input_bytes(model: ModelSpec, shape: ActivationShape) -> float:
    """The input a column-parallel GEMM keeps for its weight gradient. With sequence parallelism Megatron
    keeps the 1/t shard and all-gathers it again in backward (Korthikanti et al. 2022, §4.2.2); autograd
    on an all-gathered tensor (DTensor, nanotron's REDUCE_SCATTER mode) keeps the whole gathered input.
    Transformer Engine in FP8 keeps it as its FP8 copy (module docstring)."""
    whole = layer_input_bytes(model, shape)
    return whole * FP8_BYTES / shape.act_bytes if shape.fp8_saved_inputs else whole


def _attention_bytes(model: ModelSpec, shape: ActivationShape, *, keep_scores: bool) -> float:
    """Q, K, V, the core attention's saved state and the output projection's input."""
    a = shape.act_bytes
    tokens = shape.tokens
    t = shape.tp
    heads = model.num_attention_heads
    if model.mla is not None:
        mla = model.mla
        qk_head = mla.qk_nope_head_dim + mla.qk_rope_head_dim
        latents = (mla.q_lora_rank or 0) + mla.kv_lora_rank + mla.qk_rope_head_dim
        qkv = a * tokens * (latents * shape.replicated_share + heads * (2 * qk_head + mla.v_head_dim) / t)
        context_width = heads * mla.v_head_dim
    else:
        d = model.head_size
        qkv = a * tokens * (heads + 2 * model.kv_heads) * d / t
        if shape.kernels == "eager":
            # Eager attention keeps the fused QKV output alive (V is a view of it) and hands the attention
            # kernel contiguous copies of Q, K and V.
            qkv *= 2
        context_width = heads * d
    out_proj_input = a * tokens * context_width / t
    if shape.fp8_saved_inputs:
        out_proj_input *= 1 + FP8_BYTES / a  # attention keeps its 16-bit output, the projection an FP8 copy
    core = 0.0
    if shape.flash_attention:
        if keep_scores:
            core = FP32_BYTES * tokens * heads / t  # log-sum-exp per query row and head
    elif keep_scores:
        # softmax output (2·a·s²·b), plus its dropout mask (a·s²·b) and dropout output (2·a·s²·b) when the
        # model uses attention dropout: the 5·a·s²·b of Korthikanti et al. Each CP rank scores s/cp queries
        # against all s keys.
        scores = tokens * shape.seq_len * heads / t
        core = a * scores + ((MASK_BYTES + a) * scores if shape.attention_dropout else 0.0)
    return qkv + core + out_proj_input


def _ffn_bytes(model: ModelSpec, shape: ActivationShape, width: int) -> float:
    """Inside one FFN, split by TP: GeLU keeps its input and the second GEMM's input (4·s·b·f); fused
    SwiGLU keeps [gate, up] and their product (6·s·b·f), eager SwiGLU also silu(gate) (8·s·b·f). With
    Transformer Engine in FP8 the second GEMM's input (the product) is kept in FP8."""
    kept = 2 if model.mlp == "gelu" else 4 if shape.kernels == "eager" else 3
    second_gemm_input = FP8_BYTES if shape.fp8_saved_inputs else shape.act_bytes
    per_token = (kept - 1) * shape.act_bytes * width + second_gemm_input * width
    return shape.tokens * per_token / shape.tp


def _mlp_bytes(model: ModelSpec, shape: ActivationShape, *, moe_layer: bool) -> float:
    if not moe_layer or model.moe is None:
        return _ffn_bytes(model, shape, model.intermediate_size)
    moe = model.moe
    router = FP32_BYTES * shape.tokens * moe.num_experts * shape.replicated_share  # fp32 router logits
    # Each token reaches top-k experts; with balanced routing every EP rank computes as many expert tokens
    # as its TP group owns, gathered over TP, each expert split by the expert tensor parallel size (= tp,
    # Megatron-Core's default): the expert inputs are whole, the expert internals split.
    expert_inputs = shape.act_bytes * shape.tokens * model.hidden_size
    routed = moe.num_experts_per_tok * (expert_inputs + _ffn_bytes(model, shape, moe.moe_intermediate_size))
    shared = _ffn_bytes(model, shape, moe.shared_expert_intermediate_size)
    return router + routed + shared


def layer_activation_bytes(
    model: ModelSpec, shape: ActivationShape, *, moe_layer: bool = False, stored: bool = True
) -> float:
    """Bytes one layer keeps for its backward pass for one micro-batch on one GPU.

    ``stored=True`` applies the recompute mode (what stays in memory between forward and backward);
    ``stored=False`` is everything the layer's forward materialises (the working set of a recompute).
    """
    if stored and shape.recompute == "full":
        return layer_input_bytes(model, shape)
    if (
        stored
        and shape.recompute == "selective"
        and shape.selective == "op"
        and not moe_layer
        and model.mla is None
    ):
        return _op_checkpoint_bytes(model, shape)
    keep_scores = not (stored and shape.recompute == "selective")
    hidden = layer_input_bytes(model, shape)
    # hidden dropout's masks after attention and after the MLP
    masks = 2 * MASK_BYTES / shape.act_bytes * hidden if shape.hidden_dropout else 0.0
    norms = (
        2 if fused_unless_eager(shape.fused_norm, shape.kernels) else 4
    ) * hidden  # each norm's input (eager: and its normalised x)
    attention_input = mlp_input = _gemm_input_bytes(model, shape)  # the QKV and first MLP GEMMs' inputs
    return (
        norms
        + attention_input
        + _attention_bytes(model, shape, keep_scores=keep_scores)
        + mlp_input
        + _mlp_bytes(model, shape, moe_layer=moe_layer)
        + masks
    )


def _op_checkpoint_bytes(model: ModelSpec, shape: ActivationShape) -> float:
    """torchtitan's per-op selective activation checkpointing (``_apply_op_sac``): a layer keeps its input and
    the outputs of the ops in its save list (every other matmul, SDPA, reduce-scatter); the rest (norms,
    RoPE, SiLU, the other matmuls) is recomputed in backward. In a Llama layer the saved matmuls are the 1st,
    3rd, 5th and 7th: wq, wv, w1 and w2 (w2's output before its TP reduce-scatter, and the scattered one);
    SDPA keeps its output and a float32 log-sum-exp per row and head. Dense, non-MLA layers; MoE and MLA
    layers keep Megatron's selective accounting."""
    t = shape.tp
    d, heads = model.head_size, model.num_attention_heads
    h, f = model.hidden_size, model.intermediate_size
    w2_out = h + (h / t if t > 1 else 0.0)
    widths = heads * d / t + model.kv_heads * d / t + heads * d / t + f / t + w2_out
    lse = FP32_BYTES * shape.tokens * heads / t
    return layer_input_bytes(model, shape) + shape.act_bytes * shape.tokens * widths + lse


def embedding_input_bytes(model: ModelSpec, shape: ActivationShape) -> float:
    """The first stage's inputs per micro-batch: token ids and labels, plus the embedding dropout's 1-byte
    mask when the model uses hidden dropout (its output is the first layer's input, counted there; its
    backward needs only the mask)."""
    ids = 2 * TOKEN_ID_BYTES * shape.tokens
    if not shape.hidden_dropout:
        return ids
    return ids + layer_input_bytes(model, shape) * MASK_BYTES / shape.act_bytes


def logits_and_loss_bytes(model: ModelSpec, shape: ActivationShape) -> float:
    """The last stage's head for one micro-batch: the final norm's input, the output layer's input, the
    vocab-parallel logits (16-bit) and their float32 copy for the cross-entropy (Megatron's fused
    ``vocab_parallel_cross_entropy`` works in place on it, as do nanotron's ``sharded_cross_entropy`` and
    flash-attn's ``CrossEntropyLoss`` in LLM Foundry); eager ``cross_entropy(logits.float())`` also keeps the
    float32 log-softmax for its backward."""
    logits = shape.tokens * model.vocab_size / shape.tp
    fp32_copies = 1 if fused_unless_eager(shape.fused_cross_entropy, shape.kernels) else 2
    # the final norm's input and the output layer's 16-bit input (the output layer is never FP8)
    head_inputs = 2 * layer_input_bytes(model, shape)
    return head_inputs + logits * (shape.act_bytes + fp32_copies * FP32_BYTES)
