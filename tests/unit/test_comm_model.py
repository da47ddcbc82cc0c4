"""The collective model's formulas against NCCL's own numbers and the algorithms' textbook costs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mfukit import catalog
from mfukit.comm.collectives import busbw_factor, collective_named
from mfukit.comm.model import estimates, group_of, predict
from mfukit.comm.topology import CommTopology, from_system, switch_hops
from mfukit.comm.tuning import constants
from mfukit.errors import InputError, UnknownNameError
from mfukit.perf.step_comm import ranks_per_domain


def topology(name: str = "dgx-h100", nodes: int = 1, **kwargs) -> CommTopology:  # type: ignore[no-untyped-def]
    system = catalog.system(name)
    return from_system(system, catalog.accelerator(system.accelerator), num_nodes=nodes, **kwargs)[0]


def test_reproduces_nccls_own_tuning_output() -> None:
    """nccl#1453 (H100 cluster, 2 nodes x 8): 'NCCL INFO 128 Bytes -> Algo 0 proto 0 time 25.214764'
    (Algo 0 = Tree, proto 0 = LL): our tree/LL estimate with NCCL's constants."""
    topo = topology("dgx-h100", 2)
    tree_ll = next(
        e for e in estimates("all_reduce", 128, topo, 16) if (e.algorithm, e.protocol) == ("tree", "ll")
    )
    assert float(tree_ll.time_s(np.asarray([128.0]))[0]) == pytest.approx(25.214764e-6, rel=1e-3)
    assert predict("all_reduce", 128, topo, 16).algorithm == ["tree"]


def test_ring_busbw_is_ncclss_nvlink_constant() -> None:
    assert topology("dgx-a100-80gb").intra_bytes_per_s == pytest.approx(12 * 20e9)
    assert topology("dgx-h100").intra_bytes_per_s == pytest.approx(18 * 20.6e9)


def test_busbw_factors_of_nccl_tests() -> None:
    assert float(busbw_factor("all_reduce", 8)) == pytest.approx(1.75)
    assert float(busbw_factor("all_gather", 8)) == pytest.approx(0.875)
    assert float(busbw_factor("all_reduce", 1)) == 0.0
    assert float(busbw_factor("broadcast", 8)) == 1.0
    assert collective_named("AllReduce") == collective_named("all_reduce_perf") == "all_reduce"
    with pytest.raises(UnknownNameError):
        collective_named("allreduse")


def test_ring_tree_crossover_on_many_nodes() -> None:
    prediction = predict(
        "all_reduce", [2**10, 2**34], topology("dgx-h100", 64), 512, choices=frozenset({"ring", "tree"})
    )
    assert prediction.algorithm == ["tree", "ring"]


def test_two_node_tree_passes_the_nic_limit_but_a_ring_does_not() -> None:
    topo = topology("dgx-a100-80gb", 2)
    nic_limit = 8 * 25e9 * 0.96
    ring = predict("all_reduce", 2**33, topo, 16, algorithm="ring")
    tree = predict("all_reduce", 2**33, topo, 16, algorithm="tree")
    assert ring.busbw_bytes_per_s[0] <= nic_limit < tree.busbw_bytes_per_s[0]


def test_nvls_only_where_nvlink_sharp_exists() -> None:
    with pytest.raises(InputError, match="NVLink SHARP"):
        predict("all_reduce", 2**30, topology("dgx-a100-80gb"), 8, algorithm="nvls")
    nvls = predict("all_reduce", 2**33, topology("dgx-h100"), 8, algorithm="nvls")
    eff = constants().arch["hopper"].nvls_efficiency * 15 / 16
    assert nvls.algbw_bytes_per_s[0] == pytest.approx(18 * 20.6e9 * eff, rel=0.01)


