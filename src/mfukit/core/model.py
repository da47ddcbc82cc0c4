"""A decoder-only transformer's shape, in Hugging Face ``config.json`` field names, and its parameters.

One spec serves the planner, the memory model, the checkpoint-size model, the training harness and the
diagnosis. :func:`from_hf_config` reads any HF config (Llama, Mistral/Mixtral, Qwen2/2-MoE, DeepSeek-V2/V3,
GPT-2/GPT-3 style, OPT, BLOOM). Parameter counts are exact for the layer structure described here
(weights, biases and norms); ``tests/golden/model_params.toml`` checks every catalog model against its
published total (BLOOM-176B to the parameter: 176,247,271,424).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from mfukit.core.hardware import Source
from mfukit.core.schema import Strict, validate_as

MlpKind = Literal["gelu", "swiglu"]

# Upper bounds on a shape, far above any trained model (hidden 25,600, FFN 102,400, vocabulary 256K,
# 128 layers in the catalog): they catch a mistyped or overflowing value (1e30 as a hidden size) before it
# reaches the FLOP and byte counts, which would otherwise print an MFU for it.
MAX_LAYERS = 10_000
MAX_WIDTH = 2**20  # hidden size, head dimension, heads
MAX_FFN_WIDTH = 2**22
MAX_VOCAB = 2**24
MAX_POSITIONS = 2**31


class MoESpec(Strict):
    """Mixture of experts (Mixtral, DeepSeek, Qwen-MoE). Field names follow the HF configs."""

    num_experts: int = Field(ge=2, description="routed experts per MoE layer")
    num_experts_per_tok: int = Field(ge=1, description="top-k routed experts per token")
    moe_intermediate_size: int = Field(ge=1, le=MAX_FFN_WIDTH, description="FFN width of one routed expert")
    num_shared_experts: int = Field(default=0, ge=0)
    shared_expert_intermediate_size: int = Field(
        default=0, ge=0, description="total FFN width of the shared expert(s); 0 = none"
    )
    first_k_dense_replace: int = Field(default=0, ge=0, description="the first k layers are dense MLPs")
    moe_layer_freq: int = Field(default=1, ge=1, description="every n-th layer (after the dense ones) is MoE")

    @model_validator(mode="after")
    def _top_k_within_experts(self) -> MoESpec:
        if self.num_experts_per_tok > self.num_experts:
            raise ValueError("num_experts_per_tok cannot exceed num_experts")
        return self


class MLASpec(Strict):
    """Multi-head latent attention (DeepSeek-V2/V3)."""

    q_lora_rank: int | None = Field(default=None, ge=1)
    kv_lora_rank: int = Field(ge=1)
    qk_nope_head_dim: int = Field(ge=1)
    qk_rope_head_dim: int = Field(ge=1)
    v_head_dim: int = Field(ge=1)


class ModelSpec(Strict):
    """A decoder-only transformer. Fields are the HF config names; derived sizes are properties."""

    name: str = "custom"
    display_name: str = ""
    aliases: tuple[str, ...] = Field(
        default=(), description="other names it is looked up by: HF hub ids, usual spellings"
    )
    num_hidden_layers: int = Field(ge=1, le=MAX_LAYERS)
    hidden_size: int = Field(ge=1, le=MAX_WIDTH)
    num_attention_heads: int = Field(ge=1, le=MAX_WIDTH)
    num_key_value_heads: int | None = Field(default=None, ge=1, le=MAX_WIDTH)
    head_dim: int | None = Field(default=None, ge=1, le=MAX_WIDTH)
    intermediate_size: int = Field(ge=1, le=MAX_FFN_WIDTH, description="FFN width of a dense MLP layer")
    vocab_size: int = Field(ge=1, le=MAX_VOCAB)
    mlp: MlpKind = "swiglu"
    tie_word_embeddings: bool = False
    max_position_embeddings: int = Field(default=2048, ge=1, le=MAX_POSITIONS)
    position_embedding: Literal["rope", "learned", "alibi"] = "rope"
    norm: Literal["rmsnorm", "layernorm"] = "rmsnorm"
    attention_bias: bool = False
    qkv_bias: bool = False
    mlp_bias: bool = False
    word_embeddings_layernorm: bool = Field(
        default=False, description="a norm right after the token embedding (BLOOM's StableEmbedding)"
    )
    num_nextn_predict_layers: int = Field(default=0, ge=0, description="multi-token-prediction modules")
    moe: MoESpec | None = None
    mla: MLASpec | None = None
    source: Source | None = None

    @model_validator(mode="after")
    def _heads_consistent(self) -> ModelSpec:
        kv = self.num_key_value_heads
        if kv is not None and self.num_attention_heads % kv:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"num_key_value_heads ({kv})"
            )
        if self.head_dim is None and self.mla is None and self.hidden_size % self.num_attention_heads:
            raise ValueError("hidden_size must be a multiple of num_attention_heads, or give head_dim")
        return self

    # ------------------------------------------------------------------ derived shapes

    @property
    def kv_heads(self) -> int:
        return self.num_key_value_heads or self.num_attention_heads

    @property
    def head_size(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads

    def is_moe_layer(self, index: int) -> bool:
        """Whether layer ``index`` (0-based) is an MoE block: after the first k dense ones, every n-th."""
        if self.moe is None:
            return False
        return index >= self.moe.first_k_dense_replace and index % self.moe.moe_layer_freq == 0

    @property
    def num_moe_layers(self) -> int:
        return sum(1 for layer in range(self.num_hidden_layers) if self.is_moe_layer(layer))

    @property
    def num_dense_layers(self) -> int:
        return self.num_hidden_layers - self.num_moe_layers

    @property
    def is_moe(self) -> bool:
        return self.moe is not None

    # ------------------------------------------------------------------ parameters

    def _norm_params(self) -> int:
        return 2 * self.hidden_size if self.norm == "layernorm" else self.hidden_size

    def attention_params(self) -> int:
        """Weights (+ biases) of one attention block, without its norm."""
        h = self.hidden_size
        heads = self.num_attention_heads
        if self.mla is not None:
            mla = self.mla
            qk_head = mla.qk_nope_head_dim + mla.qk_rope_head_dim
            if mla.q_lora_rank:
                q = h * mla.q_lora_rank + mla.q_lora_rank + mla.q_lora_rank * heads * qk_head
            else:
                q = h * heads * qk_head
            kv_down = h * (mla.kv_lora_rank + mla.qk_rope_head_dim) + mla.kv_lora_rank
            kv_up = mla.kv_lora_rank * heads * (mla.qk_nope_head_dim + mla.v_head_dim)
            out = heads * mla.v_head_dim * h
            return q + kv_down + kv_up + out
        q_width = heads * self.head_size
        kv_width = self.kv_heads * self.head_size
        weights = h * (q_width + 2 * kv_width) + q_width * h
        biases = 0
        if self.attention_bias or self.qkv_bias:
            biases += q_width + 2 * kv_width
        if self.attention_bias:
            biases += h
        return weights + biases

    def _ffn_params(self, width: int) -> int:
        h = self.hidden_size
        if self.mlp == "swiglu":
            return 3 * h * width + (2 * width + h if self.mlp_bias else 0)
        return 2 * h * width + (width + h if self.mlp_bias else 0)

    def dense_mlp_params(self) -> int:
        return self._ffn_params(self.intermediate_size)

    def moe_layer_params(self, *, active_only: bool = False) -> int:
        """One MoE block: router, routed experts (all, or the top-k a token uses) and shared experts."""
        if self.moe is None:
            return 0
        moe = self.moe
        experts = moe.num_experts_per_tok if active_only else moe.num_experts
        router = self.hidden_size * moe.num_experts
        shared = (
            self._ffn_params(moe.shared_expert_intermediate_size)
            if moe.shared_expert_intermediate_size
            else 0
        )
        return router + experts * self._ffn_params(moe.moe_intermediate_size) + shared

    def routed_expert_params(self) -> int:
        """Parameters of one routed expert's FFN (0 for a dense model)."""
        return self._ffn_params(self.moe.moe_intermediate_size) if self.moe is not None else 0

    def layer_params(self, *, moe_layer: bool, active_only: bool = False) -> int:
        mlp = self.moe_layer_params(active_only=active_only) if moe_layer else self.dense_mlp_params()
        return self.attention_params() + mlp + 2 * self._norm_params()

    def embedding_params(self) -> int:
        """Input embedding (+ learned positions, + BLOOM's embedding norm); the output projection is
        counted separately."""
        positions = (
            self.max_position_embeddings * self.hidden_size if self.position_embedding == "learned" else 0
        )
        norm = self._norm_params() if self.word_embeddings_layernorm else 0
        return self.vocab_size * self.hidden_size + positions + norm

    def output_params(self) -> int:
        """The untied output projection (0 when tied) and the final norm."""
        head = 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size
        return head + self._norm_params()

    def total_params(self) -> int:
        """Every trained parameter (multi-token-prediction modules excluded, as in published totals)."""
        layers = self.num_dense_layers * self.layer_params(
            moe_layer=False
        ) + self.num_moe_layers * self.layer_params(moe_layer=True)
        return layers + self.embedding_params() + self.output_params()

    def active_params(self) -> int:
        """Parameters one token passes through (= total for dense models)."""
        layers = self.num_dense_layers * self.layer_params(
            moe_layer=False
        ) + self.num_moe_layers * self.layer_params(moe_layer=True, active_only=True)
        return layers + self.embedding_params() + self.output_params()

    def non_embedding_params(self) -> int:
        return self.total_params() - self.embedding_params() - self.output_params() + self._norm_params()


