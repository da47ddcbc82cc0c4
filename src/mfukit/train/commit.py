"""The checkpoint commit protocol: a checkpoint exists only once it is complete.

1. Every rank writes its shards into ``<root>/.staging-step-NNNNNNNN/`` (DCP, files fsynced).
2. Rank 0, after all shards and DCP's ``.metadata`` are on disk, writes ``mfukit-checkpoint.json`` (step,
   world size, torch version, config hash, sampler position, every file with its size and its sha256)
   last, through a temporary file, fsync and rename. The hashes are computed by the writer as it writes
   each file (:class:`mfukit.train.dcp_io.HashingWriter`), never in the training loop; an async save
   commits in a background thread once its upload is done.
3. Rank 0 renames the staging directory to ``<root>/step-NNNNNNNN`` (atomic on POSIX) and fsyncs the root.
4. Older committed checkpoints beyond the newest ``keep`` are deleted.

On start, only ``step-*`` directories whose metadata parses, names the same step and lists files that are
all present with their recorded sizes count; staging directories (a crash mid-save) and anything else
are torn and are ignored, then removed. Torn checkpoints can never be loaded.

Before a resume, :meth:`CheckpointStore.verify` reads every file of the chosen checkpoint back against its
recorded sha256 (a flipped byte keeps the size, so the scan cannot see it); one that fails, or that
cannot be loaded, is set aside as ``corrupt-step-NNNNNNNN`` (:meth:`CheckpointStore.quarantine`, kept for
inspection, never loaded or pruned) and the next older one is tried. Checkpoints written before the
hashes existed carry none and are loaded unverified.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mfukit.core.files import write_text_atomic

META_NAME = "mfukit-checkpoint.json"
DCP_METADATA = ".metadata"
STAGING_PREFIX = ".staging-"
QUARANTINE_PREFIX = "corrupt-"
HASH_CHUNK_BYTES = 8 * 2**20
_STEP_DIR = re.compile(r"^step-(\d{8})$")


@dataclass(frozen=True)
class CheckpointMeta:
    step: int
    world_size: int
    torch_version: str
    config_hash: str
    sampler_position: int
    mode: str
    saved_unix_s: float
    files: dict[str, int] = field(default_factory=dict)
    params_sha256: str | None = None
    sha256: dict[str, str] = field(default_factory=dict)
    """every file's content hash (empty in checkpoints written before mfukit recorded them)"""

    @property
    def total_bytes(self) -> int:
        return sum(self.files.values())

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CheckpointMeta:
        known = {name: data[name] for name in cls.__dataclass_fields__ if name in data}
        return cls(**known)


@dataclass(frozen=True)
class Committed:
    path: Path
    meta: CheckpointMeta


@dataclass(frozen=True)
class Torn:
    path: Path
    reason: str


def hash_files(directory: Path) -> dict[str, str]:
    """sha256 of every file in ``directory`` but the commit record, read back in chunks (the check of
    :meth:`CheckpointStore.verify`; a save hashes its files as it writes them)."""
    digests: dict[str, str] = {}
    for entry in sorted(directory.iterdir()):
        if entry.name == META_NAME or not entry.is_file():
            continue
        digest = hashlib.sha256()
        with entry.open("rb") as stream:
            while chunk := stream.read(HASH_CHUNK_BYTES):
                digest.update(chunk)
        digests[entry.name] = digest.hexdigest()
    return digests