def test_collnet_needs_sharp_and_halves_the_network_traffic() -> None:
    with pytest.raises(InputError, match="sharp"):
        predict("all_reduce", 2**30, topology("dgx-h100", 8), 64, algorithm="collnet")
    sharp = topology("dgx-h100", 8, sharp=True)
    collnet = predict("all_reduce", 2**34, sharp, 64, algorithm="collnet")
    ring = predict("all_reduce", 2**34, sharp, 64, algorithm="ring")
    assert collnet.algbw_bytes_per_s[0] > 1.5 * ring.algbw_bytes_per_s[0]


def test_send_recv_is_a_pair() -> None:
    with pytest.raises(InputError, match="exactly 2"):
        predict("send_recv", 2**20, topology(), 8)
    inside = predict("send_recv", 2**30, topology("dgx-h100", 2), 2)
    across = predict("send_recv", 2**30, topology("dgx-h100", 2), 2, gpus_per_domain=1)
    assert inside.bottleneck == ["NVLink 4"] and across.bottleneck == ["network (NICs)"]
    assert across.algbw_bytes_per_s[0] == pytest.approx(50e9 * 0.96, rel=0.01)


def test_hierarchical_trades_bandwidth_for_fewer_steps() -> None:
    topo = topology("dgx-h100", 64)
    small = predict("all_reduce", 8, topo, 512, algorithm="hierarchical").time_s[0]
    assert small < predict("all_reduce", 8, topo, 512, algorithm="ring", protocol="ll").time_s[0]
    large = predict("all_reduce", 2**34, topo, 512, algorithm="hierarchical").time_s[0]
    assert large > predict("all_reduce", 2**34, topo, 512, algorithm="ring").time_s[0]


def test_flat_rhd_puts_every_gpu_on_the_network() -> None:
    """Rabenseifner over 16 nodes sends 2(N-1)/N S per GPU through its own NIC, a ring one GPU's worth per node."""
    topo = topology("dgx-h100", 16)
    rhd = predict("all_reduce", 2**34, topo, 128, algorithm="rhd")
    ring = predict("all_reduce", 2**34, topo, 128, algorithm="ring")
    assert ring.busbw_bytes_per_s[0] / rhd.busbw_bytes_per_s[0] == pytest.approx(7.0, rel=0.1)


def test_bruck_fewer_steps_more_bytes() -> None:
    topo = topology("dgx-h100", 32)
    assert (
        predict("all_to_all", 64, topo, 256, algorithm="bruck").time_s[0]
        < predict("all_to_all", 64, topo, 256, algorithm="pairwise").time_s[0]
    )
    assert (
        predict("all_to_all", 2**32, topo, 256, algorithm="bruck").time_s[0]
        > predict("all_to_all", 2**32, topo, 256, algorithm="pairwise").time_s[0]
    )


def test_all_to_all_busbw_is_the_per_gpu_nic() -> None:
    prediction = predict("all_to_all", 2**34, topology("dgx-h100", 16), 128)
    assert prediction.busbw_bytes_per_s[0] == pytest.approx(50e9 * 0.96 * 127 / 120, rel=0.02)


def test_oversubscription_slows_all_to_all_beyond_the_leaf_group() -> None:
    flat = topology("dgx-h100", 128)
    thin = flat.with_options(oversubscription=4.0)
    ratio = (
        predict("all_to_all", 2**34, thin, 1024).time_s[0]
        / predict("all_to_all", 2**34, flat, 1024).time_s[0]
    )
    assert ratio == pytest.approx(4.0 * (128 - 32) / 127, rel=0.02)
    ring_ratio = (
        predict("all_reduce", 2**34, thin, 1024).time_s[0]
        / predict("all_reduce", 2**34, flat, 1024).time_s[0]
    )
    assert ring_ratio == pytest.approx(1.0, abs=0.01)  # 4:1 < 32 nodes per leaf: rings do not notice


