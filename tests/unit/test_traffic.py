"""Gradient traffic per step (perf/traffic.py): the ring formulas for the bytes, comm's collective model
for what crosses the NIC."""

from __future__ import annotations

from functools import cache

import pytest

from mfukit import catalog
from mfukit.comm.model import predict
from mfukit.comm.topology import CommTopology, from_system
from mfukit.core.parallelism import Parallelism
from mfukit.perf.traffic import GradientTraffic, gradient_traffic, nics_to_hide, ring_factor

P = 1e9  # parameters on one GPU


@cache
def topology(system: str = "dgx-a100-80gb", nodes: int = 64) -> CommTopology:
    node = catalog.system(system)
    return from_system(node, catalog.accelerator(node.accelerator), num_nodes=nodes)[0]


def traffic(layout: Parallelism, network: CommTopology | None = None, **kwargs: float) -> GradientTraffic:
    args = {"grad_bytes": 4.0, "weight_bytes": 2.0, "num_microbatches": 4, "microbatch_compute_s": 1.0}
    args.update(kwargs)
    return gradient_traffic(
        layout,
        dense_params_per_gpu=P,
        expert_params_per_gpu=0.0,
        topology=network or topology(),
        **args,  # type: ignore[arg-type]
    )


def test_ring_factor() -> None:
    assert ring_factor(1) == 0 and ring_factor(8) == pytest.approx(7 / 8)


def test_all_reduce_across_nodes() -> None:
    result = traffic(Parallelism(tp=8, dp=64))  # one DP rank per node: every byte crosses the NIC
    assert result.bytes_per_step == pytest.approx(2 * 63 / 64 * P * 4)
    assert result.inter_node_algorithm == "ring"  # what comm's model (as NCCL) runs for a 4 GB all-reduce
    assert result.inter_node_bytes_per_step == pytest.approx(2 * 63 / 64 * P * 4)
    # hidden behind the last micro-batch's backward (2/3 of its compute), not the whole step
    assert result.inter_node_bytes_per_s_required == pytest.approx(2 * 63 / 64 * P * 4 / (2 / 3))


def test_distributed_optimizer_reduce_scatter_all_gather() -> None:
    result = traffic(Parallelism(tp=8, dp=64, zero=1))
    assert result.bytes_per_step == pytest.approx(63 / 64 * P * (4 + 2))
    assert result.inter_node_bytes_per_step == pytest.approx(63 / 64 * P * (4 + 2))  # both on rings


def test_fsdp_moves_every_micro_batch() -> None:
    result = traffic(Parallelism(dp=64, fsdp="full"), topology(nodes=8))
    assert result.bytes_per_step == pytest.approx(4 * 63 / 64 * P * (2 * 2 + 4))
    assert result.inter_node_bytes_per_step == pytest.approx(4 * 63 / 64 * P * (2 * 2 + 4) / 8)


def test_zero2_and_hybrid_fsdp_reduce_every_micro_batch() -> None:
    # ZeRO-2 reduce-scatters each of the 4 micro-batches' gradients and gathers the weights once; hybrid FSDP
    # all-reduces each micro-batch's shards across the replicas (one GPU of 8 per node: 1/8 of the shard each)
    zero2 = traffic(Parallelism(tp=8, dp=64, zero=2))
    assert zero2.bytes_per_step == pytest.approx(63 / 64 * P * (4 * 4 + 2))
    assert zero2.windows_per_step == 4
    hybrid = traffic(Parallelism(dp=64, fsdp="hybrid"), topology(nodes=8))
    assert hybrid.inter_node_bytes_per_step == pytest.approx(4 * 2 * 7 / 8 * P / 8 * 4)
    assert hybrid.windows_per_step == 4


def test_dp_inside_one_node_never_crosses_it() -> None:
    result = traffic(Parallelism(tp=2, dp=4))
    assert result.inter_node_bytes_per_step == 0 and result.inter_node_algorithm == "none"


def test_a_ring_puts_a_whole_rank_through_each_node() -> None:
    """8 DP ranks per node: a ring over all n ranks leaves each node once per channel, so each NIC carries
    2(n-1)/n x S / 8, not the hierarchical 2(k-1)/k x S / 8 over k nodes (1.9x less on 2 nodes)."""
    s = P * 4
    ring = traffic(Parallelism(dp=16), topology("pcie-8x-h100", 2))  # no NVLS, no tree win: ring
    assert ring.inter_node_algorithm == "ring"
    assert ring.inter_node_bytes_per_step == pytest.approx(2 * 15 / 16 * s / 8)
    assert ring.inter_node_bytes_per_step / (2 * 1 / 2 * s / 8) == pytest.approx(1.875)
    # where the model (as NCCL) runs a double binary tree on 2 nodes, each node sends S once
    tree = traffic(Parallelism(dp=16), topology("dgx-a100-80gb", 2))
    assert tree.inter_node_algorithm == "tree"
    assert tree.inter_node_bytes_per_step == pytest.approx(s / 8)


def test_nic_bytes_are_what_the_model_times() -> None:
    """On a network-bound ring the collective model's time is the NIC bytes at the NIC share's rate."""
    network = topology("dgx-a100-80gb", 4)
    result = traffic(Parallelism(dp=32), network)
    prediction = predict("all_reduce", P * 4, network, 32, gpus_per_domain=8)
    assert prediction.algorithm == ["ring"] and prediction.bottleneck == ["network (NICs)"]
    bandwidth_s = float(prediction.time_s[0] - prediction.latency_s[0])
    assert bandwidth_s * network.nic_bytes_per_s_per_gpu == pytest.approx(result.inter_node_bytes_per_step)


def test_uneven_groups_use_the_ranks_each_node_holds() -> None:
    """DP 217 of TP 2 on 8-GPU nodes: 4 DP ranks in a node, so each NIC carries about a quarter of a rank's
    ring traffic (the LLaMA-65B sizing of docs/sizing.md)."""
    result = traffic(Parallelism(tp=2, dp=217), topology("dgx-a100-80gb", 434))
    assert result.ranks_per_domain == 4
    assert result.inter_node_bytes_per_step == pytest.approx(2 * 216 / 217 * P * 4 / 4, rel=0.01)


def test_nics_to_hide() -> None:
    result = traffic(Parallelism(tp=8, dp=64))
    needed = result.inter_node_bytes_per_s_required * 8
    assert nics_to_hide(result, gpus_per_node=8, nic_bytes_per_s=needed / 3) == 3
    assert result.exposed_s(needed / 8 * 2) == 0
