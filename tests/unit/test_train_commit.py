"""The checkpoint commit protocol: only complete, committed checkpoints are ever loaded."""

from __future__ import annotations

import json
from pathlib import Path

from mfukit.train.commit import DCP_METADATA, META_NAME, CheckpointMeta, CheckpointStore


def meta(step: int) -> CheckpointMeta:
    return CheckpointMeta(
        step=step,
        world_size=2,
        torch_version="2.13.0",
        config_hash="abc",
        sampler_position=step * 8,
        mode="sync",
        saved_unix_s=0.0,
    )


def save(store: CheckpointStore, step: int, *, commit: bool = True) -> Path:
    """What the ranks do: shards and DCP's .metadata into staging; rank 0 then commits."""
    staging = store.begin(step)
    (staging / "__0_0.distcp").write_bytes(b"x" * 100)
    (staging / "__1_0.distcp").write_bytes(b"y" * 80)
    (staging / DCP_METADATA).write_bytes(b"m")
    if commit:
        return store.commit(staging, meta(step)).path
    return staging


def test_commit_renames_staging_and_records_every_file(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, keep=3)
    path = save(store, 10)
    assert path.name == "step-00000010"
    assert not store.staging_path(10).exists()
    written = json.loads((path / META_NAME).read_text())
    assert written["files"] == {"__0_0.distcp": 100, "__1_0.distcp": 80, DCP_METADATA: 1}
    latest = store.latest()
    assert latest is not None
    assert (latest.meta.step, latest.meta.sampler_position, latest.meta.total_bytes) == (10, 80, 181)


def test_staging_of_a_crashed_save_is_torn_and_never_latest(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, keep=3)
    save(store, 4)
    save(store, 8, commit=False)  # crashed after the shards, before the commit
    latest = store.latest()
    assert latest is not None and latest.meta.step == 4
    _, torn = store.scan()
    assert [t.path.name for t in torn] == [".staging-step-00000008"]
    assert [t.path.name for t in store.discard_torn()] == [".staging-step-00000008"]
    assert not store.staging_path(8).exists()


def test_committed_looking_directories_are_checked(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, keep=5)
    good = save(store, 4)
    no_meta = save(store, 8)
    (no_meta / META_NAME).unlink()
    truncated = save(store, 12)
    (truncated / "__1_0.distcp").write_bytes(b"y" * 10)
    missing = save(store, 16)
    (missing / "__0_0.distcp").unlink()
    wrong_step = save(store, 20)
    wrong_step.rename(tmp_path / "step-00000024")
    committed, torn = store.scan()
    assert [c.path for c in committed] == [good]
    reasons = {t.path.name: t.reason for t in torn}
    assert "never committed" in reasons["step-00000008"]
    assert "10 B, 80 B were committed" in reasons["step-00000012"]
    assert "__0_0.distcp is missing" in reasons["step-00000016"]
    assert "says step 20" in reasons["step-00000024"]


def test_prune_keeps_the_newest_k(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, keep=2)
    for step in (5, 10, 15, 20):
        save(store, step)
    removed = store.prune()
    assert [p.name for p in removed] == ["step-00000005", "step-00000010"]
    assert [c.meta.step for c in store.scan()[0]] == [15, 20]


def test_recommitting_a_step_keeps_the_first(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, keep=3)
    first = save(store, 6)
    again = save(store, 6)
    assert again == first
    assert not store.staging_path(6).exists()
    assert [c.meta.step for c in store.scan()[0]] == [6]
