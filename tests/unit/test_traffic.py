"""Gradient traffic per step (comm/traffic.py) against the ring formulas."""

from __future__ import annotations

import pytest

from mfukit.comm.traffic import gradient_traffic, nics_to_hide, ring_factor
from mfukit.core.parallelism import Parallelism

P = 1e9  # parameters on one GPU


def traffic(layout: Parallelism, **kwargs: float) -> object:
    args = {
        "grad_bytes": 4.0,
        "weight_bytes": 2.0,
        "gpus_per_node": 8,
        "num_microbatches": 4,
        "microbatch_compute_s": 1.0,
    }
    args.update(kwargs)
    return gradient_traffic(layout, dense_params_per_gpu=P, expert_params_per_gpu=0.0, **args)  # type: ignore[arg-type]


def test_ring_factor() -> None:
    assert ring_factor(1) == 0 and ring_factor(8) == pytest.approx(7 / 8)


def test_all_reduce_across_nodes() -> None:
    result = traffic(Parallelism(tp=8, dp=64))
    assert result.bytes_per_step == pytest.approx(2 * 63 / 64 * P * 4)  # type: ignore[attr-defined]
    assert result.inter_node_bytes_per_step == pytest.approx(2 * 63 / 64 * P * 4)  # type: ignore[attr-defined]
    # hidden behind the last micro-batch's backward (2/3 of its compute), not the whole step
    assert result.inter_node_bytes_per_s_required == pytest.approx(2 * 63 / 64 * P * 4 / (2 / 3))  # type: ignore[attr-defined]


def test_distributed_optimizer_reduce_scatter_all_gather() -> None:
    result = traffic(Parallelism(tp=8, dp=64, zero=1))
    assert result.bytes_per_step == pytest.approx(63 / 64 * P * (4 + 2))  # type: ignore[attr-defined]


def test_fsdp_moves_every_micro_batch() -> None:
    result = traffic(Parallelism(dp=64, fsdp="full"))
    assert result.bytes_per_step == pytest.approx(4 * 63 / 64 * P * (2 * 2 + 4))  # type: ignore[attr-defined]


def test_dp_inside_one_node_never_crosses_it() -> None:
    assert traffic(Parallelism(tp=2, dp=4)).inter_node_bytes_per_step == 0  # type: ignore[attr-defined]


def test_hierarchical_share_of_the_nic() -> None:
    # 8 DP ranks per node over 4 nodes: each NIC carries 2(k-1)/k x S / r
    result = traffic(Parallelism(dp=32))
    assert result.inter_node_bytes_per_step == pytest.approx(2 * 3 / 4 * P * 4 / 8)  # type: ignore[attr-defined]


def test_nics_to_hide() -> None:
    result = traffic(Parallelism(tp=8, dp=64))
    needed = result.inter_node_bytes_per_s_required * 8  # type: ignore[attr-defined]
    assert nics_to_hide(result, gpus_per_node=8, nic_bytes_per_s=needed / 3) == 3  # type: ignore[arg-type]
    assert result.exposed_s(needed / 8 * 2) == 0  # type: ignore[attr-defined]
