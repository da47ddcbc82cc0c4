"""``mfukit bench ... --format json`` results: the measurements a diagnosis can judge.

* ``bench.matmul/1``: the best GEMM FLOP/s per dtype, judged against the catalog's dense peak and the GEMM
  efficiency the performance model assumes (``rules.bench``);
* ``bench.collectives/1``: each collective's table, printed in nccl-tests' columns, goes to the nccl-tests
  judge as an nccl-tests run would (``comm.nccl_tests`` parses it). A gloo run (CPU ranks) is kept out of
  the judgement against the cluster's NCCL fabric, and said;
* ``bench.checkpoint/1``: DCP save throughput and async blocking time of one node, for the storage gate.

``bench.membw/1`` and ``bench.step/1`` are recognised and not used (nothing in the diagnosis weighs them).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mfukit.diagnose.records import BenchCheckpoint, BenchMatmul, DamagedInput, NcclTestsResult, Record
from mfukit.diagnose.sources import Source
from mfukit.diagnose.sources.jsonstream import open_text
from mfukit.errors import InputError

SCHEMA_PREFIX = '"schema": "bench.'
MAX_CHARS = 1 << 24  # a bench result is kilobytes


def detect(path: Path, head: str) -> bool:
    return head.lstrip()[:1] == "{" and SCHEMA_PREFIX in head


def _number(result: dict[str, Any], key: str, path: Path) -> float:
    value = result.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"result.{key} is missing or not a number")
    return float(value)


def _matmul(path: Path, result: dict[str, Any]) -> list[Record]:
    best = result.get("peak_flops_per_s")
    points = result.get("points")
    environment = result.get("environment") or {}
    if not isinstance(best, dict) or not best or not isinstance(points, list):
        raise ValueError("result.peak_flops_per_s and result.points are required")
    rates = tuple(
        (str(dtype), float(value)) for dtype, value in best.items() if isinstance(value, int | float)
    )
    sizes = [int(p["size"]) for p in points if isinstance(p, dict) and isinstance(p.get("size"), int)]
    return [
        BenchMatmul(
            file=str(path),
            device=str(environment.get("device", "unknown")),
            device_name=str(environment.get("device_name", "unknown")),
            best_flops_per_s=rates,
            largest_size=max(sizes, default=0),
        )
    ]


def _collectives(path: Path, result: dict[str, Any]) -> list[Record]:
    from mfukit.comm.nccl_tests import parse_nccl_tests  # loaded only when such a file is read

    tables = result.get("nccl_tests")
    if not isinstance(tables, dict) or not tables:
        raise ValueError("result.nccl_tests (one nccl-tests table per collective) is required")
    backend = str(result.get("backend", "unknown"))
    not_judged = (
        f"measured with {backend} on CPU ranks: not comparable with the cluster's NCCL fabric; run "
        "`mfukit bench collectives` on the GPU nodes"
        if backend == "gloo"
        else None
    )
    found: list[Record] = []
    for op, text in tables.items():
        name = f"{path}#{op}"
        try:
            run = parse_nccl_tests(str(text), name_hint=f"{op}_perf", source=name)
        except InputError as error:
            found.append(NcclTestsResult(name, None, error.message))
            continue
        found.append(NcclTestsResult(name, run, not_judged))
    return found


def _checkpoint(path: Path, result: dict[str, Any]) -> list[Record]:
    return [
        BenchCheckpoint(
            file=str(path),
            state_bytes=_number(result, "state_bytes", path),
            save_bytes_per_s=_number(result, "save_bytes_per_s", path),
            async_blocking_s=_number(result, "async_blocking_s", path),
            disk_write_bytes_per_s=_number(result, "disk_write_bytes_per_s", path),
        )
    ]


READERS = {"bench.matmul/1": _matmul, "bench.collectives/1": _collectives, "bench.checkpoint/1": _checkpoint}


def parse(path: Path) -> list[Record]:
    """The records of a bench result; a damaged one is a :class:`DamagedInput` that says what is wrong."""
    try:
        with open_text(path) as stream:
            envelope = json.loads(stream.read(MAX_CHARS))
    except (OSError, EOFError, UnicodeDecodeError, json.JSONDecodeError) as error:
        return [DamagedInput(str(path), f"not readable as JSON ({error})")]
    schema = envelope.get("schema") if isinstance(envelope, dict) else None
    result = envelope.get("result") if isinstance(envelope, dict) else None
    if not isinstance(schema, str) or not isinstance(result, dict):
        return [DamagedInput(str(path), "not an mfukit JSON envelope (it needs schema and result)")]
    reader = READERS.get(schema)
    try:
        return reader(path, result) if reader is not None else []
    except (ValueError, TypeError, KeyError) as error:
        return [DamagedInput(str(path), f"{schema}: {error}")]


SOURCE = Source(
    kind="mfukit_bench",
    description="mfukit bench results (--format json: matmul, collectives, checkpoint)",
    detect=detect,
    parse=parse,
)
