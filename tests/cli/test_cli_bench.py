"""`mfukit bench` end to end on CPU: collectives under torchrun (validated results), checkpoint I/O, a step's MFU."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.torch

MICRO = str(Path(__file__).parents[1] / "data" / "train" / "micro.toml")


@pytest.mark.slow
def test_collectives_are_correct_and_in_nccl_tests_format(mfukit: Any, tmp_path: Path) -> None:
    run = mfukit(
        "bench", "collectives", "--nproc", "2", "-b", "8", "-e", "4KiB", "-f", "8",
        "--min-time", "2ms", "--out", str(tmp_path), "--format", "json",
    )  # fmt: skip
    assert run.exit_code == 0, run.stderr
    result = run.json()["result"]
    assert (result["backend"], result["ranks"]) == ("gloo", 2)
    for op in ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast"):
        rows = result["ops"][op]
        assert [r["size_bytes"] for r in rows] == [8, 64, 512, 4096]
        assert all(r["out_wrong"] == 0 and r["in_wrong"] == 0 for r in rows), op  # every element checked
        text = (tmp_path / f"{op}.txt").read_text()
        assert text == f"# {op}_perf (mfukit bench collectives, gloo)\n" + result["nccl_tests"][op]
        assert "# Out of bounds values : 0 OK" in text
        data = [line.split() for line in text.splitlines() if not line.startswith("#")]
        assert len(data) == 4 and all(len(fields) == 13 for fields in data)


def test_checkpoint_io_against_the_disk(mfukit: Any, tmp_path: Path) -> None:
    run = mfukit("bench", "checkpoint", "--size", "16MiB", "--dir", str(tmp_path), "--format", "json")
    assert run.exit_code == 0, run.stderr
    result = run.json()["result"]
    assert result["state_bytes"] == 16 * 2**20
    assert result["save_vs_disk"] == pytest.approx(
        result["save_bytes_per_s"] / result["disk_write_bytes_per_s"]
    )
    assert 0 < result["async_blocking_s"] < result["async_total_s"]
    assert list(tmp_path.iterdir()) == []  # the scratch files are removed


def test_step_mfu_of_the_micro_model(mfukit: Any) -> None:
    run = mfukit(
        "bench",
        "step",
        MICRO,
        "--steps",
        "2",
        "--device",
        "cpu",
        "--peak-flops",
        "20 GFLOPS",
        "--format",
        "json",
    )
    assert run.exit_code == 0, run.stderr
    result = run.json()["result"]
    assert result["tokens_per_step"] == 2 * 16  # micro batch 2 x seq 16
    assert result["mfu"] == pytest.approx(result["flops_per_token"] * result["tokens_per_s"] / 20e9)
    assert len(result["step_times_s"]) == 2


def test_matmul_reports_a_measured_peak(mfukit: Any) -> None:
    run = mfukit(
        "bench", "matmul", "--device", "cpu", "--sizes", "64,128", "--gpu", "h100-sxm", "--format", "json"
    )
    assert run.exit_code == 0, run.stderr
    result = run.json()["result"]
    best = max(p["flops_per_s"] for p in result["points"])
    assert result["peak_flops_per_s"]["fp32"] == best
    assert result["fraction_of_catalog_peak"]["fp32"] == pytest.approx(best / 67e12)
    assert result["environment"]["torch"].startswith("2.")
