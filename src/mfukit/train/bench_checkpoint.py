"""``mfukit bench checkpoint``: DCP save and load throughput against this disk's own write bandwidth.

In one run, in one directory:

1. the disk's write bandwidth, the ceiling of a checkpoint write: the save's own bytes (the state's
   tensors, incompressible) written with ``os.write`` the way DCP's ``FileSystemWriter`` writes them
   (tensor after tensor into one file per writer thread, each file fsynced, then a small fsynced metadata
   file), with one thread and one file (DCP's default, ``thread_count=1``) and with
   ``PROBE_THREADS`` threads and files (the harness's pattern: ``[checkpoint] writer_threads``, default
   4; a disk that needs queue depth shows more); the ceiling is the
   best of these probes. A save beats a single probe now and then (on a shared disk the one-file probe
   has measured 0.6x of the save: write-back and neighbours vary from second to second), so no single
   pattern is taken for the limit;
2. a synchronous ``dcp.save`` of a state of ``size`` bytes (float32 tensors of 64 MiB, like model and
   optimizer shards) with fsynced files, written as the harness saves (``thread_count=WRITER_THREADS``):
   its throughput over (1) is the save efficiency. (1) and (2) run ``ROUNDS`` times, interleaved, and the
   best of each counts, so a neighbour's burst of I/O on a shared disk penalises neither side alone (a
   save that still beats the ceiling says the disk's speed changed during the run: the command warns);
3. ``dcp.async_save`` of the same state, three times through one stager (a training run saves
   repeatedly; the first save allocates the staging buffers, the later ones only copy): the best time the
   caller is blocked (the copy to host memory) over the synchronous save time, and the time until the
   upload is durable. As the harness does, each save's files are then hashed (sha256, for the commit
   record) in a background thread, and the next save starts while that hash still runs: its blocking time
   includes whatever the hashing takes from it;
4. ``dcp.load`` after the files are dropped from the page cache (``posix_fadvise(DONTNEED)``), so the
   read comes from the disk, not from memory.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
import warnings
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint.filesystem import FileSystemWriter
from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions
from torch.distributed.checkpoint.state_dict_loader import load
from torch.distributed.checkpoint.state_dict_saver import async_save, save

from mfukit.train.commit import background_hasher, hash_files
from mfukit.train.config import CheckpointPolicy

ASYNC_SAVES = 3
ROUNDS = 2
WRITER_THREADS = CheckpointPolicy.model_fields["writer_threads"].default  # as the harness saves
PROBE_THREADS = WRITER_THREADS
PROBE_METADATA_BYTES = 4096
TENSOR_BYTES = 64 * 2**20
FLOAT_BYTES = 4


@dataclass(frozen=True)
class CheckpointBench:
    state_bytes: int
    disk_probes_bytes_per_s: dict[str, float]
    """best fsynced write bandwidth of each probe pattern (section 1 of the module doc)"""
    sync_save_s: float
    async_blocking_s: float
    async_total_s: float
    load_s: float
    hash_s: float
    """sha256 of one save's files in the background thread, while the next save copies"""
    bare_blocking_s: float
    """the same async saves' blocking time without the hashing: its cost is the difference"""

    @property
    def disk_write_bytes_per_s(self) -> float:
        """The ceiling: the best of the probes."""
        return max(self.disk_probes_bytes_per_s.values())

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
    def hash_bytes_per_s(self) -> float:
        return self.state_bytes / self.hash_s

    @property
    def hashing_blocking_vs_sync(self) -> float:
        """What the background hashing adds to an async save's blocking time, over a synchronous save."""
        return (self.async_blocking_s - self.bare_blocking_s) / self.sync_save_s

    @property
    def blocking_vs_sync(self) -> float:
        return self.async_blocking_s / self.sync_save_s


def probe_name(files: int) -> str:
    return f"{files} file{'s' if files > 1 else ''}, {files} thread{'s' if files > 1 else ''}"


def _split(buffers: list[memoryview], files: int) -> list[list[memoryview]]:
    """Buffers over ``files`` writers, largest first to the least loaded (DCP's ``_split_by_size_and_type``)."""
    buckets: list[list[memoryview]] = [[] for _ in range(files)]
    sizes = [0] * files
    for buffer in sorted(buffers, key=lambda b: b.nbytes, reverse=True):
        least = sizes.index(min(sizes))
        buckets[least].append(buffer)
        sizes[least] += buffer.nbytes
    return buckets