def _fsync_directory(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


class CheckpointStore:
    def __init__(self, root: Path, keep: int) -> None:
        self.root = root
        self.keep = keep

    def final_path(self, step: int) -> Path:
        return self.root / f"step-{step:08d}"

    def staging_path(self, step: int) -> Path:
        return self.root / f"{STAGING_PREFIX}step-{step:08d}"

    def begin(self, step: int) -> Path:
        """The (empty) staging directory for ``step``; every rank calls this before writing its shards."""
        path = self.staging_path(step)
        path.mkdir(parents=True, exist_ok=True)
        return path

    def commit(self, staging: Path, meta: CheckpointMeta, sha256: dict[str, str] | None = None) -> Committed:
        """Rank 0, after every shard is written: metadata last, then the atomic rename. ``sha256``: the
        files' hashes if the writer computed them (:class:`mfukit.train.dcp_io.HashingWriter`), else they are
        read back and hashed here (:func:`hash_files`)."""
        files = {
            entry.name: entry.stat().st_size for entry in sorted(staging.iterdir()) if entry.name != META_NAME
        }
        if sha256 is None:
            sha256 = hash_files(staging)
        if set(sha256) != set(files):
            raise RuntimeError(f"hashed {sorted(sha256)} but the checkpoint holds {sorted(files)}")
        meta = CheckpointMeta(**{**asdict(meta), "files": files, "sha256": sha256})
        write_text_atomic(staging / META_NAME, json.dumps(asdict(meta), indent=2), durable=True)
        _fsync_directory(staging)
        final = self.final_path(meta.step)
        if final.exists():  # the same step was committed before a restart: same config, same bytes
            shutil.rmtree(staging)
        else:
            staging.rename(final)
        _fsync_directory(self.root)
        return Committed(final, meta)

    def scan(self) -> tuple[list[Committed], list[Torn]]:
        """Complete checkpoints (oldest first) and torn ones, without changing anything."""
        if not self.root.is_dir():
            return [], []
        committed: list[Committed] = []
        torn: list[Torn] = []
        for entry in sorted(self.root.iterdir()):
            if entry.name.startswith(STAGING_PREFIX):
                torn.append(Torn(entry, "staging directory: the save never committed"))
                continue
            match = _STEP_DIR.match(entry.name)
            if not match or not entry.is_dir():
                continue
            problem = self._problem(entry, int(match.group(1)))
            if problem is None:
                committed.append(Committed(entry, self._meta(entry)))
            else:
                torn.append(Torn(entry, problem))
        committed.sort(key=lambda c: c.meta.step)
        return committed, torn

    @staticmethod
    def _meta(path: Path) -> CheckpointMeta:
        return CheckpointMeta.from_json(json.loads((path / META_NAME).read_text(encoding="utf-8")))

    def _problem(self, path: Path, step: int) -> str | None:
        try:
            meta = self._meta(path)
        except FileNotFoundError:
            return f"no {META_NAME}: the save never committed"
        except (OSError, ValueError, TypeError) as error:
            return f"unreadable {META_NAME}: {error}"
        if meta.step != step:
            return f"{META_NAME} says step {meta.step}"
        if DCP_METADATA not in meta.files:
            return f"no DCP {DCP_METADATA} among the committed files"
        for name, size in meta.files.items():
            file = path / name
            if not file.is_file():
                return f"{name} is missing"
            if file.stat().st_size != size:
                return f"{name} has {file.stat().st_size} B, {size} B were committed"
        return None

    @staticmethod
    def verify(committed: Committed) -> str | None:
        """Why ``committed`` cannot be trusted (a file whose bytes differ from its recorded sha256), or
        None; a checkpoint written without hashes passes (only its sizes were checked)."""
        if not committed.meta.sha256:
            return None
        found = hash_files(committed.path)
        for name, expected in committed.meta.sha256.items():
            if found.get(name) != expected:
                return f"{name} does not match its recorded sha256 (the bytes changed after the save)"
        return None

    def quarantine(self, committed: Committed) -> Path:
        """Set a checkpoint that failed verification or loading aside, out of every later scan."""
        target = self.root / f"{QUARANTINE_PREFIX}{committed.path.name}"
        shutil.rmtree(target, ignore_errors=True)  # an older quarantine of the same step
        committed.path.rename(target)
        _fsync_directory(self.root)
        return target

    def latest(self) -> Committed | None:
        committed, _ = self.scan()
        return committed[-1] if committed else None

    def discard_torn(self) -> list[Torn]:
        """Delete torn checkpoints (call only while no save is in flight: at the start of an attempt)."""
        _, torn = self.scan()
        for item in torn:
            shutil.rmtree(item.path, ignore_errors=True)
        return torn

    def prune(self) -> list[Path]:
        """Delete committed checkpoints older than the newest ``keep``."""
        committed, _ = self.scan()
        removed = [c.path for c in committed[: max(0, len(committed) - self.keep)]]
        for path in removed:
            shutil.rmtree(path, ignore_errors=True)
        return removed
