"""The collectives of one training step, placed on the cluster's tiers and timed with the collective model.

Ranks are ordered as Megatron-LM orders them (``megatron/core/parallel_state.py``, order ``tp-cp-ep-dp-pp``):
tensor-parallel ranks are adjacent, context- and data-parallel ranks are ``tp`` apart, expert-data-parallel
ranks ``tp x ep`` apart and pipeline stages ``tp x cp x dp`` apart. A group therefore fills each scale-up
(NVLink) domain it spans with ``domain / stride`` ranks, the last domain holding the rest (64 data-parallel
ranks 2 apart on 72-GPU NVL72 domains: 36 and 28), and it crosses the network as soon as one domain cannot
hold it all. Each collective is timed by
:func:`mfukit.comm.model.collective_time_s` (NCCL's algorithms and protocols on the topology's tiers);
message sizes follow nccl-tests (all-gather and reduce-scatter: the whole gathered buffer; all-to-all: the
bytes one rank sends). None of this depends on the fitted efficiency constants, so the planner and the
calibration compute it once per layout.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mfukit.comm.collectives import Collective
from mfukit.comm.model import collective_time_s
from mfukit.comm.topology import CommTopology
from mfukit.perf.layouts import SHARDINGS, Floats, Ints, LayoutGrid, unique_rows

_SHARDED_STATES = np.asarray([name not in {"none"} for name in SHARDINGS])
_GATHERS_PARAMS = np.asarray([name in {"zero-3", "fsdp-full", "fsdp-hybrid"} for name in SHARDINGS])
_HYBRID = np.asarray([name == "fsdp-hybrid" for name in SHARDINGS])


def ranks_per_domain(group: Ints, stride: Ints, domain_gpus: int) -> Ints:
    """Ranks of a group whose members are ``stride`` ranks apart in each full scale-up domain it spans (the
    last may hold fewer: the collective model prices it with that domain's NICs)."""
    per_domain = np.maximum(1, domain_gpus // np.maximum(stride, 1))
    return np.asarray(np.minimum(group, per_domain), dtype=np.int64)


def collective_s(
    collective: Collective, message_bytes: Floats, group: Ints, per_domain: Ints, topology: CommTopology
) -> Floats:
    """Seconds for one ``collective`` per configuration (0 for a group of one rank or no bytes)."""
    sizes = np.broadcast_to(np.asarray(message_bytes, dtype=np.float64), group.shape)
    out = np.zeros(group.shape, dtype=np.float64)
    active = (group > 1) & (sizes > 0)
    if not active.any():
        return out
    # the planner's layouts share few distinct (size, group, placement) triples: time each once
    (unique_sizes, unique_groups, unique_local), inverse = unique_rows(
        sizes[active], group[active], per_domain[active]
    )
    times = np.zeros(len(unique_sizes))
    for local in np.unique(unique_local):
        mask = unique_local == local
        times[mask] = collective_time_s(
            collective, unique_sizes[mask], topology, unique_groups[mask], gpus_per_domain=int(local)
        )
    out[active] = times[inverse]
    return out


def p2p_s(message_bytes: Floats, crosses_domain: np.ndarray, topology: CommTopology) -> Floats:
    """One send/receive between two ranks, inside a domain or across the network."""
    pair = np.full(crosses_domain.shape, 2, dtype=np.int64)
    return collective_s("send_recv", message_bytes, pair, np.where(crosses_domain, 1, 2), topology)


@dataclass(frozen=True)
class DataParallelTimes:
    """Per-step data-parallel collectives of one pipeline stage (seconds, before overlap)."""

    grad_sync_s: Floats  # all-reduce (DDP) or reduce-scatter (sharded optimizer) of the gradients
    param_gather_s: Floats  # all-gather of the updated weights (sharded optimizer)
    bucket_s: Floats  # the last gradient bucket, which no backward compute can hide
    unit_gather_s: Floats  # ZeRO-3/FSDP: all-gather of one layer's weights, per micro-batch
    unit_reduce_s: Floats  # ZeRO-3/FSDP: reduce-scatter of one layer's gradients, per micro-batch
    unit_collectives: Floats  # ZeRO-3/FSDP: all-gathers one layer's weights take (1, or one per matrix)
    unit_prefetch_share: Floats  # the share of the next layer's weights gathered ahead of its compute


@dataclass(frozen=True)
class CommTimes:
    """Every collective of a step, per configuration, before overlap with compute."""

    tp_fwd_s: Floats  # per layer, forward: two all-reduces, or two all-gathers + two reduce-scatters (SP)
    tp_all_gather_s: Floats  # one all-gather of a micro-batch's hidden states over TP (SP)
    tp_reduce_scatter_s: Floats  # one reduce-scatter of them
    tp_bwd_blocking_s: Floats  # per layer, backward, that compute waits for (SP all-gathers)
    tp_bwd_overlappable_s: Floats  # per layer, backward, that can run under the column-parallel GEMMs
    cp_fwd_step_s: Floats  # one ring step of context parallelism, forward (K and V of a chunk)
    cp_bwd_step_s: Floats  # one ring step, backward (K, V and their gradients)
    ep_all_to_all_s: Floats  # one all-to-all of an MoE layer (dispatch or combine)
    pp_p2p_s: Floats  # one activation (or its gradient) between adjacent pipeline stages
    dp_first: DataParallelTimes
    dp_last: DataParallelTimes
    crosses_network: dict[str, np.ndarray]  # per dimension: does its group leave the scale-up domain


@dataclass(frozen=True)
class CommInputs:
    """What the collectives move, per configuration (bytes), from the step model's shapes."""

    activation_bytes: Floats  # one micro-batch's hidden states on one TP group (T x h x 2)
    kv_chunk_bytes: Floats  # K and V of one CP rank's tokens, per TP rank
    dispatch_bytes: Floats  # tokens x top-k x h x 2 that one rank sends in an MoE all-to-all
    p2p_bytes: Floats  # activation sent to the next stage (scattered over TP)
    grad_bytes_per_param: Floats
    weight_bytes_per_param: float
    first_params: tuple[Floats, Floats]  # dense, expert params of the first stage per GPU
    last_params: tuple[Floats, Floats]
    first_unit_params: Floats  # the largest ZeRO-3/FSDP unit (one layer) of the first stage
    last_unit_params: Floats
    # FSDP's units of the first stage: its layers, and the dense parameters outside them (embedding, output
    # layer, final norm: the root unit), per GPU
    first_units: tuple[Floats, Floats]
    last_units: tuple[Floats, Floats]
    hybrid_shard_ranks: Ints  # ranks sharing one copy under hybrid FSDP (dp x cp otherwise)
    bucket_params: float  # parameters in one gradient bucket (inf: the whole buffer at once)
    unit_collectives: float = 1.0  # ZeRO-3/FSDP all-gathers per layer (DeepSpeed: one per weight matrix)
    prefetch_params: float = float("inf")  # ZeRO-3/FSDP parameters gathered ahead (inf: the next unit)


def _data_parallel(
    g: LayoutGrid,
    x: CommInputs,
    params: tuple[Floats, Floats],
    unit: Floats,
    units: tuple[Floats, Floats],
    topology: CommTopology,
) -> DataParallelTimes:
    domain = topology.domain_gpus
    dense, expert = params
    group = g.dp * g.cp
    expert_group = np.maximum(1, group // g.ep)
    hybrid = _HYBRID[g.sharding]
    shard = np.where(hybrid, x.hybrid_shard_ranks, group)
    per = ranks_per_domain(shard, g.tp, domain)
    expert_per = ranks_per_domain(expert_group, g.tp * g.ep, domain)
    sharded = _SHARDED_STATES[g.sharding] & ~_GATHERS_PARAMS[g.sharding]
    gathers = _GATHERS_PARAMS[g.sharding]
    w = x.weight_bytes_per_param
    grad = x.grad_bytes_per_param

    def sync(params_: Floats, group_: Ints, per_: Ints) -> tuple[Floats, Floats]:
        # one collective per bucket: each pays the collective's latency (its steps across the group)
        buckets = np.maximum(1.0, np.ceil(params_ / x.bucket_params))
        bucket = params_ / buckets
        reduce_scatter = buckets * collective_s("reduce_scatter", bucket * grad, group_, per_, topology)
        all_reduce = buckets * collective_s("all_reduce", bucket * grad, group_, per_, topology)
        gather = buckets * collective_s("all_gather", bucket * w, group_, per_, topology)
        return np.where(sharded, reduce_scatter, all_reduce), np.where(sharded, gather, 0.0)

    dense_sync, dense_gather = sync(dense, group, ranks_per_domain(group, g.tp, domain))
    expert_sync, expert_gather = sync(expert, expert_group, expert_per)
    # Hybrid FSDP: each unit's gradient shard, once reduce-scattered inside its replica, all-reduces across
    # the replicas in that unit's post-backward hook (FSDP's _post_backward_hook, FSDP2's foreach_reduce), under
    # the backward of the units still to run: one all-reduce per layer, and the root unit's (embedding, output
    # layer, final norm) last, when the backward has finished, so nothing hides it.
    layers, outside = units
    replicas = np.maximum(1, group // shard)
    ones = np.ones_like(replicas)
    in_layers = (dense - outside) / shard + expert / np.maximum(1, shard // g.ep)
    layer_sync = collective_s(
        "all_reduce", in_layers / np.maximum(layers, 1.0) * grad, replicas, ones, topology
    )
    root_sync = collective_s("all_reduce", outside / shard * grad, replicas, ones, topology)
    grad_sync = np.where(
        gathers, np.where(hybrid, layers * layer_sync + root_sync, 0.0), dense_sync + expert_sync
    )
    total = np.maximum(dense + expert, 1.0)
    last_unit = np.where(outside > 0, root_sync, layer_sync)
    bucket_s = np.where(hybrid, last_unit, grad_sync * np.minimum(1.0, x.bucket_params / total))
    # ZeRO-3/FSDP: a unit's weights in ``unit_collectives`` all-gathers (each paying the ring's latency), its
    # gradients in one reduce-scatter; only ``prefetch_params`` of it are gathered ahead of its compute
    # (DeepSpeed's stage3_prefetch_bucket_size; FSDP's backward prefetch takes the whole next unit)
    calls = x.unit_collectives
    return DataParallelTimes(
        grad_sync_s=grad_sync,
        param_gather_s=np.where(gathers, 0.0, dense_gather + expert_gather),
        bucket_s=bucket_s,
        unit_gather_s=np.where(
            gathers, calls * collective_s("all_gather", unit * w / calls, shard, per, topology), 0.0
        ),
        unit_reduce_s=np.where(
            gathers, collective_s("reduce_scatter", unit * grad, shard, per, topology), 0.0
        ),
        unit_collectives=np.where(gathers, calls, 0.0),
        unit_prefetch_share=np.minimum(1.0, x.prefetch_params / np.maximum(unit, 1.0)),
    )


def communication_times(g: LayoutGrid, x: CommInputs, topology: CommTopology) -> CommTimes:
    """Every collective of the step for every configuration of ``g``."""
    domain = topology.domain_gpus
    ones = np.ones_like(g.tp)
    tp_per = ranks_per_domain(g.tp, ones, domain)
    act = x.activation_bytes
    all_reduce = collective_s("all_reduce", act, g.tp, tp_per, topology)
    all_gather = collective_s("all_gather", act, g.tp, tp_per, topology)
    reduce_scatter = collective_s("reduce_scatter", act, g.tp, tp_per, topology)
    # Forward: two all-reduces (row-parallel outputs), or with SP two all-gathers (column-parallel
    # inputs) and two reduce-scatters (row-parallel outputs) (Korthikanti et al. 2022, §4.2.2).
    # Backward, as Megatron's LinearWithGradAccumulationAndAsyncCommunication runs it: without SP the two
    # input-gradient all-reduces overlap the weight-gradient GEMMs; with SP the conjugate all-gathers of
    # the row-parallel outputs block, while the re-gathered inputs (under the input-gradient GEMM) and the
    # input-gradient reduce-scatters (under the weight-gradient GEMM) overlap.
    sp = g.sp
    tp_fwd = np.where(sp, 2 * (all_gather + reduce_scatter), 2 * all_reduce)
    tp_bwd_blocking = np.where(sp, 2 * all_gather, 0.0)
    tp_bwd_overlappable = np.where(sp, 2 * (reduce_scatter + all_gather), 2 * all_reduce)
    cp_crosses = ranks_per_domain(g.cp, g.tp, domain) < g.cp
    ep_per = ranks_per_domain(g.ep, g.tp, domain)
    pp_crosses = g.tp * g.cp * g.dp * g.pp > domain
    return CommTimes(
        tp_fwd_s=tp_fwd,
        tp_all_gather_s=all_gather,
        tp_reduce_scatter_s=reduce_scatter,
        tp_bwd_blocking_s=tp_bwd_blocking,
        tp_bwd_overlappable_s=tp_bwd_overlappable,
        cp_fwd_step_s=np.where(g.cp > 1, p2p_s(x.kv_chunk_bytes, cp_crosses, topology), 0.0),
        cp_bwd_step_s=np.where(g.cp > 1, p2p_s(2 * x.kv_chunk_bytes, cp_crosses, topology), 0.0),
        ep_all_to_all_s=collective_s("all_to_all", x.dispatch_bytes, g.ep, ep_per, topology),
        pp_p2p_s=np.where(g.pp > 1, p2p_s(x.p2p_bytes, pp_crosses, topology), 0.0),
        dp_first=_data_parallel(g, x, x.first_params, x.first_unit_params, x.first_units, topology),
        dp_last=_data_parallel(g, x, x.last_params, x.last_unit_params, x.last_units, topology),
        crosses_network={
            "tp": tp_per < g.tp,
            "cp": cp_crosses,
            "ep": ep_per < g.ep,
            "dp": ranks_per_domain(g.dp * g.cp, g.tp, domain) < g.dp * g.cp,
            "pp": pp_crosses & (g.pp > 1),
        },
    )
