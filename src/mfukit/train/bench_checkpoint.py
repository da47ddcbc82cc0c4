"""``mfukit bench checkpoint``: DCP save and load throughput against this disk's own write bandwidth.

In one run, in one directory:

1. the disk's write bandwidth: ``size`` bytes of incompressible data written in 64 MiB chunks and
   fsynced (what ``dd conv=fsync`` measures), the physical limit of a checkpoint write;
2. a synchronous ``dcp.save`` of a state of ``size`` bytes (float32 tensors of 64 MiB, like model and
   optimizer shards) with fsynced files: its throughput over (1) is the save efficiency. (1) and (2) run
   twice, interleaved, and the best of each counts, so a neighbour's burst of I/O on a shared disk
   penalises neither side alone;
3. ``dcp.async_save`` of the same state, three times through one stager (a training run saves
   repeatedly; the first save allocates the staging buffers, the later ones only copy): the best time the
   caller is blocked (the copy to host memory) over the synchronous save time, and the time until the
   upload is durable;
4. ``dcp.load`` after the files are dropped from the page cache (``posix_fadvise(DONTNEED)``), so the
   read comes from the disk, not from memory.
"""

from __future__ import annotations

import os
import shutil
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint.filesystem import FileSystemWriter
from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions
from torch.distributed.checkpoint.state_dict_loader import load
from torch.distributed.checkpoint.state_dict_saver import async_save, save

CHUNK_BYTES = 64 * 2**20
ASYNC_SAVES = 3
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
    """Write ``size_bytes`` of random data in 64 MiB ``os.write`` calls, then fsync; bytes per second."""
    chunk = os.urandom(CHUNK_BYTES)
    path = directory / "disk-probe.bin"
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    started = time.perf_counter()
    try:
        written = 0
        while written < size_bytes:
            written += os.write(descriptor, chunk)
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
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
    with warnings.catch_warnings():  # DCP notes that it saves in a single process: that is the point here
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        return _run(directory, size_bytes)


def _run(directory: Path, size_bytes: int) -> CheckpointBench:
    directory.mkdir(parents=True, exist_ok=True)
    work = directory / "mfukit-checkpoint-bench"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    try:
        state = _state(size_bytes)
        state_bytes = sum(t.numel() * t.element_size() for t in state.values())
        disk = 0.0
        sync_s = float("inf")
        for _ in range(2):
            disk = max(disk, disk_write_bytes_per_s(work, size_bytes))
            shutil.rmtree(work / "sync", ignore_errors=True)
            started = time.perf_counter()
            save(state, storage_writer=FileSystemWriter(work / "sync", sync_files=True), no_dist=True)
            sync_s = min(sync_s, time.perf_counter() - started)

        stager = DefaultStager(StagingOptions(False, False, False, False))
        try:
            blocking_s = total_s = float("inf")
            for attempt in range(ASYNC_SAVES):
                target = work / f"async{attempt}"
                shutil.rmtree(work / f"async{attempt - 1}", ignore_errors=True)
                started = time.perf_counter()
                future = async_save(
                    state,
                    storage_writer=FileSystemWriter(target, sync_files=True),
                    async_stager=stager,
                    no_dist=True,
                )
                blocked = time.perf_counter() - started
                upload = future if not hasattr(future, "upload_completion") else future.upload_completion
                upload.result()
                if attempt:  # the first save allocates the stager's buffers: not the steady state
                    blocking_s = min(blocking_s, blocked)
                    total_s = min(total_s, time.perf_counter() - started)
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
