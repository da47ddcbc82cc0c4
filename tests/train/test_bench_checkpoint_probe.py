"""The disk probe of `bench checkpoint` writes the save's own bytes in DCP's layout."""

from __future__ import annotations

from pathlib import Path

import pytest

from mfukit.train.bench_checkpoint import _split, _write_file, disk_write_bytes_per_s

pytestmark = pytest.mark.torch


def test_split_balances_bytes_like_dcp() -> None:
    sizes = [64, 64, 32, 32, 16, 8]
    buffers = [memoryview(bytes(size)) for size in sizes]
    buckets = _split(buffers, 2)
    assert sorted(sum(b.nbytes for b in bucket) for bucket in buckets) == [
        104,
        112,
    ]  # largest first to the least loaded
    assert sorted(b.nbytes for bucket in buckets for b in bucket) == sorted(sizes)


def test_probe_writes_exactly_the_buffers(tmp_path: Path) -> None:
    import array

    floats = memoryview(array.array("f", [1.5, -2.0, 3.25]))
    _write_file(tmp_path / "out.bin", [floats, memoryview(b"tail")])
    assert (tmp_path / "out.bin").read_bytes() == floats.tobytes() + b"tail"
    rate = disk_write_bytes_per_s(tmp_path, [floats] * 8, 4)
    assert rate > 0
    assert list(tmp_path.iterdir()) == [tmp_path / "out.bin"]  # the probe's files are removed
