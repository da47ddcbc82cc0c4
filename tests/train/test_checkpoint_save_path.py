"""The harness's save path: staged copies that reuse their buffers on one thread, files hashed as they are
written, and an async save committed off the training loop."""

from __future__ import annotations

import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.metadata import Metadata
from torch.distributed.checkpoint.state_dict_saver import save

from mfukit.train.checkpoint import Checkpointer, TrainState
from mfukit.train.commit import CheckpointMeta, CheckpointStore, Committed, hash_files
from mfukit.train.dcp_io import HashingWriter, HostStager
from mfukit.train.faults import FaultInjector

pytestmark = pytest.mark.torch


@pytest.fixture(autouse=True)
def _single_process_dcp() -> Iterator[None]:
    with warnings.catch_warnings():  # DCP notes that it saves in a single process: that is the point here
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        yield


def state() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return {f"t{i}": torch.randn(1000 + 37 * i, generator=generator) for i in range(5)}


def test_the_writer_records_the_hash_of_every_file_it_writes(tmp_path: Path) -> None:
    writer = HashingWriter(tmp_path / "ckpt", thread_count=3)
    save(state(), storage_writer=writer, no_dist=True)
    on_disk = hash_files(tmp_path / "ckpt")
    assert writer.sha256 == on_disk  # read back, the files hash the same
    assert ".metadata" in on_disk and sum(name.endswith(".distcp") for name in on_disk) == 3


def test_a_rank_without_hashes_fails_the_save(tmp_path: Path) -> None:
    writer = HashingWriter(tmp_path, thread_count=1)
    with pytest.raises(TypeError, match="carry no hashes"):
        writer.finish(Metadata(state_dict_metadata={}), [[]])


def test_the_stager_reuses_its_buffers_and_restores_the_thread_count() -> None:
    threads = torch.get_num_threads()
    source = state()
    stager = HostStager(pinned=False)
    try:
        first = stager.stage(source)
        assert isinstance(first, dict)
        for tensor in source.values():
            tensor.add_(1.0)
        second = stager.stage(source)
        assert isinstance(second, dict)
    finally:
        stager.close()
    assert torch.get_num_threads() == threads
    for name, tensor in source.items():
        assert torch.equal(second[name], tensor)  # a copy of the state as it is now
        assert second[name].data_ptr() == first[name].data_ptr()  # in the buffer of the first save
        assert second[name].data_ptr() != tensor.data_ptr()


class _WatchedStore(CheckpointStore):
    """A store that notes which thread commits."""

    def __init__(self, root: Path, keep: int) -> None:
        super().__init__(root, keep)
        self.threads: list[str] = []

    def commit(self, staging: Path, meta: CheckpointMeta, sha256: dict[str, str] | None = None) -> Committed:
        self.threads.append(threading.current_thread().name)
        return super().commit(staging, meta, sha256)


def test_an_async_save_is_committed_off_the_training_loop(tmp_path: Path) -> None:
    model = nn.Linear(64, 64)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.ones(2, 64)).sum().backward()
    optimizer.step()
    store = _WatchedStore(tmp_path / "checkpoints", keep=1)
    records: list[tuple[str, dict[str, Any]]] = []
    dist.init_process_group("gloo", init_method=(tmp_path / "store").as_uri(), rank=0, world_size=1)
    try:
        checkpointer = Checkpointer(
            store,
            model,
            optimizer,
            TrainState(),
            group=dist.new_group(backend="gloo"),
            mode="async",
            writer_threads=2,
            config_hash="test",
            faults=FaultInjector([], tmp_path / "faults", 0, lambda *a, **k: None),
            record=lambda kind, **fields: records.append((kind, fields)),
            verify=False,
        )
        checkpointer.save(1)
        checkpointer.save(2)  # waits for the first save's commit, then prunes it (keep=1) in the background
        checkpointer.close()
    finally:
        dist.destroy_process_group()
    assert store.threads and all(name.startswith("mfukit-checkpoint-commit") for name in store.threads)
    (latest,) = store.scan()[0]
    assert latest.meta.step == 2 and latest.meta.sha256 == hash_files(latest.path)
    commits = [fields for kind, fields in records if kind == "commit"]
    assert [c["step"] for c in commits] == [1, 2] and commits[1]["pruned"] == ["step-00000001"]
    assert checkpointer.committed == [1, 2] and checkpointer.last_commit_s is not None
