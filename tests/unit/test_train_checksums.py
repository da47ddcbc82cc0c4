"""Checkpoints carry a sha256 per file: a changed byte is found before a resume loads it (issue 15)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path

from test_train_commit import meta, save

from mfukit.train.commit import META_NAME, CheckpointStore, Committed, hash_files


def flip_byte(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def test_commit_records_the_hash_of_every_file(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, keep=3)
    path = save(store, 4)
    recorded = json.loads((path / META_NAME).read_text())["sha256"]
    assert set(recorded) == set(json.loads((path / META_NAME).read_text())["files"])
    assert recorded["__0_0.distcp"] == hashlib.sha256(b"x" * 100).hexdigest()
    assert hash_files(path) == recorded
    (latest,) = store.scan()[0]
    assert store.verify(latest) is None


def test_hashes_computed_off_the_loop_are_the_ones_recorded(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, keep=3)
    staging = save(store, 4, commit=False)
    done = store.commit(staging, meta(4), hash_files(staging))
    assert done.meta.sha256 == hash_files(done.path)


def test_a_flipped_byte_keeps_the_size_but_fails_verification(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, keep=3)
    save(store, 4)
    path = save(store, 8)
    flip_byte(path / "__1_0.distcp", 40)
    committed, torn = store.scan()
    assert [c.meta.step for c in committed] == [4, 8] and torn == []  # sizes alone cannot see it
    problem = store.verify(committed[-1])
    assert problem is not None and "__1_0.distcp" in problem
    assert store.verify(committed[0]) is None


def test_a_quarantined_checkpoint_leaves_every_later_scan_and_is_kept(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, keep=1)
    save(store, 4)
    path = save(store, 8)
    flip_byte(path / "__0_0.distcp", 0)
    newer = store.scan()[0][-1]
    target = store.quarantine(newer)
    assert target.name == "corrupt-step-00000008" and target.is_dir()
    assert [c.meta.step for c in store.scan()[0]] == [4] and store.scan()[1] == []
    assert store.discard_torn() == [] and store.prune() == []  # neither torn nor counted against keep
    assert target.is_dir()


def test_a_checkpoint_saved_without_hashes_passes_on_its_sizes(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, keep=3)
    path = save(store, 4)
    record = json.loads((path / META_NAME).read_text())
    del record["sha256"]  # as mfukit wrote it before the hashes
    (path / META_NAME).write_text(json.dumps(record))
    (legacy,) = store.scan()[0]
    assert legacy.meta.sha256 == {}
    assert store.verify(legacy) is None
    assert store.verify(Committed(path, type(legacy.meta)(**{**asdict(legacy.meta), "sha256": {"x": "0"}})))