def _write_file(path: Path, buffers: list[memoryview]) -> None:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for buffer in buffers:
            view = buffer.cast("B")
            while view.nbytes:
                view = view[os.write(descriptor, view) :]
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def disk_write_bytes_per_s(directory: Path, buffers: list[memoryview], files: int) -> float:
    """Write ``buffers`` into ``files`` fsynced files, one thread each, then a fsynced metadata file, as
    DCP's ``FileSystemWriter(sync_files=True, thread_count=files)`` lays out a save; bytes per second."""
    target = directory / "disk-probe"
    target.mkdir()
    buckets = _split(buffers, files)
    writers = [
        threading.Thread(target=_write_file, args=(target / f"data{index}.bin", bucket))
        for index, bucket in enumerate(buckets)
    ]
    started = time.perf_counter()
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join()
    _write_file(target / "metadata.bin", [memoryview(os.urandom(PROBE_METADATA_BYTES))])
    seconds = time.perf_counter() - started
    shutil.rmtree(target)
    return sum(buffer.nbytes for buffer in buffers) / seconds


def _state(size_bytes: int) -> dict[str, Any]:
    generator = torch.Generator().manual_seed(0)
    count = max(1, size_bytes // TENSOR_BYTES)
    elements = max(1, size_bytes // count // FLOAT_BYTES)
    return {f"shard{i:03d}": torch.randn(elements, generator=generator) for i in range(count)}


def _timed_hash(upload: Future[Any], directory: Path) -> float:
    upload.result()
    started = time.perf_counter()
    hash_files(directory)
    return time.perf_counter() - started


def _async_saves(
    state: dict[str, Any], work: Path, stager: DefaultStager, *, hashed: bool
) -> tuple[float, float, float]:
    """``ASYNC_SAVES`` async saves, each started once the previous one is durable; with ``hashed``, each
    save's files are hashed in a background thread that runs on into the next save's copy. The best
    (blocking, durable, hash) seconds of the saves after the first (which allocates the stager's buffers)."""
    work.mkdir()
    hasher = background_hasher()  # as the harness hashes
    blocking_s = total_s = hash_s = float("inf")
    hashing: Future[float] | None = None
    try:
        for attempt in range(ASYNC_SAVES):
            target = work / f"save{attempt}"
            started = time.perf_counter()
            future = async_save(
                state,
                storage_writer=FileSystemWriter(target, sync_files=True, thread_count=WRITER_THREADS),
                async_stager=stager,
                no_dist=True,
            )
            blocked = time.perf_counter() - started  # the previous save's hashing ran meanwhile
            upload = future if not hasattr(future, "upload_completion") else future.upload_completion
            upload.result()
            durable_s = time.perf_counter() - started
            if hashing is not None:
                hash_s = min(hash_s, hashing.result())
            shutil.rmtree(work / f"save{attempt - 1}", ignore_errors=True)
            if hashed:
                hashing = hasher.submit(_timed_hash, upload, target)
            if attempt:
                blocking_s = min(blocking_s, blocked)
                total_s = min(total_s, durable_s)
        if hashing is not None:
            hash_s = min(hash_s, hashing.result())
    finally:
        hasher.shutdown()
    return blocking_s, total_s, hash_s


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
        buffers = [memoryview(t.numpy()) for t in state.values()]
        probes = {probe_name(files): 0.0 for files in (1, PROBE_THREADS)}
        sync_s = float("inf")
        for _ in range(ROUNDS):
            for files in (1, PROBE_THREADS):
                name = probe_name(files)
                probes[name] = max(probes[name], disk_write_bytes_per_s(work, buffers, files))
            shutil.rmtree(work / "sync", ignore_errors=True)
            started = time.perf_counter()
            save(
                state,
                storage_writer=FileSystemWriter(work / "sync", sync_files=True, thread_count=WRITER_THREADS),
                no_dist=True,
            )
            sync_s = min(sync_s, time.perf_counter() - started)

        stager = DefaultStager(StagingOptions(False, False, False, False))
        try:
            bare_blocking_s, _, _ = _async_saves(state, work / "bare", stager, hashed=False)
            blocking_s, total_s, hash_s = _async_saves(state, work / "hashed", stager, hashed=True)
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
    return CheckpointBench(state_bytes, probes, sync_s, blocking_s, total_s, load_s, hash_s, bare_blocking_s)
