"""The work of one micro-batch on one GPU, per layer kind: GEMM shapes, attention FLOPs, element-wise bytes,
and what the collectives move. Arrays over the configurations of a :class:`LayoutGrid`.

Shapes follow Megatron-LM's tensor-parallel split (Shoeybi et al. 2019): QKV and the first MLP GEMM are
column-parallel (N / tp), the attention output and second MLP GEMM row-parallel (K / tp), the output layer
vocab-parallel (V / tp). MLA's down-projections are replicated across TP ranks. MoE: a rank holds E / ep
experts (each split tp ways, Megatron-Core's expert tensor parallelism = tp) and, with balanced routing,
receives tokens x top-k of them, so each local expert multiplies tokens x top-k x ep / E rows.

Element-wise traffic per token and layer in the forward pass (bf16 elements; backward moves twice as much),
as fused kernels run it: two norms (read + write h each), two residual adds (two reads, one write), RoPE on
Q and K (read + write), the activation (SwiGLU reads gate and up and writes their product: 3 f; GeLU 2 f),
MoE permutation and un-permutation of the routed copies (read + write, twice). Composite eager PyTorch ops
(torchtitan without torch.compile) move more: ``nn.RMSNorm`` upcasts to fp32, squares, averages, multiplies
by the reciprocal root, casts back and multiplies by the weight, each a kernel through HBM (36 B per element
against 4 fused); RoPE through ``view_as_complex`` upcasts, multiplies and casts back (20 B against 4);
``silu(w1 x) * w3 x`` is two kernels (10 B per element of f against 6). Tensors of width h are split over TP
only with sequence parallelism. The loss reads the logits and writes fp32 softmax and gradients: 20 bytes per
logit.

FP8 (``precision = "fp8"``) runs the transformer layers' linear GEMMs with FP8 inputs; the output layer and
the MoE router stay 16-bit in every FP8 recipe (Megatron's output layer is not a Transformer Engine module,
LLM Foundry's MPT ties it to the embedding, torchtitan's float8 converter filters ``output``), and so does
attention. Each GEMM records whether it runs in FP8 and, for torchtitan's op-level selective recompute
(every second ``aten.mm`` of a layer recomputed, in execution order wq, wk, wv, wo, w1, w3, w2), the share of
its FLOPs that policy recomputes.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from mfukit.perf.efficiency import EagerElementwise as ElementwiseKernels
from mfukit.perf.gemm import Shapes
from mfukit.perf.layouts import Floats, LayoutGrid, Workload
from mfukit.perf.memory_grid import stage_layer_kinds
from mfukit.perf.model_states import gathered_weight_bytes

# Element accesses of the activation dtype per element, fused kernels vs composite eager ops (module docstring)
NORM_ACCESSES = {"fused": 2.0, "composite": 18.0}
ROPE_ACCESSES = {"fused": 2.0, "composite": 10.0}
SWIGLU_ACCESSES = {"fused": 3.0, "composite": 5.0}
GELU_ACCESSES = 2.0  # one kernel either way
RESIDUAL_ADD_ACCESSES = 3.0  # two reads, one write
LOSS_BYTES_PER_LOGIT = 20.0  # 16-bit logits read, fp32 copy written and read, softmax/grad written (fused CE)
MOE_PERMUTE_ELEMENTS = 4  # each routed copy of a token is written and read on dispatch and on combine
# Without flash attention the scores are materialised between two batched GEMMs (QK^T, then probabilities x V,
# whose own reads and writes their roofline counts): Megatron's fused scale-mask-softmax reads and writes them
# (4 B forward); its backward reads the gradient and the output and writes (6 B). With attention dropout, the
# dropout kernel reads, writes and stores its 1-byte mask (5 B), and its backward reads the gradient and the
# mask and writes (5 B). Flash attention does all of this in SRAM.
SOFTMAX_SCORE_BYTES = (4.0, 6.0)  # forward, backward, per score element
DROPOUT_SCORE_BYTES = (5.0, 5.0)
# Hidden dropout (fused into Megatron's bias-dropout-add) writes a 1-byte mask per element of the hidden
# state after attention and after the MLP, and its backward reads it: 2 B per element in all. The forward's
# element-wise bytes are charged three times (the forward, and a backward of twice them), so a third here.
DROPOUT_MASK_BYTES = 2.0
FLASH_BACKWARD_TO_FORWARD = 2.5  # FlashAttention-2 backward: 5 matmuls (with the recomputed scores) vs 2


@dataclass(frozen=True)
class Gemm:
    """One GEMM kernel, ``batch`` x (M x K) @ (K x N) (a batched GEMM runs its instances in one launch),
    ``count`` times per layer, forward."""

    m: Floats
    k: Floats
    n: Floats
    count: Floats | float
    window: bool  # its weight gradient can hide the TP reduction of its input gradient
    in_bytes: float
    out_bytes: float
    batch: Floats | float = 1.0
    fp8: bool = False  # its inputs are FP8 (the FP8 GEMM curve, the recipe's casts)
    fused_input: bool = False  # its input comes out of a fused norm or activation kernel
    alternate: float = 0.0  # share of its FLOPs an every-second-matmul recompute policy repeats

    @property
    def flops(self) -> Floats:
        return 2.0 * self.m * self.k * self.n * self.batch

    @property
    def bytes(self) -> Floats:
        return self.batch * (
            self.in_bytes * (self.m * self.k + self.k * self.n) + self.out_bytes * self.m * self.n
        )

    @cached_property
    def distinct(self) -> Shapes:
        """Its shapes, once per distinct one (what the GEMM curve evaluates)."""
        return Shapes.of(self.m, self.k, self.n, self.batch, self.bytes)


@dataclass(frozen=True)
class LayerShapes:
    tokens: Floats  # tokens of one micro-batch on one GPU's TP group: micro-batch x seq / cp
    gemms: dict[str, list[Gemm]]  # "dense", "moe" (one layer each), "head" (the output layer) and "core"
    # (without flash attention: the batched score and value GEMMs of one layer)
    attention_flops: Floats  # flash attention's executed FLOPs of one layer's forward (0 without flash)
    score_bytes: tuple[
        Floats, Floats
    ]  # without flash: element-wise bytes on the scores, forward and backward
    memory_bytes: dict[str, Floats]  # element-wise bytes of the forward: "dense", "moe", "head", "embedding"
    activation_bytes: Floats  # one micro-batch's hidden states (what TP collectives move)
    kv_chunk_bytes: Floats  # K and V of one CP rank's tokens (one ring step)
    dispatch_bytes: Floats  # what one rank sends in one MoE all-to-all
    weight_bytes: float  # per weight in a data-parallel all-gather (FP8 all-gathers: 1 B)
    first_counts: tuple[Floats, Floats]  # (dense, MoE) layers on the first stage
    middle_counts: tuple[Floats, Floats]
    last_counts: tuple[Floats, Floats]


def layer_shapes(w: Workload, g: LayoutGrid, *, kernels: ElementwiseKernels = "fused") -> LayerShapes:
    """The shapes of ``w`` on every layout of ``g``, its element-wise ops run as ``kernels``."""
    model = w.model
    h, heads, vocab = float(model.hidden_size), float(model.num_attention_heads), float(model.vocab_size)
    tp = g.tp.astype(np.float64)
    t = g.mbs * w.seq_len / g.cp.astype(np.float64)
    act = 4.0 if w.precision == "fp32" else 2.0
    fp8 = w.precision == "fp8"
    share = np.where(g.sp, 1.0 / tp, 1.0)

    def gemm(
        m: Floats | float,
        k: Floats | float,
        n: Floats | float,
        *,
        count: Floats | float = 1.0,
        window: bool = False,
        batch: Floats | float = 1.0,
        linear: bool = True,
        alternate: float = 0.5,
        fused_input: bool = False,
    ) -> Gemm:
        """A GEMM; ``linear``: a projection of the layer (FP8 under an FP8 recipe); ``alternate``: the share
        of its FLOPs recomputed by an every-second-matmul policy (half, on average, where the order is not
        spelled out); ``fused_input``: its input is the output of a norm or an activation kernel."""
        low = fp8 and linear
        return Gemm(
            np.asarray(m, dtype=np.float64) * np.ones_like(t),
            np.asarray(k, dtype=np.float64) * np.ones_like(t),
            np.asarray(n, dtype=np.float64) * np.ones_like(t),
            count,
            window,
            1.0 if low else act,
            act,
            np.asarray(batch, dtype=np.float64) * np.ones_like(t),
            fp8=low,
            fused_input=fused_input,
            alternate=alternate if linear else 0.0,
        )

    swiglu = model.mlp == "swiglu"
    mlp_gate = 2.0 if swiglu else 1.0  # SwiGLU's first GEMM computes gate and up together
    act_elements = SWIGLU_ACCESSES[kernels] if swiglu else GELU_ACCESSES
    if model.mla is not None:
        mla = model.mla
        qk, v = float(mla.qk_nope_head_dim + mla.qk_rope_head_dim), float(mla.v_head_dim)
        attention = [
            *(
                [
                    gemm(t, h, mla.q_lora_rank, window=True, fused_input=True),
                    gemm(t, mla.q_lora_rank, heads * qk / tp),
                ]
                if mla.q_lora_rank
                else [gemm(t, h, heads * qk / tp, window=True, fused_input=True)]
            ),
            gemm(t, h, mla.kv_lora_rank + mla.qk_rope_head_dim, fused_input=True),
            gemm(t, mla.kv_lora_rank, heads * (mla.qk_nope_head_dim + v) / tp),
            gemm(t, heads * v / tp, h),
        ]
        rope = ROPE_ACCESSES[kernels] * (heads * mla.qk_rope_head_dim / tp + mla.qk_rope_head_dim)
        kv_width = heads * (qk + v) / tp
    else:
        d, kv = float(model.head_size), float(model.kv_heads)
        qk = v = d
        # in execution order wq (1), wk (2), wv (3), wo (4): wk and wo are the second and fourth matmuls
        attention = [
            gemm(
                t,
                h,
                (heads + 2 * kv) * d / tp,
                window=True,
                alternate=kv / (heads + 2 * kv),
                fused_input=True,
            ),
            gemm(t, heads * d / tp, h, alternate=1.0),
        ]
        rope = ROPE_ACCESSES[kernels] * (heads + kv) * d / tp
        kv_width = 2 * kv * d / tp
    ffn = float(model.intermediate_size)
    # then w1 (5) and w3 (6), w2 (7) with SwiGLU; w1 (5), w2 (6) with GeLU
    dense_mlp = [
        gemm(t, h, mlp_gate * ffn / tp, window=True, alternate=0.5 if swiglu else 0.0, fused_input=True),
        gemm(t, ffn / tp, h, alternate=0.0 if swiglu else 1.0, fused_input=True),
    ]
    # the norm as training.norm or the stack says: a fused kernel (apex, Triton) runs as one even among eager
    # ops, composite ops as composite unless torch.compile fuses them
    norm_kernels = (
        "fused" if w.fused_norm else "composite" if w.fused_norm is False and not w.compile else kernels
    )
    norm = NORM_ACCESSES[norm_kernels]
    residual = RESIDUAL_ADD_ACCESSES + (DROPOUT_MASK_BYTES / (3 * act) if w.hidden_dropout else 0.0)
    common = (2 * norm + 2 * residual) * h * share + rope
    memory = {"dense": act * t * (common + act_elements * ffn / tp)}
    moe_mlp: list[Gemm] = []
    dispatch = np.zeros_like(t)
    if model.moe is not None:
        moe = model.moe
        experts, top_k, width = (
            float(moe.num_experts),
            float(moe.num_experts_per_tok),
            float(moe.moe_intermediate_size),
        )
        rows = t * top_k * g.ep / experts
        local = experts / g.ep
        moe_mlp = [
            gemm(t, h, experts, linear=False),  # the router
            gemm(rows, h, mlp_gate * width / tp, count=local, window=True),
            gemm(rows, width / tp, h, count=local),
        ]
        shared = float(moe.shared_expert_intermediate_size)
        if shared:
            moe_mlp += [gemm(t, h, mlp_gate * shared / tp), gemm(t, shared / tp, h)]
        memory["moe"] = (
            act
            * t
            * (
                common
                + MOE_PERMUTE_ELEMENTS * top_k * h * share
                + act_elements * (top_k * width + shared) / tp
            )
        )
        dispatch = t * top_k * h * act / tp
    else:
        memory["moe"] = np.zeros_like(t)
    memory["head"] = t * (vocab / tp * LOSS_BYTES_PER_LOGIT + 4 * h * share * act)
    memory["embedding"] = t * 2 * h * share * act
    # Flash attention skips the blocks above the causal diagonal: s/2 keys per query on average (with CP's
    # load-balanced split, per rank too). Unfused attention runs two batched GEMMs per sequence and head over
    # all s keys (QK^T: queries x head dim x keys; then x V: queries x keys x head dim), then masks.
    heads_here = heads / tp
    if w.flash_attention:
        attention_flops = 2.0 * t * (w.seq_len / 2.0) * heads_here * (qk + v)
        core: list[Gemm] = []
        score_bytes = (np.zeros_like(t), np.zeros_like(t))
    else:
        attention_flops = np.zeros_like(t)
        queries, per_micro_batch = w.seq_len / g.cp.astype(np.float64), g.mbs * heads_here
        core = [
            gemm(queries, qk, float(w.seq_len), batch=per_micro_batch, linear=False),
            gemm(queries, float(w.seq_len), v, batch=per_micro_batch, linear=False),
        ]
        scores = t * w.seq_len * heads_here
        forward, backward = (
            softmax + (dropout if w.attention_dropout else 0.0)
            for softmax, dropout in zip(SOFTMAX_SCORE_BYTES, DROPOUT_SCORE_BYTES, strict=True)
        )
        score_bytes = (scores * forward, scores * backward)
    first, last = stage_layer_kinds(w, g, 0), stage_layer_kinds(w, g, 1)
    middle_stages = np.maximum(g.pp - 2, 1)
    middle = tuple(
        np.where(g.pp > 2, (total - on_first - on_last) / middle_stages, 0.0)
        for total, on_first, on_last in zip(
            (float(model.num_dense_layers), float(model.num_moe_layers)), first, last, strict=True
        )
    )
    return LayerShapes(
        tokens=t,
        gemms={
            "dense": attention + dense_mlp,
            "moe": attention + moe_mlp,
            "head": [gemm(t, h, vocab / tp, linear=False)],
            "core": core,
        },
        attention_flops=attention_flops,
        score_bytes=score_bytes,
        memory_bytes=memory,
        activation_bytes=t * h * act,
        kv_chunk_bytes=t * kv_width * act,
        dispatch_bytes=dispatch,
        weight_bytes=gathered_weight_bytes(w.precision, w.fp8_weights),
        first_counts=first,
        middle_counts=(middle[0], middle[1]),
        last_counts=last,
    )
