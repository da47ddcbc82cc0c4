"""The GEMM curve: waves, tiles, split-K and the memory roofline behave as the hardware does."""

from __future__ import annotations

import numpy as np
import pytest

from mfukit.perf.gemm import TILES, GemmCurve, Shapes

PEAK = 312e12 * 0.75  # A100 dense BF16 x a peak fraction
HBM = 2.0e12 * 0.8


def curve(units: int | None = 108, half: float = 16.0, k0: float = 32.0, latency: float = 0.0) -> GemmCurve:
    return GemmCurve(PEAK, units, tile_half_dim=half, k_overhead=k0, latency_s=latency, hbm_bytes_per_s=HBM)


def time(c: GemmCurve, m: float, k: float, n: float, batch: float = 1.0) -> float:
    bytes_moved = batch * 2.0 * (m * k + k * n + m * n)
    return float(
        c.time_s(
            Shapes.of(np.asarray([m]), np.asarray([k]), np.asarray([n]), batch, np.asarray([bytes_moved]))
        )[0]
    )


def best_tile_efficiency(half: float) -> float:
    return max(1 / (1 + half * (1 / tm + 1 / tn) / 2) for tm, tn in TILES)


def test_a_large_gemm_runs_at_the_best_tiles_efficiency() -> None:
    m = k = n = 16384.0
    c = curve()
    ideal = 2 * m * k * n / (PEAK * best_tile_efficiency(16.0))
    assert time(c, m, k, n) == pytest.approx(ideal, rel=0.03)  # waves and k0 cost < 3 % here


def test_waves_only_add_time() -> None:
    # spreading tiles evenly (no wave quantisation) is the lower bound the quantised GPU never beats
    for m, n in ((1024, 1536), (2048, 2304), (4096, 768), (3000, 5000)):
        assert time(curve(108), m, 2048, n) >= time(curve(None), m, 2048, n) * (1 - 1e-12)


def test_one_row_past_a_full_wave_costs_a_partial_second_wave() -> None:
    # 108 SMs: 1536 x 2304 is 12 x 9 = 108 tiles of 128 x 256, one full wave; one more row of output needs
    # a second, nearly idle wave (or smaller, less efficient tiles): the time per FLOP jumps
    c = curve()
    per_flop = [time(c, m, 4096, 2304) / (2 * m * 4096 * 2304) for m in (1536, 1537)]
    assert per_flop[1] > 1.2 * per_flop[0]


def test_a_batched_gemm_fills_the_gpu_that_one_small_gemm_cannot() -> None:
    c = curve(latency=5e-6)
    one = time(c, 1024, 64, 1024)
    batched = time(c, 1024, 64, 1024, batch=128)
    assert batched < 128 * one / 4  # one launch, full waves: far cheaper than 128 separate kernels


def test_split_k_helps_a_small_output_with_a_long_reduction() -> None:
    c = curve()
    m = n = 256.0
    k = 65536.0
    unsplit = 2 * 128 * 256 * (k + 32.0) * 108 / (PEAK * (1 / (1 + 16 * (1 / 128 + 1 / 256) / 2)))
    assert time(c, m, k, n) < unsplit / 2


def test_a_gemm_with_a_tiny_reduction_is_memory_bound() -> None:
    m = n = 8192.0
    k = 8.0
    assert time(curve(), m, k, n) == pytest.approx(2.0 * (m * k + k * n + m * n) / HBM, rel=1e-9)


def test_shapes_are_evaluated_once_per_distinct_shape() -> None:
    m = np.asarray([1024.0, 2048.0, 1024.0, 2048.0])
    shapes = Shapes.of(m, np.full(4, 4096.0), np.full(4, 4096.0), 1.0, 2 * m * 4096)
    assert shapes.table.shape[1] == 2 and shapes.inverse.tolist() == [0, 1, 0, 1]
