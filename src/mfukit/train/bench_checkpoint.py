"""``mfukit bench checkpoint``: DCP save and load throughput against this disk's own write bandwidth.

In one run, in one directory, on one state: parameters with their AdamW moments (the layout the training
harness saves: a parameter and two moments of its size, up to 64 MiB each, float32, incompressible):

1. the disk's write bandwidth, the ceiling of a checkpoint write: the save's own bytes written with
   ``os.write`` the way DCP's ``FileSystemWriter`` writes them (tensor after tensor into one file per
   writer thread, each file fsynced, then a small fsynced metadata file), with one thread and one file
   (DCP's default, ``thread_count=1``) and with ``PROBE_THREADS`` threads and files (the harness's
   pattern: ``[checkpoint] writer_threads``, default 4; a disk that needs queue depth shows more); the
   ceiling is the best of these probes. A save beats a single probe now and then (on a shared disk the
   one-file probe has measured 0.6x of the save: write-back and neighbours vary from second to second),
   so no single pattern is taken for the limit;
2. a synchronous ``dcp.save`` of the state with fsynced files and ``thread_count=WRITER_THREADS``, as
   the harness writes: its throughput over (1) is the save efficiency; and the harness's own synchronous
   save (:class:`mfukit.train.checkpoint.Checkpointer`, ``mode = "sync"``, in a one-rank gloo group: the
   same write with every file hashed as it is written, then the commit), which is what an async save's
   blocking is compared with. (1) and (2) run ``ROUNDS`` times, interleaved (the two saves taking turns
   going first: the second of two saves written back to back can be the slower by far), and the best of
   each counts, so a neighbour's burst of I/O on a shared disk penalises no side alone (a save that still
   beats the ceiling says the disk's speed changed during the run: the command warns);
3. the harness's own async save path, the same ``Checkpointer`` with ``mode = "async"``,
   ``ASYNC_SAVES`` times (a training run saves repeatedly; the first save allocates the staging buffers,
   the later ones only copy), each save started once the previous one is committed: the best time
   ``Checkpointer.save`` blocks its caller (what the harness records as a save's blocking time: the wait
   for the previous save, the state dict, the copy to host memory, the start of the upload) over the
   harness's synchronous save, and the time until the save is committed (written, hashed, the commit
   record durable). Without the hashing: the same state saved by ``dcp.async_save`` alone through the
   same stager with DCP's plain writer, over the plain ``dcp.save`` of (2); the difference between the
   two blocking times is what the hashing and the harness's bookkeeping add;
4. ``dcp.load`` after the files are dropped from the page cache (``posix_fadvise(DONTNEED)``), so the
   read comes from the disk, not from memory.
"""

from __future__ import annotations

import math
import os
import shutil
import threading
import time
import warnings
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.filesystem import FileSystemWriter
from torch.distributed.checkpoint.state_dict_loader import load
from torch.distributed.checkpoint.state_dict_saver import async_save, save

from mfukit.train.checkpoint import Checkpointer, TrainState
from mfukit.train.commit import CheckpointStore
from mfukit.train.config import CheckpointPolicy
from mfukit.train.dcp_io import HostStager
from mfukit.train.faults import FaultInjector

ASYNC_SAVES = 3
ROUNDS = 2
WRITER_THREADS = CheckpointPolicy.model_fields["writer_threads"].default  # as the harness saves
PROBE_THREADS = WRITER_THREADS
PROBE_METADATA_BYTES = 4096
TENSOR_BYTES = 64 * 2**20
FLOAT_BYTES = 4
ADAMW_TENSORS_PER_PARAMETER = 3
"""the parameter, its first and its second moment"""


