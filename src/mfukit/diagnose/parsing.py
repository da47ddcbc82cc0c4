"""Find the artifacts and parse each with the sources that read it, in worker processes when the input is
large enough to pay for them. Only the sources are imported here (the rules, gates and models are not), so
reading a trace set costs what the parsers cost.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from mfukit.diagnose.records import Record
from mfukit.diagnose.sources import detect, sources
from mfukit.errors import InputError

if TYPE_CHECKING:
    from mfukit.core.results import ProgressCallback

MAX_WORKERS = 8
# A worker process costs ~30-40 MiB of its own (interpreter, numpy, the pages of its parent's heap it
# touches) and ~0.3 s to start; it pays off once it has about a second of parsing to do. At the
# ~100 MB/s one core parses traces (benchmarks/diagnose.py), each worker gets at least this much input.
PARALLEL_MIN_BYTES = 256 * 2**20


TRAIN_RUN_INTERNALS = ("checkpoints", "data", "faults", "config.json", "goodput.json", "result.json")
"""What an ``mfukit train`` run directory (the one holding ``ledger.jsonl``) keeps besides its artifacts:
checkpoint shards, token data, fault markers and its own summaries, none of them evidence of performance.
Its metrics.jsonl, ledger.jsonl and logs/ (torchrun's output, NCCL lines included) are read."""


def _train_internal(path: Path, runs: set[Path]) -> bool:
    return any(run in path.parents and path.relative_to(run).parts[0] in TRAIN_RUN_INTERNALS for run in runs)


def collect(paths: Iterable[Path]) -> list[Path]:
    """Files under ``paths`` (directories walked recursively, hidden entries and the internals of an
    ``mfukit train`` run directory skipped), sorted; an InputError when there are none."""
    paths = list(paths)
    files: list[Path] = []
    for path in paths:
        if not path.exists():
            raise InputError("no such file or directory", value=str(path), hint="check the path")
        if path.is_dir():
            found = [
                p
                for p in sorted(path.rglob("*"))
                if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts)
            ]
            runs = {p.parent for p in found if p.name == "ledger.jsonl"}
            files.extend(p for p in found if not _train_internal(p, runs))
        else:
            files.append(path)
    if not files:
        given = [str(p) for p in paths]
        raise InputError(
            "no artifacts to diagnose: the directory holds no files (hidden entries are skipped)",
            value=given[0] if len(given) == 1 else given,
            expected="files of these kinds, anywhere under it: "
            + "; ".join(source.description for source in sources()),
            hint="point mfukit diagnose at the job's output directory (profiler traces, training log, "
            "nvidia-smi/DCGM telemetry, NCCL logs, sacct output)",
        )
    return files


Parsed = tuple[Path, str, list[Record], str | None]


def parse_file(path: Path) -> Parsed:
    """(path, kind, records, error): a file no source recognises, or whose parser fails, is an error
    string, never an exception. A file several sources read (NCCL lines in a training log) has each
    kind, joined by ``+``; what one parser could not read does not lose what another did."""
    found = detect(path)
    if not found:
        return path, "unrecognised", [], "not a recognised artifact kind"
    kinds: list[str] = []
    records: list[Record] = []
    errors: list[str] = []
    for source in found:
        try:
            records.extend(source.parse(path))
            kinds.append(source.kind)
        except Exception as error:  # a parser bug or an input it cannot survive: say so, go on
            kinds.append(f"{source.kind} (unreadable)")
            errors.append(f"{source.kind} parser failed: {type(error).__name__}: {error}")
    return path, "+".join(kinds), records, "; ".join(errors) or None


def default_workers(files: list[Path]) -> int:
    """Worker processes for ``files``: one per ``PARALLEL_MIN_BYTES`` of input, at most one per core
    (and ``MAX_WORKERS``); 1 means parse in this process."""
    total = sum(path.stat().st_size for path in files)
    return max(1, min(len(files), os.cpu_count() or 1, MAX_WORKERS, total // PARALLEL_MIN_BYTES))


def parse_files(
    files: list[Path], *, workers: int | None = None, progress: ProgressCallback | None = None
) -> list[Parsed]:
    """Parse every file, several at once when the input is large enough to pay for worker processes
    (each worker streams one file at a time, so memory stays bounded by the number of workers)."""
    count = workers if workers is not None else default_workers(files)
    results: list[Parsed] = []
    if count <= 1 or len(files) <= 1:
        for index, path in enumerate(files):
            results.append(parse_file(path))
            if progress is not None:
                progress(index + 1, len(files))
        return results
    import multiprocessing  # only when there is a pool to run (they take a tenth of the import time)
    from concurrent.futures import ProcessPoolExecutor

    context = multiprocessing.get_context(
        "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    )
    with ProcessPoolExecutor(max_workers=count, mp_context=context) as pool:
        for index, parsed in enumerate(pool.map(parse_file, files, chunksize=1)):
            results.append(parsed)
            if progress is not None:
                progress(index + 1, len(files))
    return results
