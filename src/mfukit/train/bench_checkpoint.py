"""``mfukit bench checkpoint``: DCP save and load throughput against this disk's own write bandwidth.

In one run, in one directory:

1. the disk's write bandwidth: ``size`` bytes of incompressible data written in 16 MiB chunks and
   fsynced (what ``dd conv=fsync`` measures), the physical limit of a checkpoint write;
2. a synchronous ``dcp.save`` of a state of ``size`` bytes (float32 tensors of 64 MiB, like model and
   optimizer shards) with fsynced files: its throughput over (1) is the save efficiency;
3. ``dcp.async_save`` of the same state, twice through one stager (a training run saves repeatedly, so
   the second save is the steady state): the time the caller is blocked (the copy to host memory) over
   the synchronous save time, and the time until the upload is durable;
4. ``dcp.load`` after the files are dropped from the page cache (``posix_fadvise(DONTNEED)``), so the
   read comes from the disk, not from memory.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint.filesystem import FileSystemWriter
from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions
from torch.distributed.checkpoint.state_dict_loader import load
from torch.distributed.checkpoint.state_dict_saver import async_save, save

CHUNK_BYTES = 16 * 2**20
TENSOR_BYTES = 64 * 2**20
FLOAT_BYTES = 4


@dataclass(frozen=True)
class CheckpointBench:
    state_bytes: int
    disk_write_bytes_per_s: float
    sync_save_s: float
    async_blocking_s: float
    async_total_s: float
    load_s: float

    @property
    def save_bytes_per_s(self) -> float:
        return self.state_bytes / self.sync_save_s

    @property
    def load_bytes_per_s(self) -> float:
        return self.state_bytes / self.load_s

    @property
    def save_vs_disk(self) -> float:
        return self.save_bytes_per_s / self.disk_write_bytes_per_s

    @property
    def blocking_vs_sync(self) -> float:
        return self.async_blocking_s / self.sync_save_s


def disk_write_bytes_per_s(directory: Path, size_bytes: int) -> float:
    """Write ``size_bytes`` of random data in 16 MiB chunks with fsync; bytes per second."""
    chunk = os.urandom(CHUNK_BYTES)
    path = directory / "disk-probe.bin"
    started = time.perf_counter()
    with path.open("wb") as handle:
        written = 0
        while written < size_bytes:
            handle.write(chunk)
            written += len(chunk)
        handle.flush()
        os.fsync(handle.fileno())
    seconds = time.perf_counter() - started
    path.unlink()
    return written / seconds


def _state(size_bytes: int) -> dict[str, Any]:
    generator = torch.Generator().manual_seed(0)
    count = max(1, size_bytes // TENSOR_BYTES)
    elements = max(1, size_bytes // count // FLOAT_BYTES)
    return {f"shard{i:03d}": torch.randn(elements, generator=generator) for i in range(count)}


def _drop_cache(directory: Path) -> None:
    for path in directory.rglob("*"):
        if path.is_file():
            descriptor = os.open(path, os.O_RDONLY)
            try:
                os.fsync(descriptor)
                os.posix_fadvise(descriptor, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(descriptor)


def run_checkpoint_bench(directory: Path, size_bytes: int) -> CheckpointBench:
    directory.mkdir(parents=True, exist_ok=True)
    work = directory / "mfukit-checkpoint-bench"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    try:
        disk = disk_write_bytes_per_s(work, size_bytes)
        state = _state(size_bytes)
        state_bytes = sum(t.numel() * t.element_size() for t in state.values())

        started = time.perf_counter()
        save(state, storage_writer=FileSystemWriter(work / "sync", sync_files=True), no_dist=True)
        sync_s = time.perf_counter() - started

        stager = DefaultStager(StagingOptions(False, False, False, False))
        try:
            blocking_s = total_s = 0.0
            for attempt in range(2):
                target = work / f"async{attempt}"
                started = time.perf_counter()
                future = async_save(
                    state,
                    storage_writer=FileSystemWriter(target, sync_files=True),
                    async_stager=stager,
                    no_dist=True,
                )
                blocking_s = time.perf_counter() - started
                upload = future if not hasattr(future, "upload_completion") else future.upload_completion
                upload.result()
                total_s = time.perf_counter() - started
        finally:
            stager.close()

        _drop_cache(work / "sync")
        loaded = {name: torch.empty_like(tensor) for name, tensor in state.items()}
        started = time.perf_counter()
        load(loaded, checkpoint_id=str(work / "sync"), no_dist=True)
        load_s = time.perf_counter() - started
        if any(not torch.equal(loaded[name], state[name]) for name in state):
            raise RuntimeError("the loaded checkpoint differs from the saved state")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return CheckpointBench(state_bytes, disk, sync_s, blocking_s, total_s, load_s)
