"""Training FLOPs per token by component, model vs hardware FLOPs, MFU and HFU.

Counting rule: matrix multiplies only, 2 FLOPs per multiply-add; a training step is forward + backward
with backward = 2 x forward (activation and weight gradients), so model FLOPs = 3 x forward
(Narayanan et al., SC21, eq. 3; Korthikanti et al. 2022, "model FLOPs"). Norms, softmax and element-wise
work are left out, as every published MFU does.

Attention scores (QK^T) and values (AV) are counted one of two ways, and every output names which:

* ``full`` — over the whole s x s score matrix (PaLM, Chowdhery et al. 2022, App. B; Megatron 2021).
  This is the default and reproduces most published MFU figures: for a GPT layer it gives exactly
  Megatron's 72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h)) and the 6N + 12·L·h·s rule.
* ``causal`` — halved for the causal mask (Megatron-LM since commit 8873b55d6a, 2025-03-06). The same
  run then reports a lower MFU when s is large relative to h.

Hardware FLOPs add what recompute executes again: for full recompute the forward pass of the transformer
layers, not of the output layer, whose logits are not checkpointed (Narayanan et al., SC21, eq. 3:
96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)), logits counted 3 times, layers 4 times); for selective recompute
the core attention (scores, softmax, values; Korthikanti et al. 2022, §5). MFU uses model FLOPs; HFU uses
hardware FLOPs (Chowdhery et al. 2022, App. B). LLM Foundry's HFU adds the whole forward pass, logits
included (4/3 x MFU): for its models that counts < 0.2 % more than eq. 3.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

from mfukit.core.model import ModelSpec

AttentionConvention = Literal["full", "causal"]
RecomputeMode = Literal["none", "selective", "full"]
ATTENTION_CONVENTION_NAMES: dict[AttentionConvention, str] = {
    "full": "full s^2 attention (PaLM / Megatron 2021)",
    "causal": "causal-halved attention (Megatron-LM since 2025-03)",
}
BACKWARD_TO_FORWARD = 2.0


@dataclass(frozen=True)
class ForwardFlops:
    """Forward FLOPs per token, summed over all layers, by component."""

    qkv: float
    attention_scores: float
    attention_values: float
    attention_output: float
    mlp: float
    moe_router: float
    moe_experts: float
    moe_shared: float
    logits: float

    @property
    def total(self) -> float:
        return float(sum(asdict(self).values()))

    @property
    def core_attention(self) -> float:
        """Scores and values: the part that grows with sequence length."""
        return self.attention_scores + self.attention_values

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def forward_flops_per_token(
    model: ModelSpec, seq_len: int, convention: AttentionConvention = "full"
) -> ForwardFlops:
    """Forward FLOPs per token for a ``seq_len``-token sequence under ``convention``."""
    h = model.hidden_size
    heads = model.num_attention_heads
    layers = model.num_hidden_layers
    # Tokens each query attends to, on average: all s (full) or s/2 (causal, Megatron's rounding).
    keys = seq_len if convention == "full" else seq_len / 2
    if model.mla is not None:
        mla = model.mla
        qk_head = mla.qk_nope_head_dim + mla.qk_rope_head_dim
        q = (
            h * mla.q_lora_rank + mla.q_lora_rank * heads * qk_head
            if mla.q_lora_rank
            else h * heads * qk_head
        )
        kv = h * (mla.kv_lora_rank + mla.qk_rope_head_dim) + mla.kv_lora_rank * heads * (
            mla.qk_nope_head_dim + mla.v_head_dim
        )
        qkv_macs = q + kv
        score_macs = keys * heads * qk_head
        value_macs = keys * heads * mla.v_head_dim
        out_macs = heads * mla.v_head_dim * h
    else:
        d = model.head_size
        qkv_macs = h * (heads + 2 * model.kv_heads) * d
        score_macs = keys * heads * d
        value_macs = keys * heads * d
        out_macs = heads * d * h
    mlp_matrices = 3 if model.mlp == "swiglu" else 2
    dense_mlp_macs = mlp_matrices * h * model.intermediate_size
    router_macs = experts_macs = shared_macs = 0.0
    if model.moe is not None:
        moe = model.moe
        router_macs = h * moe.num_experts
        experts_macs = moe.num_experts_per_tok * mlp_matrices * h * moe.moe_intermediate_size
        shared_macs = mlp_matrices * h * moe.shared_expert_intermediate_size
    moe_layers = model.num_moe_layers
    return ForwardFlops(
        qkv=2 * layers * qkv_macs,
        attention_scores=2 * layers * score_macs,
        attention_values=2 * layers * value_macs,
        attention_output=2 * layers * out_macs,
        mlp=2 * model.num_dense_layers * dense_mlp_macs,
        moe_router=2 * moe_layers * router_macs,
        moe_experts=2 * moe_layers * experts_macs,
        moe_shared=2 * moe_layers * shared_macs,
        logits=2 * h * model.vocab_size,
    )


def model_flops_per_token(model: ModelSpec, seq_len: int, convention: AttentionConvention = "full") -> float:
    """Training FLOPs per token that MFU counts: forward + backward (3 x forward)."""
    return (1 + BACKWARD_TO_FORWARD) * forward_flops_per_token(model, seq_len, convention).total


def hardware_flops_per_token(
    model: ModelSpec,
    seq_len: int,
    recompute: RecomputeMode,
    convention: AttentionConvention = "full",
    recomputed_share: float = 1.0,
) -> float:
    """Training FLOPs per token the GPU executes, recompute included (what HFU counts): SC21 eq. 3 for full
    recompute (the layers' forward again, the logits not), of ``recomputed_share`` of the layers where full
    recompute covers only some (``parallelism.recompute_layers``)."""
    forward = forward_flops_per_token(model, seq_len, convention)
    model_flops = (1 + BACKWARD_TO_FORWARD) * forward.total
    if recompute == "full":
        return model_flops + recomputed_share * (forward.total - forward.logits)
    if recompute == "selective":
        return model_flops + forward.core_attention
    return model_flops


def training_flops(
    model: ModelSpec, tokens: float, seq_len: int, convention: AttentionConvention = "full"
) -> float:
    """Total model FLOPs to train on ``tokens`` tokens."""
    return tokens * model_flops_per_token(model, seq_len, convention)


def utilization(flops_per_token: float, tokens_per_s_per_gpu: float, peak_flops_per_s: float) -> float:
    """Achieved FLOP/s over peak: MFU with model FLOPs per token, HFU with hardware FLOPs per token."""
    if peak_flops_per_s <= 0:
        raise ValueError("peak FLOP/s must be positive")
    return flops_per_token * tokens_per_s_per_gpu / peak_flops_per_s
