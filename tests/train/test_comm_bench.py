"""The live benchmarks' arithmetic and nccl-tests' output format."""

from __future__ import annotations

import pytest

from mfukit.comm.bench import CollectiveRow, matmul_sweep, membw_sweep, nccl_tests_text, sizes

pytestmark = pytest.mark.torch


def row(op: str, size: int, ranks: int, out_s: float, in_s: float) -> CollectiveRow:
    return CollectiveRow(
        op=op,
        size_bytes=size,
        count=size // 4,
        redop="sum",
        root=-1,
        out_time_s=out_s,
        out_wrong=0,
        in_time_s=in_s,
        in_wrong=0,
        ranks=ranks,
        iterations=20,
    )


def test_busbw_factors_of_nccl_tests() -> None:
    # doc/PERFORMANCE.md: 1 GB all_reduce in 10 ms on 8 ranks: algbw 100 GB/s, busbw 175 GB/s
    all_reduce = row("all_reduce", 10**9, 8, 0.01, 0.01)
    assert all_reduce.algbw_bytes_per_s(False) == pytest.approx(100e9)
    assert all_reduce.busbw_bytes_per_s(False) == pytest.approx(175e9)
    assert row("all_gather", 10**9, 8, 0.01, 0.01).busbw_bytes_per_s(True) == pytest.approx(87.5e9)
    assert row("broadcast", 10**9, 8, 0.01, 0.01).busbw_bytes_per_s(True) == pytest.approx(100e9)


def test_text_has_nccl_tests_columns() -> None:
    rows = [row("all_reduce", 1048576, 2, 28.15e-6, 27.52e-6), row("all_reduce", 8, 2, 135.8e-6, 123.5e-6)]
    text = nccl_tests_text(
        rows,
        devices=["#  Rank  0 Group  0 Pid      1 on       host device  0 [0000:00:00] CPU"],
        min_bytes=8,
        max_bytes=1048576,
        factor=2,
    )
    lines = text.splitlines()
    assert lines[0].startswith(
        "# nThread 1 nGpus 1 minBytes 8 maxBytes 1048576 step: 2(factor) warmup iters: 2 iters: 20"
    )
    assert (
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong"
        in lines
    )
    data = [line for line in lines if not line.startswith("#")]
    # the layout of a real all_reduce_perf row (nccl-tests, builds up to 2024)
    assert (
        data[0]
        == "     1048576        262144     float     sum      -1    28.15   37.25   37.25      0    27.52   38.10   38.10      0"
    )
    assert (
        data[1]
        == "           8             2     float     sum      -1    135.8    0.00    0.00      0    123.5    0.00    0.00      0"
    )
    assert lines[-3] == "# Out of bounds values : 0 OK"
    average = (37.25 + 38.10 + 0 + 0) / 4
    assert float(lines[-2].split(":")[1]) == pytest.approx(average, rel=1e-3)


def test_size_sweep_is_whole_floats() -> None:
    assert sizes(8, 128, 2) == [8, 16, 32, 64, 128]
    assert sizes(10, 100, 4) == [8, 40]


def test_matmul_and_copy_rates_are_work_over_time() -> None:
    (point,) = matmul_sweep("cpu", ["fp32"], [128], min_time_s=0.01)
    assert point.flops_per_s == pytest.approx(2 * 128**3 / point.time_s)
    (copy,) = membw_sweep("cpu", [1 << 20], min_time_s=0.01)
    assert copy.bytes_per_s == pytest.approx(2 * (1 << 20) / copy.time_s)