# ---------------------------------------------------------------------------------------------- HF configs

_ALIASES: dict[str, str] = {
    # GPT-2 / GPT-3 / BLOOM style
    "n_layer": "num_hidden_layers",
    "num_layers": "num_hidden_layers",
    "n_embd": "hidden_size",
    "n_embed": "hidden_size",
    "d_model": "hidden_size",
    "n_head": "num_attention_heads",
    "n_inner": "intermediate_size",
    "ffn_dim": "intermediate_size",
    "n_positions": "max_position_embeddings",
    "num_kv_heads": "num_key_value_heads",
}
_MOE_KEYS = {
    "num_local_experts": "num_experts",  # Mixtral
    "n_routed_experts": "num_experts",  # DeepSeek
    "num_experts": "num_experts",  # Qwen2-MoE
    "num_experts_per_tok": "num_experts_per_tok",
    "moe_intermediate_size": "moe_intermediate_size",
    "n_shared_experts": "num_shared_experts",
    "shared_expert_intermediate_size": "shared_expert_intermediate_size",
    "first_k_dense_replace": "first_k_dense_replace",
    "moe_layer_freq": "moe_layer_freq",
    "decoder_sparse_step": "moe_layer_freq",  # Qwen2-MoE
}
_MLA_KEYS = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
_GATED_ACTIVATIONS = {"silu", "swiglu", "swish"}


