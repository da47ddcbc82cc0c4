"""A parallel layout (TP, PP, DP, CP, EP, interleaving, sharding, recompute) and the rules that make one buildable.

Conventions follow Megatron-LM: world size = tp x pp x dp x cp; expert parallelism splits the
dp x cp ranks of the MoE layers (expert data parallel = dp x cp / ep); ``zero`` is the DeepSpeed stage
(1 = Megatron's distributed optimizer unless ``zero_impl = "deepspeed"``); ``fsdp = "full"`` shards like
ZeRO-3, ``"hybrid"`` shards inside a node and replicates across nodes (HSDP).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from pydantic import Field, model_validator

from mfukit.core.model import ModelSpec
from mfukit.core.schema import PositiveInt, Strict

Recompute = Literal["none", "selective", "full"]
Fsdp = Literal["none", "full", "hybrid"]
ZeroImpl = Literal["megatron", "deepspeed"]


class Parallelism(Strict):
    tp: PositiveInt = Field(default=1, description="tensor-parallel degree (inside the NVLink domain)")
    pp: PositiveInt = Field(default=1, description="pipeline-parallel stages")
    dp: PositiveInt = Field(default=1, description="data-parallel degree (omitted: GPUs / (tp x pp x cp))")
    cp: PositiveInt = Field(default=1, description="context-parallel degree (the sequence split across GPUs)")
    ep: PositiveInt = Field(
        default=1, description="expert-parallel degree of the MoE layers (splits dp x cp)"
    )
    vpp: PositiveInt = Field(default=1, description="virtual pipeline stages per rank (interleaved 1F1B)")
    sequence_parallel: bool = Field(
        default=False, description="Megatron sequence parallelism (norms and dropout split over the TP ranks)"
    )
    recompute: Recompute = Field(
        default="none",
        description="activation recomputation: none, selective (attention) or full (every layer)",
    )
    recompute_layers: PositiveInt | None = Field(
        default=None,
        description="with recompute = full: the layers of each pipeline stage's model chunk recomputed, the "
        "first ones (Megatron --recompute-method block --recompute-num-layers, NeMo "
        "activations_checkpoint_num_layers; torchtitan's every-2nd-layer AC and fms-fsdp's "
        "selective_checkpointing as a count); the rest store their activations. None: every layer",
    )
    zero: int = Field(
        default=0,
        ge=0,
        le=3,
        description="ZeRO stage: 1 shards the optimizer, 2 also gradients, 3 also parameters",
    )
    zero_impl: ZeroImpl = Field(
        default="megatron",
        description="whose zero=1: Megatron's distributed optimizer (6 + 12/DP bytes/param) or DeepSpeed "
        "ZeRO-1 (16-bit grads kept whole, 4 + 16/DP); zero=2 and 3 are DeepSpeed's either way",
    )
    fsdp: Fsdp = Field(
        default="none",
        description="FSDP: full shards like ZeRO-3, hybrid shards inside a node and replicates across",
    )
    first_stage_layers: PositiveInt | None = Field(
        default=None,
        description="layers on the first pipeline stage (Megatron --decoder-first-pipeline-num-layers); "
        "None: an even split",
    )
    last_stage_layers: PositiveInt | None = Field(
        default=None,
        description="layers on the last pipeline stage (--decoder-last-pipeline-num-layers; Llama 3 405B "
        "took one layer off the first and the last of 16 stages); None: an even split",
    )

    @model_validator(mode="after")
    def _consistent(self) -> Parallelism:
        if self.fsdp != "none" and self.zero not in (0, 3):
            raise ValueError("fsdp already shards parameters, gradients and optimizer; leave zero at 0")
        if self.recompute_layers is not None and self.recompute != "full":
            raise ValueError("recompute_layers counts fully recomputed layers: set recompute = full")
        return self

    @property
    def uneven(self) -> bool:
        return self.first_stage_layers is not None or self.last_stage_layers is not None

    @property
    def world_size(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

    @property
    def shards_parameters(self) -> bool:
        return self.zero == 3 or self.fsdp != "none"


@dataclass(frozen=True)
class LayoutProblem:
    """Why a layout cannot be built, as a user would fix it."""

    field: str
    value: int
    message: str
    fix: str


def stage_layer_counts(layout: Parallelism, num_layers: int) -> tuple[float, float, float]:
    """Layers on the first, a middle and the last pipeline stage of ``layout`` (:func:`split_stage_layers`)."""
    return split_stage_layers(num_layers, layout.pp, layout.first_stage_layers, layout.last_stage_layers)


def split_stage_layers(
    num_layers: int, pp: int, first: int | None, last: int | None
) -> tuple[float, float, float]:
    """Layers on the first, a middle and the last of ``pp`` pipeline stages: the given first/last counts, the
    rest split evenly over the other stages (Megatron's --decoder-first/last-pipeline-num-layers)."""
    if pp == 1:
        return float(num_layers), float(num_layers), float(num_layers)
    given = [count for count in (first, last) if count is not None]
    remaining_stages = pp - len(given)
    others = (num_layers - sum(given)) / remaining_stages if remaining_stages > 0 else 0.0
    return float(others if first is None else first), others, float(others if last is None else last)


def default_stage_split(num_layers: int, pp: int, vpp: int = 1) -> tuple[int, int] | None:
    """Layers on the first and the last pipeline rank when ``num_layers`` does not divide over pp x vpp
    stages and the user gave no split (None when they divide, or no pipeline): the split the published
    recipes of such layouts set.

    Megatron-Core's ``account_for_embedding_in_pipeline_split`` and ``account_for_loss_in_pipeline_split``
    (``megatron/core/transformer/transformer_config.py``; off by default, set by NeMo's Llama 3.1 405B
    recipe) count the embedding and the loss as one layer each: with (L + 2) / (pp x vpp) layers per virtual stage, the first
    and the last virtual stage hold one layer less. With L + 1 dividing, only the loss is counted (the last
    stage holds the logits). Otherwise the first and last stages get the count that lets the middle stages
    split the rest evenly while the heaviest stage stays lightest (Llama 3 405B: 126 layers on 16 stages,
    7 + 14 x 8 + 7; Megatron's --decoder-first/last-pipeline-num-layers)."""
    stages = pp * vpp
    if pp == 1 or num_layers % stages == 0 or num_layers < stages + 2:
        return None  # even, no pipeline, or too few layers for every stage to hold one
    if (num_layers + 2) % stages == 0:
        per_rank = (num_layers + 2) // stages * vpp
        return per_rank - 1, per_rank - 1
    if (num_layers + 1) % stages == 0:
        per_rank = (num_layers + 1) // stages * vpp
        return per_rank, per_rank - 1
    if vpp > 1:  # an interleaved schedule splits only by the rules above (its chunks must be equal)
        return None
    if pp == 2:
        first = math.ceil(num_layers / 2)
        return first, num_layers - first
    best: tuple[float, int] | None = None
    for edge in range(1, num_layers // 2 + 1):
        rest = num_layers - 2 * edge
        if rest <= 0 or rest % (pp - 2):
            continue
        heaviest = max(edge + 1.0, rest / (pp - 2))  # the edge stages also run the embedding or the loss
        if best is None or heaviest < best[0] or (heaviest == best[0] and edge > best[1]):
            best = (heaviest, edge)
    return None if best is None else (best[1], best[1])


def _uneven_split_problems(
    layout: Parallelism, num_layers: int, need: Callable[[bool, str, int, str, str], None]
) -> None:
    given = [count for count in (layout.first_stage_layers, layout.last_stage_layers) if count is not None]
    need(
        layout.pp > 1,
        "parallelism.first_stage_layers",
        layout.pp,
        "first_stage_layers / last_stage_layers need a pipeline (pp > 1)",
        "raise pp or drop the uneven split",
    )
    rest = num_layers - sum(given)
    others = layout.pp - len(given)
    splits = (
        rest == 0
        if others == 0
        else others > 0 and rest >= others and rest % others == 0 and (rest // others) % layout.vpp == 0
    )
    need(
        layout.pp == 1 or splits,
        "parallelism.first_stage_layers",
        sum(given),
        f"after {sum(given)} layers on the first/last stage, {rest} layers do not split evenly over the "
        f"other {others} stages",
        "choose first/last stage layers so that the rest divides evenly",
    )


def divisors(n: int) -> list[int]:
    """The divisors of ``n``, ascending, in O(sqrt n) steps: a count at the schema's bound (2^31 - 1) takes
    46,340 steps, not 2^31."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return small + [n // d for d in reversed(small) if d * d != n]


def _divisors_text(n: int, limit: int | None = None) -> str:
    return ", ".join(str(d) for d in divisors(n) if limit is None or d <= limit)


def valid_tp_text(model: ModelSpec, max_tp: int | None = None) -> str:
    """The tensor-parallel degrees ``model`` allows (dividing the heads, the KV heads and the FFN width),
    within a scale-up domain of ``max_tp`` GPUs when given, as a fix a user can act on."""
    sizes = [model.num_attention_heads, model.intermediate_size]
    if model.mla is None:
        sizes.append(model.kv_heads)
    common = math.gcd(*sizes)
    domain = f" (within the {max_tp}-GPU scale-up domain)" if max_tp is not None else ""
    return f"use tp = {_divisors_text(common, max_tp)}{domain}: the degrees that divide the heads and the FFN width"


def layout_problems(
    layout: Parallelism,
    model: ModelSpec,
    *,
    seq_len: int,
    global_batch_sequences: int | None,
    micro_batch_size: int,
    num_gpus: int | None = None,
    max_tp: int | None = None,
) -> list[LayoutProblem]:
    """Every divisibility rule the layout breaks (empty when it can be built); ``max_tp`` (the scale-up
    domain) only narrows the tp values a fix suggests."""
    problems: list[LayoutProblem] = []

    def need(ok: bool, field: str, value: int, message: str, fix: str) -> None:
        if not ok:
            problems.append(LayoutProblem(field, value, message, fix))

    t = layout.tp
    tp_fix = valid_tp_text(model, max_tp)
    need(
        model.num_attention_heads % t == 0,
        "parallelism.tp",
        t,
        f"tp={t} does not divide num_attention_heads={model.num_attention_heads}",
        tp_fix,
    )
    need(
        model.kv_heads % t == 0 or model.mla is not None,
        "parallelism.tp",
        t,
        f"tp={t} does not divide num_key_value_heads={model.kv_heads} (Megatron needs whole query groups per rank)",
        tp_fix,
    )
    need(
        model.intermediate_size % t == 0,
        "parallelism.tp",
        t,
        f"tp={t} does not divide intermediate_size={model.intermediate_size}",
        tp_fix,
    )
    stages = layout.pp * layout.vpp
    if layout.uneven:
        _uneven_split_problems(layout, model.num_hidden_layers, need)
    else:
        need(
            model.num_hidden_layers % stages == 0,
            "parallelism.pp",
            layout.pp,
            f"pp x vpp = {stages} does not divide num_hidden_layers={model.num_hidden_layers}",
            f"choose pp x vpp among {_divisors_text(model.num_hidden_layers)} so that every stage holds the same "
            "number of layers, or set first_stage_layers / last_stage_layers",
        )
    chunk_layers = math.ceil(max(stage_layer_counts(layout, model.num_hidden_layers)) / layout.vpp)
    need(
        layout.recompute_layers is None or layout.recompute_layers <= chunk_layers,
        "parallelism.recompute_layers",
        layout.recompute_layers or 0,
        f"recompute_layers = {layout.recompute_layers} is more than the {chunk_layers} layers of a model chunk "
        f"({model.num_hidden_layers} layers over pp {layout.pp} x vpp {layout.vpp})",
        f"give at most {chunk_layers}, or leave recompute_layers out to recompute every layer",
    )
    need(
        layout.vpp == 1 or layout.pp > 1,
        "parallelism.vpp",
        layout.vpp,
        "interleaving (vpp > 1) needs a pipeline (pp > 1)",
        "set vpp = 1 or pp > 1",
    )
    need(
        layout.cp == 1 or seq_len % (2 * layout.cp) == 0,
        "parallelism.cp",
        layout.cp,
        f"seq_len={seq_len} is not divisible by 2 x cp = {2 * layout.cp} (load-balanced causal context parallel)",
        "choose cp so that 2 x cp divides the sequence length",
    )
    if model.moe is not None:
        need(
            model.moe.num_experts % layout.ep == 0,
            "parallelism.ep",
            layout.ep,
            f"ep={layout.ep} does not divide num_experts={model.moe.num_experts}",
            f"choose ep among {_divisors_text(model.moe.num_experts)}",
        )
    need(
        (layout.dp * layout.cp) % layout.ep == 0,
        "parallelism.ep",
        layout.ep,
        f"ep={layout.ep} does not divide dp x cp = {layout.dp * layout.cp}",
        "expert parallelism splits the data-parallel ranks: make ep divide dp x cp",
    )
    if global_batch_sequences is not None:
        per_step = layout.dp * micro_batch_size
        need(
            global_batch_sequences % per_step == 0,
            "parallelism.dp",
            layout.dp,
            f"global batch of {global_batch_sequences} sequences is not divisible by dp x micro_batch_size = {per_step}",
            "choose dp and micro_batch_size that divide the global batch (in sequences)",
        )
    if num_gpus is not None:
        model_parallel = t * layout.pp * layout.cp
        need(
            layout.world_size == num_gpus,
            "parallelism.dp",
            layout.dp,
            f"tp x pp x dp x cp = {layout.world_size} but the cluster has {num_gpus} GPUs",
            f"set dp = {num_gpus // model_parallel} or change the GPU count"
            if num_gpus % model_parallel == 0
            else f"tp x pp x cp = {model_parallel} does not divide {num_gpus} GPUs: choose degrees whose product "
            f"divides the GPU count, or use a multiple of {model_parallel} GPUs",
        )
    return problems
