"""Trace readers: SWF, Alibaba GPU 2020, Philly/Helios CSV, ``sacct -P`` and ``sacct --json``.

:func:`read_trace` picks the reader from ``fmt`` or, with ``auto``, from the file: ``.swf`` or ``;``
comments -> SWF; a JSON document -> sacct --json; a ``|``-separated header with JobID -> sacct -P; a
CSV header naming submit/gpu columns -> Helios/Philly; otherwise 10-column rows -> Alibaba.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from mfukit.errors import InputError, UnknownNameError
from mfukit.sched.traces.alibaba import read_alibaba
from mfukit.sched.traces.common import Rows, TraceRead
from mfukit.sched.traces.helios import read_helios
from mfukit.sched.traces.sacct import read_sacct_json
from mfukit.sched.traces.sacct_parsable import read_sacct_parsable
from mfukit.sched.traces.shape import JobFactory
from mfukit.sched.traces.swf import read_swf

Reader = Callable[[Path, JobFactory, Rows], TraceRead]
READERS: dict[str, Reader] = {
    "swf": read_swf,
    "alibaba": read_alibaba,
    "helios": read_helios,
    "philly": read_helios,
    "sacct-json": read_sacct_json,
    "sacct-p": read_sacct_parsable,
}
FORMATS = ("auto", *READERS)


def detect_format(path: Path) -> str:
    try:
        with path.open(encoding="utf-8", errors="replace") as handle:
            head = handle.read(4096)
    except FileNotFoundError:
        raise InputError("file not found", source=str(path), hint="check the path") from None
    except OSError as error:
        raise InputError(f"cannot read the trace: {error}", source=str(path)) from None
    first = next((line for line in head.splitlines() if line.strip()), "")
    lowered = first.lower()
    if path.suffix.lower() == ".swf" or first.lstrip().startswith(";"):
        return "swf"
    if first.lstrip().startswith("{"):
        return "sacct-json"
    if "|" in first and "jobid" in lowered:
        return "sacct-p"
    if "submit" in lowered and "gpu" in lowered:
        return "helios"
    if lowered.startswith("job_name") or len(first.split(",")) == 10:
        return "alibaba"
    raise InputError(
        "cannot tell the trace format",
        source=str(path),
        hint=f"pass --trace-format, one of: {', '.join(READERS)}",
    )


def read_trace(
    path: Path,
    *,
    gpus_per_node: int,
    cluster_gpus: int,
    fmt: str = "auto",
    skip_bad: bool = False,
    missing_limit_factor: float = 1.0,
) -> TraceRead:
    if fmt != "auto" and fmt not in READERS:
        raise UnknownNameError("trace format", fmt, FORMATS, field="--trace-format")
    chosen = detect_format(path) if fmt == "auto" else fmt
    if not path.is_file():
        raise InputError("file not found", source=str(path), hint="check the path")
    factory = JobFactory(gpus_per_node, cluster_gpus, missing_limit_factor)
    return READERS[chosen](path, factory, Rows(str(path), skip_bad))