@dataclass(frozen=True)
class CheckpointBench:
    state_bytes: int
    disk_probes_bytes_per_s: dict[str, float]
    """best fsynced write bandwidth of each probe pattern (section 1 of the module doc)"""
    sync_save_s: float
    """``dcp.save`` alone (DCP's plain writer)"""
    harness_sync_save_s: float
    """the harness's synchronous save: ``Checkpointer.save`` with ``mode = "sync"`` (hashing, commit)"""
    async_blocking_s: float
    """the harness's async save: the best time ``Checkpointer.save`` blocked (section 3)"""
    async_total_s: float
    """the harness's async save: from its start to its commit"""
    load_s: float
    bare_blocking_s: float
    """``dcp.async_save`` alone, DCP's plain writer: blocking without the hashing and the bookkeeping"""
    bare_total_s: float
    """``dcp.async_save`` alone, DCP's plain writer: until the files are durable"""

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
    def blocking_vs_sync(self) -> float:
        """The harness's async blocking over the harness's synchronous save."""
        return self.async_blocking_s / self.harness_sync_save_s

    @property
    def blocking_vs_dcp_save(self) -> float:
        """The harness's async blocking over the plain ``dcp.save`` (no hashing, no commit: the fastest real
        synchronous save, a stricter reference than the harness's own)."""
        return self.async_blocking_s / self.sync_save_s

    @property
    def bare_blocking_vs_sync(self) -> float:
        """Without the hashing: ``dcp.async_save``'s blocking over ``dcp.save``, both with DCP's plain writer."""
        return self.bare_blocking_s / self.sync_save_s

    @property
    def hashing_blocking_vs_sync(self) -> float:
        """What the hashing (with the harness's bookkeeping) adds to an async save's blocking time, over the
        harness's synchronous save."""
        return (self.async_blocking_s - self.bare_blocking_s) / self.harness_sync_save_s

    @property
    def hashing_total_s(self) -> float:
        """What the hashing (with the commit) adds to an async save's time until it is durable."""
        return self.async_total_s - self.bare_total_s


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