def test_topology_tiers_from_the_catalog() -> None:
    rail = topology("dgx-h100", 1024)
    tor = topology("dgx-h100", 1024, rail_optimized=False)
    assert (rail.nodes_per_leaf, tor.nodes_per_leaf, rail.fabric_levels) == (32, 4, 3)
    assert switch_hops(rail, 32) == 1 and switch_hops(rail, 33) == 5 and switch_hops(tor, 8) == 5
    # QM8790 has 40 HDR ports, 20 down: the DGX A100 SuperPOD scalable unit of 20 nodes per rail leaf
    assert topology("dgx-a100-80gb").nodes_per_leaf == 20


def test_one_gpu_costs_nothing() -> None:
    prediction = predict("all_reduce", 2**30, topology(), 1)
    assert prediction.time_s[0] == 0 and prediction.busbw_bytes_per_s[0] == 0


def test_bad_requests() -> None:
    with pytest.raises(UnknownNameError):
        predict("all_reduce", 8, topology(), 8, algorithm="butterfly")  # type: ignore[arg-type]
    with pytest.raises(InputError):
        predict("all_reduce", -1, topology(), 8)
    with pytest.raises(InputError):
        predict("all_reduce", 8, topology(), 0)
    with pytest.raises(InputError):
        predict("all_reduce", 8, topology("dgx-h100", 2), 16, gpus_per_domain=9)  # more than a node holds
    with pytest.raises(InputError, match="simple protocol"):
        predict("all_reduce", 8, topology(), 8, algorithm="nvls", protocol="ll")


def test_ranks_that_do_not_fill_every_domain_leave_the_last_one_partial() -> None:
    # 64 data-parallel ranks 2 apart on 72-GPU NVL72 domains (Megatron's order): 36 in the first, 28 in the
    # second, not the 4 per domain a common divisor of 64 and 36 would say
    assert int(ranks_per_domain(np.asarray([64]), np.asarray([2]), 72)[0]) == 36
    assert int(ranks_per_domain(np.asarray([12]), np.asarray([1]), 8)[0]) == 8  # 8 + 4 on 8-GPU nodes
    assert int(ranks_per_domain(np.asarray([4]), np.asarray([16]), 8)[0]) == 1  # 16 apart: one a node
    group = group_of(topology("dgx-h100", 2), 12, gpus_per_domain=8)
    assert (group.num_domains, group.gpus_per_domain, group.smallest_domain_gpus) == (2, 8, 4)
    packed = predict("all_reduce", 1 << 28, topology("dgx-h100", 2), 12)
    assert float(
        predict("all_reduce", 1 << 28, topology("dgx-h100", 2), 12, gpus_per_domain=8).time_s[0]
    ) == (pytest.approx(float(packed.time_s[0])))


@pytest.mark.parametrize("gpus", [9, 12, 20, 30])
def test_a_partial_node_bounds_every_inter_node_algorithm(gpus: int) -> None:
    """NCCL builds the same channels on every node (and minLocalRanks NVLS heads), so the node with the fewest
    GPUs, each with its one 400 Gb/s NIC (x 0.96 busbw/line), bounds the network part: ring busbw and
    NVLSTree algbw (2 nodes: S per node; more: 2S) are at most that node's NICs."""
    topo = topology("dgx-h100", math.ceil(gpus / 8))
    smallest = gpus - 8 * (gpus // 8) or 8
    node_nics = smallest * 50e9 * 0.96
    size = np.asarray([8.0 * 2**30])
    found = {(e.algorithm, e.protocol): e for e in estimates("all_reduce", size, topo, gpus)}
    ring = float(found[("ring", "simple")].algbw_bytes_per_s[0]) * float(busbw_factor("all_reduce", gpus))
    assert ring == pytest.approx(min(node_nics, topo.intra_bytes_per_s))
    per_node = 1.0 if gpus <= 16 else 2.0
    assert float(found[("nvls_tree", "simple")].algbw_bytes_per_s[0]) <= node_nics / per_node * (1 + 1e-9)
