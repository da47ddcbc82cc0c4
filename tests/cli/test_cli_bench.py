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
    # the limit is the best probe of the save's own write pattern, one thread and several
    probes = result["disk_probes_bytes_per_s"]
    assert set(probes) == {"1 file, 1 thread", "4 files, 4 threads"}
    assert result["disk_write_bytes_per_s"] == max(probes.values())
    beaten = result["save_vs_disk"] > 1.1
    assert beaten == any("no efficiency" in w for w in run.json()["warnings"])  # a beaten limit is flagged
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
    assert result["memory_bytes"] > 10 * 2**20  # the process's peak RSS on CPU (torch alone is more), never 0


def test_matmul_reports_a_measured_peak(mfukit: Any) -> None:
    run = mfukit(
        "bench", "matmul", "--device", "cpu", "--sizes", "64,128", "--gpu", "h100-sxm", "--format", "json"
    )
    assert run.exit_code == 0, run.stderr
    result = run.json()["result"]
    assert run.json()["inputs"]["dtypes"] == ["fp32", "bf16"]  # per dtype on CPU too
    for dtype, peak in (("fp32", 67e12), ("bf16", 989.4e12)):
        best = max(p["flops_per_s"] for p in result["points"] if p["dtype"] == dtype)
        assert result["peak_flops_per_s"][dtype] == best
        assert result["fraction_of_catalog_peak"][dtype] == pytest.approx(best / peak)
    assert result["environment"]["torch"].startswith("2.")
    assert result["environment"]["usable_cores"] >= 1


def test_tf32_on_cpu_is_refused(mfukit: Any) -> None:
    run = mfukit("bench", "matmul", "--device", "cpu", "--dtype", "tf32", "--sizes", "64")
    assert run.exit_code == 2
    assert "--dtype" in run.stderr and "fp32 or bf16" in run.stderr


@pytest.fixture
def torch_threads() -> Any:
    import torch

    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_membw_with_more_threads_than_free_cores_warns(
    mfukit: Any, monkeypatch: pytest.MonkeyPatch, torch_threads: None
) -> None:
    import os

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(os, "getloadavg", lambda: (5.0, 5.0, 5.0))  # four other runnable tasks
    run = mfukit("bench", "membw", "--device", "cpu", "--sizes", "1MiB", "--threads", "2", "--format", "json")
    assert run.exit_code == 0, run.stderr
    envelope = run.json()
    (warning,) = envelope["warnings"]
    assert "2 torch threads but only ~1 of 2 cores are free" in warning and "--threads 1" in warning
    assert "2 torch CPU thread(s)" in envelope["assumptions"]

    run = mfukit("bench", "membw", "--device", "cpu", "--sizes", "1MiB", "--threads", "1", "--format", "json")
    assert run.json()["warnings"] == []
