"""What the harness adds to DCP's save path: a stager whose copies run on one thread, and a writer that
hashes every file while it writes it.

* :class:`HostStager` is DCP's ``DefaultStager``: host buffers allocated at the first save and reused by
  every later one (pinned on CUDA), so a save only copies. On CPU the copy is memory bound, and torch
  splits each tensor's copy over its intra-op threads (fork-join: every tensor waits for the slowest
  thread). On a host whose cores are shared with other work, that thread is often descheduled, and a
  state of many tensors pays the wait once per tensor. Measured on the 2-core development VM (512 MiB
  in 22 MiB tensors, AdamW's layout of a parameter and its two moments): 3.1 GB/s with torch's two
  threads, 17.8 GB/s with one, which already saturates that VM's memory bus. So the stager copies on
  the calling thread alone (the training loop waits for the copy anyway). A device-to-host copy
  (CUDA) is a DMA, which the thread count does not change.
* :class:`HashingWriter` is DCP's ``FileSystemWriter`` (fsynced files) whose streams hash the bytes they
  write (sha256, the commit record's per-file hashes: :mod:`mfukit.train.commit`). The hashing runs in
  DCP's writer threads, on the bytes on their way to the file (hashlib releases the GIL on large
  buffers), so it is done when the upload is. The checkpoint is not read a second time, and the training
  loop has no hash to wait for. Each rank hashes the files it writes, and the hashes reach the
  coordinator with DCP's gathered write results. The coordinator's ``finish`` collects them with the
  hash of DCP's ``.metadata``.
"""

from __future__ import annotations

import hashlib
import io
import os
import threading
from collections.abc import Generator
from concurrent.futures import Future as ConcurrentFuture
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint.filesystem import FileSystem, FileSystemWriter
from torch.distributed.checkpoint.metadata import Metadata
from torch.distributed.checkpoint.planner import SavePlan, SavePlanner
from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions
from torch.distributed.checkpoint.storage import WriteResult
from torch.futures import Future


class HostStager(DefaultStager):
    """DCP's stager with its buffers kept across saves and its copies made by the calling thread alone."""

    def __init__(self, *, pinned: bool) -> None:
        super().__init__(
            StagingOptions(
                use_pinned_memory=pinned,
                use_shared_memory=False,
                use_async_staging=False,
                use_non_blocking_copy=False,
            )
        )

    def stage(
        self, state_dict: dict[str, Any], **kwargs: Any
    ) -> dict[str, Any] | ConcurrentFuture[dict[str, Any]]:
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # process-wide, but the training loop is waiting for this copy
        try:
            return super().stage(state_dict, **kwargs)
        finally:
            torch.set_num_threads(threads)


class _HashingStream(io.IOBase):
    """A file being written, hashed as it is written: what DCP's writer calls on a stream (write, tell,
    flush, fileno, close)."""

    def __init__(self, raw: io.IOBase) -> None:
        super().__init__()
        self.raw = raw
        self.digest = hashlib.sha256()

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        written: int = self.raw.write(data)
        self.digest.update(memoryview(data).cast("B")[:written])
        return written

    def tell(self) -> int:
        return self.raw.tell()

    def flush(self) -> None:
        self.raw.flush()

    def fileno(self) -> int:
        return self.raw.fileno()

    def close(self) -> None:
        super().close()  # flushes first
        self.raw.close()


class _HashingFileSystem(FileSystem):
    """DCP's local file system, recording the sha256 of every file it writes under the file's name."""

    def __init__(self) -> None:
        self.sha256: dict[str, str] = {}
        self._lock = threading.Lock()  # DCP writes one file per writer thread

    @contextmanager
    def create_stream(self, path: str | os.PathLike[str], mode: str) -> Generator[io.IOBase, None, None]:
        with super().create_stream(path, mode) as raw:
            stream = _HashingStream(raw)
            yield stream
        with self._lock:
            self.sha256[Path(path).name] = stream.digest.hexdigest()

    def rename(self, path: str | os.PathLike[str], new_path: str | os.PathLike[str]) -> None:
        """DCP writes ``.metadata`` as a temporary file and renames it: the hash follows the name."""
        super().rename(path, new_path)
        with self._lock:
            self.sha256[Path(new_path).name] = self.sha256.pop(Path(path).name)


class _HashedWrites(list[WriteResult]):
    """One rank's write results with the hashes of the files it wrote (DCP gathers these to the
    coordinator's ``finish``)."""

    def __init__(self, writes: list[WriteResult], sha256: dict[str, str]) -> None:
        super().__init__(writes)
        self.sha256 = sha256


class HashingWriter(FileSystemWriter):
    """``FileSystemWriter`` (fsynced) that hashes every file as it writes it; on the coordinator, after the
    save, :attr:`sha256` holds the hash of every file of the checkpoint, written by any rank."""

    def __init__(self, path: Path, *, thread_count: int) -> None:
        super().__init__(path, sync_files=True, thread_count=thread_count)
        self.fs: _HashingFileSystem = _HashingFileSystem()
        self.sha256: dict[str, str] | None = None

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future[list[WriteResult]]:
        written = super().write_data(plan, planner).wait()
        hashed: Future[list[WriteResult]] = Future()
        hashed.set_result(_HashedWrites(written, dict(self.fs.sha256)))
        return hashed

    def finish(self, metadata: Metadata, results: list[list[WriteResult]]) -> None:
        gathered: dict[str, str] = {}
        for writes in results:
            if not isinstance(writes, _HashedWrites):
                raise TypeError(f"a rank's write results carry no hashes ({type(writes).__name__})")
            gathered.update(writes.sha256)
        super().finish(metadata, results)
        self.sha256 = {**gathered, **self.fs.sha256}