def from_hf_config(config: dict[str, Any], *, name: str, source: str) -> ModelSpec:
    """A ModelSpec from a HF ``config.json`` dict (unknown HF keys are ignored, as HF itself does)."""
    fields: dict[str, Any] = {"name": name}
    for key, value in config.items():
        if value is None:  # GPT-2/BLOOM write "n_inner": null for "the default"
            continue
        target = _ALIASES.get(key, key)
        if target in ModelSpec.model_fields and target not in {"moe", "mla", "source", "name"}:
            fields.setdefault(target, value)
    model_type = str(config.get("model_type", "")).lower()
    activation = str(config.get("hidden_act", config.get("activation_function", "")) or "").lower()
    if "mlp" not in config:
        gated = activation in _GATED_ACTIVATIONS or model_type in {"llama", "mistral", "mixtral", "qwen2"}
        fields["mlp"] = "swiglu" if gated else "gelu"
    if "intermediate_size" not in fields and "hidden_size" in fields:
        fields["intermediate_size"] = 4 * int(fields["hidden_size"])  # GPT-2/BLOOM: n_inner = null means 4h
    if model_type in {"gpt2", "opt", "gpt_neox", "bloom", "gpt3"} or activation in {"gelu_new", "relu"}:
        fields.setdefault("norm", "layernorm")
        fields.setdefault("attention_bias", True)
        fields.setdefault("mlp_bias", True)
        fields.setdefault("position_embedding", "alibi" if model_type == "bloom" else "learned")
        if model_type in {"gpt2", "bloom", "opt"}:  # their HF config classes keep the default: tied
            fields.setdefault("tie_word_embeddings", True)
        if model_type == "bloom":
            fields.setdefault("word_embeddings_layernorm", True)
    if model_type.startswith("qwen2"):
        fields.setdefault("qkv_bias", True)
    moe = {target: config[key] for key, target in _MOE_KEYS.items() if config.get(key) is not None}
    if moe.get("num_experts"):
        moe.setdefault("moe_intermediate_size", fields.get("intermediate_size"))
        if moe.get("num_shared_experts") and not moe.get("shared_expert_intermediate_size"):
            moe["shared_expert_intermediate_size"] = moe["num_shared_experts"] * moe["moe_intermediate_size"]
        fields["moe"] = moe
    if config.get("kv_lora_rank"):
        fields["mla"] = {key: config.get(key) for key in _MLA_KEYS}
    if not isinstance(fields.get("max_position_embeddings", 1), int):
        fields.pop("max_position_embeddings")
    return validate_as(ModelSpec, fields, source=source)
