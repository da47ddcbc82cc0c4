"""Sharded checkpoints with torch.distributed.checkpoint (DCP), committed by :mod:`mfukit.train.commit`.

* ``sync``: ``dcp.save`` into the staging directory; the loop is blocked for the whole write.
* ``async``: ``dcp.async_save`` copies the state to host memory (the only blocking part), then writes it
  from a background thread. It runs on its own gloo process group, so its planning collectives can never
  interleave with (or hang) the training collectives (IBM's DCP async guidance); the copy happens before
  the next optimizer step touches the parameters (the pitfall of pytorch#144657). One save is in flight
  at a time: the next one first waits for the previous upload, and that wait counts as blocking.
* Hashes: rank 0 records every file's sha256 in the commit record (:func:`mfukit.train.commit.hash_files`).
  A synchronous save hashes in its commit (it blocks anyway); an async save hashes in a background
  thread chained after its upload, so the training loop never waits for it (unless the next save comes
  before the hash is done: then, like an unfinished upload, the wait counts as that save's blocking).
* Load: DCP loads in place into the model and optimizer as this world size shards them, so a checkpoint
  written by 4 ranks resumes on 2 (DCP reshards on load); the sampler position and step travel with it.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.filesystem import FileSystemWriter
from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_state_dict,
)
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import async_save, save
from torch.distributed.checkpoint.stateful import Stateful

from mfukit.train.commit import (
    CheckpointMeta,
    CheckpointStore,
    Committed,
    background_hasher,
    hash_when_written,
)
from mfukit.train.faults import FaultInjector


class TrainState(Stateful):
    """The step and the sampler position, saved inside the checkpoint as tensors."""

    def __init__(self) -> None:
        self.step = 0
        self.sampler_position = 0

    def state_dict(self) -> dict[str, Any]:
        return {
            "step": torch.tensor(self.step, dtype=torch.int64),
            "sampler_position": torch.tensor(self.sampler_position, dtype=torch.int64),
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.step = int(state_dict["step"])
        self.sampler_position = int(state_dict["sampler_position"])


def params_sha256(model: nn.Module) -> str | None:
    """sha256 of every parameter, gathered whole and in name order (equal across world sizes); rank 0 only.

    Every rank must call it (FSDP gathers shards); ranks other than 0 get None.
    """
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if dist.get_rank() != 0:
        return None
    digest = hashlib.sha256()
    for name in sorted(full):
        digest.update(name.encode())
        tensor = full[name]
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"model state {name} is a {type(tensor).__name__}, not a tensor")
        digest.update(tensor.detach().to(torch.float32).contiguous().numpy().tobytes())
    return digest.hexdigest()


@dataclass
class _Pending:
    step: int
    staging: Path
    future: Future[Any]
    """the upload; on rank 0, the upload then the hashing of its files (its result: the hashes)"""
    meta: CheckpointMeta


Record = Callable[..., None]


class Checkpointer:
    def __init__(
        self,
        store: CheckpointStore,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        train_state: TrainState,
        *,
        group: dist.ProcessGroup,
        mode: str,
        writer_threads: int,
        config_hash: str,
        faults: FaultInjector,
        record: Record,
        verify: bool,
    ) -> None:
        self.store = store
        self.model = model
        self.optimizer = optimizer
        self.train_state = train_state
        self.group = group
        self.mode = mode
        self.writer_threads = writer_threads
        self.config_hash = config_hash
        self.faults = faults
        self.record = record
        self.verify = verify
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        self.pending: _Pending | None = None
        self.committed: list[int] = []
        self.last_blocking_s = 0.0
        """the training loop's wait in the latest save"""
        self.last_commit_s: float | None = None
        """start of the latest committed save to its commit, on rank 0 (for an async save: blocking + persist)"""
        # one stager for the whole run: it keeps its host buffers, so later saves only copy (pinned on CUDA)
        pinned = torch.cuda.is_available() and any(p.is_cuda for p in model.parameters())
        self.stager = DefaultStager(StagingOptions(pinned, False, False, False)) if mode == "async" else None
        self.hasher = background_hasher() if mode == "async" and self.rank == 0 else None

    def _state(self) -> dict[str, Any]:
        model_state, optim_state = get_state_dict(self.model, self.optimizer)
        return {"model": model_state, "optim": optim_state, "train": self.train_state}

    def save(self, step: int) -> float:
        """Save the state after ``step``; returns the seconds the training loop was blocked."""
        started = time.perf_counter()
        self.wait()
        self.train_state.step = step
        staging = self.store.begin(step)
        meta = CheckpointMeta(
            step=step,
            world_size=self.world_size,
            torch_version=torch.__version__,
            config_hash=self.config_hash,
            sampler_position=self.train_state.sampler_position,
            mode=self.mode,
            saved_unix_s=time.time(),
            params_sha256=params_sha256(self.model) if self.verify else None,
        )
        writer = FileSystemWriter(staging, sync_files=True, thread_count=self.writer_threads)
        if self.mode == "async":
            future = async_save(
                self._state(), storage_writer=writer, process_group=self.group, async_stager=self.stager
            )
            if not isinstance(future, Future):  # an AsyncSaveResponse: the upload is what commits
                future = future.upload_completion
            if self.hasher is not None:
                future = self.hasher.submit(hash_when_written, future, staging)
            self.pending = _Pending(step, staging, future, meta)
        else:
            save(self._state(), storage_writer=writer, process_group=self.group)
            self._commit(step, staging, meta, None)  # the commit hashes the files (this save blocks anyway)
        blocking_s = time.perf_counter() - started
        self.last_blocking_s = blocking_s
        if self.rank == 0:
            self.record("checkpoint", step=step, blocking_s=blocking_s, mode=self.mode)
        return blocking_s

    def poll(self) -> None:
        """Commit the in-flight async save if its upload has finished (called every step)."""
        if self.pending is not None and self.pending.future.done():
            self.wait()

    def wait(self) -> None:
        """Block until the in-flight save (if any) is written, then commit it."""
        if self.pending is None:
            return
        pending, self.pending = self.pending, None
        done = pending.future.result()  # re-raises a failed upload
        self._commit(pending.step, pending.staging, pending.meta, done if isinstance(done, dict) else None)

    def close(self) -> None:
        """Finish the in-flight save and free the staging buffers."""
        self.wait()
        if self.stager is not None:
            self.stager.close()
            self.stager = None
        if self.hasher is not None:
            self.hasher.shutdown()
            self.hasher = None

    def _commit(self, step: int, staging: Path, meta: CheckpointMeta, sha256: dict[str, str] | None) -> None:
        self.committed.append(step)
        if self.rank != 0:
            return
        self.faults.crash_before_commit(step)
        done: Committed = self.store.commit(staging, meta, sha256)
        self.last_commit_s = time.time() - meta.saved_unix_s
        removed = self.store.prune()
        self.record(
            "commit",
            step=step,
            path=str(done.path),
            bytes=done.meta.total_bytes,
            save_s=self.last_commit_s,
            pruned=[p.name for p in removed],
        )

    def load(self, committed: Committed) -> float:
        """Load ``committed`` in place (resharding to this world size); returns the seconds it took."""
        started = time.perf_counter()
        state = self._state()
        dcp_load(state, checkpoint_id=str(committed.path), process_group=self.group)
        set_state_dict(
            self.model, self.optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"]
        )
        return time.perf_counter() - started