def _trained(size_bytes: int) -> tuple[nn.ParameterList, torch.optim.Optimizer]:
    """Parameters and their AdamW moments, ``size_bytes`` in all, after one step on random gradients (so
    the moments are as incompressible as the parameters)."""
    generator = torch.Generator().manual_seed(0)
    count = max(1, math.ceil(size_bytes / (ADAMW_TENSORS_PER_PARAMETER * TENSOR_BYTES)))
    elements = max(1, size_bytes // (ADAMW_TENSORS_PER_PARAMETER * count * FLOAT_BYTES))
    model = nn.ParameterList(nn.Parameter(torch.randn(elements, generator=generator)) for _ in range(count))
    optimizer = torch.optim.AdamW(model.parameters())
    for parameter in model.parameters():
        parameter.grad = torch.randn(elements, generator=generator)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return model, optimizer


def _tensors(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    """Every tensor of the state by name, flat: what the DCP-only saves write and the load checks."""
    named: dict[str, torch.Tensor] = {}
    for index, parameter in enumerate(model.parameters()):
        named[f"param{index}"] = parameter.detach()
        for key, value in optimizer.state[parameter].items():
            if isinstance(value, torch.Tensor):
                named[f"param{index}.{key}"] = value
    return named


def _dcp_save(state: dict[str, torch.Tensor], target: Path) -> float:
    """Seconds of a synchronous ``dcp.save`` of ``state`` into ``target`` (replaced) with DCP's plain writer,
    fsynced, ``WRITER_THREADS`` threads and files."""
    shutil.rmtree(target, ignore_errors=True)
    started = time.perf_counter()
    save(
        state,
        storage_writer=FileSystemWriter(target, sync_files=True, thread_count=WRITER_THREADS),
        no_dist=True,
    )
    return time.perf_counter() - started


def _dcp_async_saves(state: dict[str, torch.Tensor], work: Path) -> tuple[float, float]:
    """``ASYNC_SAVES`` ``dcp.async_save`` calls through the harness's stager with DCP's plain writer (no
    hashing, no commit), each started once the previous one is durable. The best (blocking, durable)
    seconds of the saves after the first (which allocates the stager's buffers)."""
    work.mkdir()
    stager = HostStager(pinned=False)
    blocking_s = total_s = math.inf
    try:
        for attempt in range(ASYNC_SAVES):
            started = time.perf_counter()
            response = async_save(
                state,
                storage_writer=FileSystemWriter(
                    work / f"save{attempt}", sync_files=True, thread_count=WRITER_THREADS
                ),
                async_stager=stager,
                no_dist=True,
            )
            blocked = time.perf_counter() - started
            upload = response if isinstance(response, Future) else response.upload_completion
            upload.result()
            durable_s = time.perf_counter() - started
            shutil.rmtree(work / f"save{attempt - 1}", ignore_errors=True)
            if attempt:
                blocking_s = min(blocking_s, blocked)
                total_s = min(total_s, durable_s)
    finally:
        stager.close()
    return blocking_s, total_s


def _ignore(*args: Any, **fields: Any) -> None:
    """The bench keeps no ledger."""


@contextmanager
def _one_rank_group(store: Path) -> Iterator[dist.ProcessGroup]:
    """A gloo process group of this process alone, for the harness's checkpointer."""
    if dist.is_initialized():
        raise RuntimeError(
            "the checkpoint bench needs a process of its own: torch.distributed is initialized"
        )
    dist.init_process_group("gloo", init_method=store.resolve().as_uri(), rank=0, world_size=1)
    try:
        yield dist.new_group(backend="gloo")
    finally:
        dist.destroy_process_group()


def _checkpointer(
    root: Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    group: dist.ProcessGroup,
    *,
    mode: str,
    keep: int,
) -> Checkpointer:
    """The harness's checkpointer of ``model`` and ``optimizer``, saving under ``root``."""
    return Checkpointer(
        CheckpointStore(root, keep=keep),
        model,
        optimizer,
        TrainState(),
        group=group,
        mode=mode,
        writer_threads=WRITER_THREADS,
        config_hash="mfukit bench checkpoint",
        faults=FaultInjector([], root / "faults", 0, _ignore),
        record=_ignore,
        verify=False,
    )


def _harness_async_saves(checkpointer: Checkpointer) -> tuple[float, float]:
    """``ASYNC_SAVES`` saves by the harness's async ``checkpointer``, each started once the previous one is
    committed. The best (blocking, until committed) seconds of the saves after the first (which allocates
    the stager's buffers)."""
    blocking_s = total_s = math.inf
    try:
        for step in range(1, ASYNC_SAVES + 1):
            blocked = checkpointer.save(step)
            checkpointer.wait()
            if checkpointer.last_commit_s is None:
                raise RuntimeError(f"the bench's save of step {step} did not commit")
            if step > 1:
                blocking_s = min(blocking_s, blocked)
                total_s = min(total_s, checkpointer.last_commit_s)
    finally:
        checkpointer.close()
    return blocking_s, total_s


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
        model, optimizer = _trained(size_bytes)
        state = _tensors(model, optimizer)
        state_bytes = sum(t.numel() * t.element_size() for t in state.values())
        buffers = [t.reshape(-1).numpy().data for t in state.values()]
        probes = {probe_name(files): 0.0 for files in (1, PROBE_THREADS)}
        sync_s = harness_sync_s = math.inf
        with _one_rank_group(work / "store") as group:
            # keep every round's checkpoint: no pruning inside the timed synchronous save
            harness_sync = _checkpointer(
                work / "harness-sync", model, optimizer, group, mode="sync", keep=ROUNDS
            )
            for round_index in range(ROUNDS):
                for files in (1, PROBE_THREADS):
                    name = probe_name(files)
                    probes[name] = max(probes[name], disk_write_bytes_per_s(work, buffers, files))
                # the two synchronous saves take turns going first: on the shared development disk the
                # second of two saves written back to back has measured up to 3x slower than the first
                dcp_first = round_index % 2 == 0
                if dcp_first:
                    sync_s = min(sync_s, _dcp_save(state, work / "sync"))
                harness_sync_s = min(harness_sync_s, harness_sync.save(round_index + 1))
                if not dcp_first:
                    sync_s = min(sync_s, _dcp_save(state, work / "sync"))
            harness_sync.close()
            shutil.rmtree(work / "harness-sync")

            bare_blocking_s, bare_total_s = _dcp_async_saves(state, work / "dcp")
            harness_async = _checkpointer(
                work / "harness-async", model, optimizer, group, mode="async", keep=1
            )
            blocking_s, total_s = _harness_async_saves(harness_async)

        _drop_cache(work / "sync")
        loaded = {name: torch.empty_like(tensor) for name, tensor in state.items()}
        started = time.perf_counter()
        load(loaded, checkpoint_id=str(work / "sync"), no_dist=True)
        load_s = time.perf_counter() - started
        if any(not torch.equal(loaded[name], state[name]) for name in state):
            raise RuntimeError("the loaded checkpoint differs from the saved state")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return CheckpointBench(
        state_bytes,
        probes,
        sync_s,
        harness_sync_s,
        blocking_s,
        total_s,
        load_s,
        bare_blocking_s,
        bare_total_s,
    )
