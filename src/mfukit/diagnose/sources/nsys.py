"""Nsight Systems exports (``nsys export --type sqlite``, or ``nsys profile --export=sqlite``), read as a
Kineto trace is.

The tables (Nsight Systems exporter docs, "Exported data"; read against a real 2022.1 export, schema 2.9.1):
``CUPTI_ACTIVITY_KIND_KERNEL`` (start/end in ns, ``streamId``, ``correlationId``, names as ``StringIds``),
``CUPTI_ACTIVITY_KIND_MEMCPY`` / ``_MEMSET``, ``CUPTI_ACTIVITY_KIND_RUNTIME`` (the launches, same
``correlationId``), ``NVTX_EVENTS`` (push/pop and start/end ranges; the text inline or by ``textId``),
``OSRT_API`` (OS runtime calls), ``TARGET_INFO_GPU`` (the device). Tables are created only when something
of their kind was traced, so each is optional but the kernel table. Every row becomes the Chrome-trace event
the Kineto reduction (:mod:`.kineto`) reads: kernels, memcpys and memsets on the GPU, runtime launches,
NVTX ranges and OS runtime calls as CPU spans. An NVTX range named like a step (``ProfilerStep#12``,
``step 12``, ``iteration 12``, ``train_step_12``) marks one, as torch.profiler's ``ProfilerStep#`` does.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any

from mfukit.diagnose.records import DamagedInput, RankTrace
from mfukit.diagnose.sources import Source
from mfukit.diagnose.sources.jsonstream import StreamProblems
from mfukit.diagnose.sources.kineto import Collector, EventArgs, TraceEvent, analyse

NS_TO_US = 1e-3
SQLITE_MAGIC = "SQLite format 3"
_STEP = re.compile(
    r"^(?:ProfilerStep#|step[ _#]?|iteration[ _#]?|train_step[ _#]?)(\d{1,12})$", re.IGNORECASE
)
# CUpti_ActivityMemcpyKind (CUPTI docs): the names Kineto gives the same copies
COPY_KINDS = {1: "Memcpy HtoD", 2: "Memcpy DtoH", 3: "Memcpy HtoA", 4: "Memcpy AtoH", 5: "Memcpy AtoA",
              6: "Memcpy AtoD", 7: "Memcpy DtoA", 8: "Memcpy DtoD", 9: "Memcpy HtoH", 10: "Memcpy PtoP"}  # fmt: skip
RANGE_EVENT_TYPES = (59, 60)  # NvtxPushPopRange, NvtxStartEndRange (ENUM_NSYS_EVENT_TYPE)


class _Export:
    """The parts of a trace stream :func:`kineto.analyse` reads, for an nsys export."""

    def __init__(self, header: dict[str, Any], events: int) -> None:
        self.header = header
        self.problems = StreamProblems()
        self.events_read = events


def detect(path: Path, head: str) -> bool:
    return head.startswith(SQLITE_MAGIC)


def _tables(db: sqlite3.Connection) -> set[str]:
    return {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _columns(db: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in db.execute(f"PRAGMA table_info({table})")}


def parse(path: Path) -> list[RankTrace | DamagedInput]:
    try:
        return _parse(path)
    except sqlite3.Error as error:  # not an SQLite database, or a damaged one
        return [DamagedInput(str(path), f"cannot be read as an Nsight Systems SQLite export ({error}); "
                             "export it again: nsys export --type sqlite -o profile.sqlite profile.nsys-rep")]  # fmt: skip


def _parse(path: Path) -> list[RankTrace | DamagedInput]:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    db.text_factory = lambda raw: raw.decode("utf-8", "replace")
    try:
        tables = _tables(db)
        if "CUPTI_ACTIVITY_KIND_KERNEL" not in tables:
            return [DamagedInput(str(path), "an SQLite file with no CUPTI_ACTIVITY_KIND_KERNEL table: not an Nsight "
                                 "Systems export with CUDA traced (nsys profile -t cuda,nvtx,osrt; nsys export --type sqlite)")]  # fmt: skip
        strings = dict(db.execute("SELECT id, value FROM StringIds")) if "StringIds" in tables else {}
        events = _events(db, tables, strings)
        header = _header(db, tables)
    finally:
        db.close()
    events.sort(key=lambda e: e.ts or 0.0)
    collector = Collector()
    collector.add(events)
    return [analyse(path, _Export(header, len(events)), collector)]


def _events(db: sqlite3.Connection, tables: set[str], strings: dict[int, str]) -> list[TraceEvent]:
    out: list[TraceEvent] = []

    def span(cat: str, name: str, start: int, end: int | None, correlation: int | None = None) -> None:
        if end is None or end < start:
            return
        args = EventArgs(correlation=correlation) if correlation is not None else None
        out.append(TraceEvent("X", cat, name, start * NS_TO_US, (end - start) * NS_TO_US, args))

    name_column = (
        "demangledName" if "demangledName" in _columns(db, "CUPTI_ACTIVITY_KIND_KERNEL") else "shortName"
    )
    for start, end, name, correlation in db.execute(
        f"SELECT start, end, {name_column}, correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL"
    ):
        span("kernel", strings.get(name, str(name)), start, end, correlation)
    if "CUPTI_ACTIVITY_KIND_MEMCPY" in tables:
        for start, end, kind, correlation in db.execute(
            "SELECT start, end, copyKind, correlationId FROM CUPTI_ACTIVITY_KIND_MEMCPY"
        ):
            span("gpu_memcpy", COPY_KINDS.get(kind, "Memcpy"), start, end, correlation)
    if "CUPTI_ACTIVITY_KIND_MEMSET" in tables:
        for start, end, correlation in db.execute(
            "SELECT start, end, correlationId FROM CUPTI_ACTIVITY_KIND_MEMSET"
        ):
            span("gpu_memset", "Memset (Device)", start, end, correlation)
    if "CUPTI_ACTIVITY_KIND_RUNTIME" in tables:
        for start, end, name, correlation in db.execute(
            "SELECT start, end, nameId, correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME"
        ):
            span("cuda_runtime", strings.get(name, ""), start, end, correlation)
    if "NVTX_EVENTS" in tables:
        text_id = "textId" in _columns(db, "NVTX_EVENTS")
        query = f"SELECT start, end, eventType, text, {'textId' if text_id else 'NULL'} FROM NVTX_EVENTS"
        for start, end, kind, text, text_ref in db.execute(query):
            if kind in RANGE_EVENT_TYPES:
                name = text if text is not None else strings.get(text_ref, "")
                step = _STEP.match(name.strip())
                span("user_annotation", f"ProfilerStep#{step.group(1)}" if step else name, start, end)
    if "OSRT_API" in tables:
        for start, end, name in db.execute("SELECT start, end, nameId FROM OSRT_API"):
            span("cpu_op", strings.get(name, ""), start, end)
    return out


def _header(db: sqlite3.Connection, tables: set[str]) -> dict[str, Any]:
    """A Kineto-style header: the GPU's name (``deviceProperties``) from TARGET_INFO_GPU."""
    if "TARGET_INFO_GPU" not in tables:
        return {}
    names = [row[0] for row in db.execute("SELECT name FROM TARGET_INFO_GPU") if row[0]]
    return {"deviceProperties": [{"id": 0, "name": names[0]}]} if names else {}


SOURCE = Source(
    kind="nsys",
    description="Nsight Systems SQLite export (nsys export --type sqlite)",
    detect=detect,
    parse=parse,
)
