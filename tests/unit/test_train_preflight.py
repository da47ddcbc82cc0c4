"""The memory pre-flight of `mfukit train`: perf.memory's need per rank against the host's available memory."""

from __future__ import annotations

from pathlib import Path

import pytest

from mfukit.errors import InputError
from mfukit.perf.model_states import FP32_BYTES
from mfukit.train import preflight
from mfukit.train.prepare import TrainRequest, prepare

ROOT = Path(__file__).parents[2]
TINY = ROOT / "examples" / "tiny-cpu.toml"
LLAMA_405B = ROOT / "examples" / "llama3-405b_h100x16384.toml"


def _meminfo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, available_kib: int) -> None:
    path = tmp_path / "meminfo"
    path.write_text(f"MemTotal:       32000000 kB\nMemFree:  1000 kB\nMemAvailable:   {available_kib} kB\n")
    monkeypatch.setattr(preflight, "MEMINFO", path)


def test_host_available_reads_memavailable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _meminfo(tmp_path, monkeypatch, 2048)
    assert preflight.host_available_bytes() == 2048 * 1024
    monkeypatch.setattr(preflight, "MEMINFO", tmp_path / "absent")
    assert preflight.host_available_bytes() is None


def test_405b_on_a_cpu_host_is_refused_naming_need_and_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _meminfo(tmp_path, monkeypatch, 23 * 2**20)  # 23 GiB, the review's VM
    prepared = prepare(TrainRequest(scenario_path=LLAMA_405B, out=tmp_path / "run"), cuda=False)
    need, parts = preflight.rank_need(prepared, cuda=False)
    params = prepared.config.model.total_params()
    # DDP in fp32: weights 4 + gradients 4 + AdamW m, v 8 bytes per parameter, plus activations
    assert parts["weights"] == pytest.approx(4 * params)
    assert parts["gradients"] == pytest.approx(4 * params)
    assert parts["optimizer states"] == pytest.approx(8 * params)
    assert need > 16 * params
    with pytest.raises(InputError) as raised:
        preflight.check_fits(prepared, cuda=False, nproc_per_node=1, source=str(LLAMA_405B))
    text = raised.value.render()
    assert "llama-3.1-405b" in text and "needs ~" in text and "23.0 GiB" in text
    assert "smaller model preset" in text
    assert raised.value.exit_code == 2


def test_the_tiny_preset_fits_and_ranks_share_the_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _meminfo(tmp_path, monkeypatch, 8 * 2**20)
    prepared = prepare(TrainRequest(scenario_path=TINY, out=tmp_path / "run"), cuda=False)
    fits = preflight.check_fits(prepared, cuda=False, nproc_per_node=2, source=str(TINY))
    assert fits is not None and fits.fits
    assert fits.available_bytes == pytest.approx(8 * 2**30 / 2)  # MemAvailable split over 2 ranks
    assert "CUDA context" not in fits.parts_bytes and "NCCL buffers" not in fits.parts_bytes


def test_fsdp_still_builds_the_whole_fp32_model_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FSDP shards the states 16/DP, but each rank builds the full fp32 model before sharding."""
    request = TrainRequest(
        scenario_path=LLAMA_405B,
        out=tmp_path / "run",
        overrides={
            "parallelism.fsdp": "full",
            "parallelism.dp": 4096,
            "training.global_batch_size": 4096,
            "training.seq_len": 64,
        },
        nproc_per_node=4096,
    )
    prepared = prepare(request, cuda=False)
    _, parts = preflight.rank_need(prepared, cuda=False)
    assert parts == {preflight.BUILD_PART: FP32_BYTES * prepared.config.model.total_params()}
    _meminfo(tmp_path, monkeypatch, 2**30)
    with pytest.raises(InputError, match="whole fp32 model built before sharding"):
        preflight.check_fits(prepared, cuda=False, nproc_per_node=1, source="test")
