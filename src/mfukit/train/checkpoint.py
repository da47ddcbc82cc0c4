"""Sharded checkpoints with torch.distributed.checkpoint (DCP), committed by :mod:`mfukit.train.commit`.

* ``sync``: ``dcp.save`` into the staging directory, then the commit; the loop is blocked for all of it.
* ``async``: ``dcp.async_save`` copies the state to host memory (:class:`mfukit.train.dcp_io.HostStager`:
  buffers reused across saves, one copying thread), then writes it from a background thread. The copy is
  the blocking part. It runs on its own gloo process group, so its planning collectives can never
  interleave with (or hang) the training collectives (IBM's DCP async guidance); the copy happens before
  the next optimizer step touches the parameters (the pitfall of pytorch#144657). Rank 0 commits in a
  background thread of its own once the upload is done (the commit record's fsyncs, the rename, the
  pruning of old checkpoints), so the training loop only notes the commit at its next step. One save is
  in flight at a time: the next one first waits for the previous upload and commit, and that wait counts
  as blocking.
* Hashes: every file's sha256 is computed by the writer as it writes the file
  (:class:`mfukit.train.dcp_io.HashingWriter`), in DCP's writer threads, and rank 0 records them in the
  commit record. Nothing is hashed in the training loop or read back after the write.
* Load: DCP loads in place into the model and optimizer as this world size shards them, so a checkpoint
  written by 4 ranks resumes on 2 (DCP reshards on load); the sampler position and step travel with it.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_state_dict,
)
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import async_save, save
from torch.distributed.checkpoint.stateful import Stateful

from mfukit.train.commit import CheckpointMeta, CheckpointStore, Committed
from mfukit.train.dcp_io import HashingWriter, HostStager
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
    future: Future[Any]
    """the upload; on rank 0, the upload then the commit (its result: the :class:`_Commit`)"""


@dataclass(frozen=True)
class _Commit:
    """What rank 0's commit of a save did."""

    committed: Committed
    pruned: list[Path]
    commit_s: float
    """from the save's start to its commit"""


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
        self.stager = HostStager(pinned=pinned) if mode == "async" else None
        self.committer = (
            ThreadPoolExecutor(max_workers=1, thread_name_prefix="mfukit-checkpoint-commit")
            if mode == "async" and self.rank == 0
            else None
        )

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
        writer = HashingWriter(staging, thread_count=self.writer_threads)
        if self.mode == "async":
            response = async_save(
                self._state(), storage_writer=writer, process_group=self.group, async_stager=self.stager
            )
            upload = response if isinstance(response, Future) else response.upload_completion
            future = (
                upload
                if self.committer is None
                else self.committer.submit(self._commit_when_written, upload, staging, meta, writer)
            )
            self.pending = _Pending(step, future)
        else:
            save(self._state(), storage_writer=writer, process_group=self.group)
            self._note(step, self._commit(staging, meta, writer) if self.rank == 0 else None)
        blocking_s = time.perf_counter() - started
        self.last_blocking_s = blocking_s
        if self.rank == 0:
            self.record("checkpoint", step=step, blocking_s=blocking_s, mode=self.mode)
        return blocking_s

    def poll(self) -> None:
        """Note the in-flight async save if it is written (and, on rank 0, committed); called every step."""
        if self.pending is not None and self.pending.future.done():
            self.wait()

    def wait(self) -> None:
        """Block until the in-flight save (if any) is written and committed, then note it."""
        if self.pending is None:
            return
        pending, self.pending = self.pending, None
        done = pending.future.result()  # re-raises a failed upload or commit
        self._note(pending.step, done if self.rank == 0 else None)

    def close(self) -> None:
        """Finish the in-flight save and free the staging buffers."""
        self.wait()
        if self.stager is not None:
            self.stager.close()
            self.stager = None
        if self.committer is not None:
            self.committer.shutdown()
            self.committer = None

    def _commit_when_written(
        self, upload: Future[Any], staging: Path, meta: CheckpointMeta, writer: HashingWriter
    ) -> _Commit:
        """Rank 0's background commit of an async save, once its upload (every rank's files) is done."""
        upload.result()  # re-raises a failed upload
        return self._commit(staging, meta, writer)

    def _commit(self, staging: Path, meta: CheckpointMeta, writer: HashingWriter) -> _Commit:
        """Rank 0, after every rank's files are written: the commit record, the rename, the pruning."""
        self.faults.crash_before_commit(meta.step)
        if writer.sha256 is None:
            raise RuntimeError(f"the save of step {meta.step} finished without the hashes of its files")
        done = self.store.commit(staging, meta, writer.sha256)
        commit_s = time.time() - meta.saved_unix_s
        return _Commit(done, self.store.prune(), commit_s)

    def _note(self, step: int, commit: _Commit | None) -> None:
        """The training loop's side of a finished save (``commit``: rank 0's)."""
        self.committed.append(step)
        if commit is None:
            return
        self.last_commit_s = commit.commit_s
        self.record(
            "commit",
            step=step,
            path=str(commit.committed.path),
            bytes=commit.committed.meta.total_bytes,
            save_s=commit.commit_s,
            pruned=[p.name for p in commit.pruned],
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
