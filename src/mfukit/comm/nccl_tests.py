"""Parse nccl-tests (and rccl-tests) output of every era into a typed :class:`NcclTestsRun`.

Handled (nccl-tests src/common.cu, src/util.cu; shared/reference/comms/nccl-tests.md):

* the current format (``# nccl-tests version``, ``Collective test starting``, ``Group`` column, PCI
  ``[dom:bus:dev]`` ids, width-adaptive numbers, ``#wrong``, ``N/A`` when validation is off);
* 2022-2025 builds (``graph:`` header, ``[0x18]`` bus ids) and <= 2021 builds (no ``Group`` column, an
  ``error`` column holding a max-abs-error such as ``4e-07``, no ``redop``/``root`` columns);
* mpirun ``--tag-output`` prefixes (``[1,0]<stdout>:``), per-field ``[0]`` tags (nccl#1453), srun
  ``0:`` labels, NCCL INFO/WARN lines interleaved with (and even splicing) table rows, ANSI colours;
* RCCL's ``none``/``0`` redop and root and its asterisk footer; markdown renderings that dropped
  the ``#`` and collapsed whitespace; the ``-J`` JSON report.

The parser never raises anything but :class:`~mfukit.errors.InputError` (nothing to parse at all);
everything degraded is a warning on the run.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from mfukit.comm.collectives import Collective, busbw_factor, collective_named
from mfukit.errors import InputError, UnknownNameError

# mpirun's rank tag "[1,0]<stdout>:": digits and commas in one class run, ending on a digit (no repeated group)
_TAGS = re.compile(r"\[\d[\d,]*(?<=\d)\](?:<std(?:out|err)>:?)?")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_SRUN_LABEL = re.compile(r"^\s*\d+:\s")
# the host:pid:tid prefix starts a token (lookbehind), so a search over a long token stays linear
_NCCL_MESSAGE = re.compile(r"(?:(?<!\S)\S+:\d+:\d+\s+(?:\[\d+\]\s+)?)?NCCL (?:INFO|WARN|TRACE|ABORT)\b")
_NCCL_ENV = re.compile(r"\b(NCCL_[A-Z0-9_]+) set (?:by environment )?to (\S+?)\.?(?:\s|$)")
_NCCL_VERSION = re.compile(r"\b[NR]CCL version (\d+\.\d+\.\d+)")
_HEADER_VALUES = re.compile(
    r"(nThread|nGpus|minBytes|maxBytes|step|warmup iters|iters|agg iters|validation|graph):\s*(-?\d+)"
)
_HEADER_PAIRS = re.compile(r"\b(nThread|nGpus|minBytes|maxBytes)\s+(-?\d+)")
_STEP_KIND = re.compile(r"step:\s*\d+\((factor|bytes)\)")
_DEVICE = re.compile(
    r"Rank\s+(?P<rank>\d+)\s+(?:Group\s+(?P<group>\d+)\s+)?Pid\s+(?P<pid>\d+)\s+on\s+(?P<host>\S+)\s+"
    r"device\s+(?P<device>\d+)\s+\[(?P<bus>[^\]]*)\]\s*(?P<name>.*)"
)
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_CLOCK = re.compile(r"^\d{2}:\d{2}:\d{2}$")
_WRONG_NAMES = ("#wrong", "wrong", "error", "errors")
_TIME_NAMES = ("time", "cputime")
_DEFAULT_LAYOUTS: dict[int, list[str]] = {
    13: [
        "size",
        "count",
        "type",
        "redop",
        "root",
        "time",
        "algbw",
        "busbw",
        "wrong",
        "time",
        "algbw",
        "busbw",
        "wrong",
    ],
    12: [
        "size",
        "count",
        "type",
        "redop",
        "time",
        "algbw",
        "busbw",
        "wrong",
        "time",
        "algbw",
        "busbw",
        "wrong",
    ],
    11: ["size", "count", "type", "time", "algbw", "busbw", "wrong", "time", "algbw", "busbw", "wrong"],
}

Format = Literal["text", "json"]


@dataclass(frozen=True)
class Result:
    """One half of a row (out-of-place or in-place) as printed."""

    time_s: float
    algbw_bytes_per_s: float
    busbw_bytes_per_s: float
    wrong: float | None


@dataclass(frozen=True)
class Row:
    size_bytes: int
    count: int
    dtype: str | None
    redop: str | None
    root: int | None
    out_of_place: Result | None
    in_place: Result | None
    line: int

    @property
    def results(self) -> list[Result]:
        return [r for r in (self.out_of_place, self.in_place) if r is not None]

    @property
    def best_busbw_bytes_per_s(self) -> float:
        return max((r.busbw_bytes_per_s for r in self.results), default=0.0)

    @property
    def best_time_s(self) -> float:
        return min((r.time_s for r in self.results), default=math.inf)


@dataclass(frozen=True)
class Device:
    rank: int
    group: int | None
    pid: int | None
    host: str
    device: int
    bus_id: str
    name: str


@dataclass
class NcclTestsRun:
    """Everything one nccl-tests output says, plus what was degraded while reading it."""

    format: Format
    collective: Collective | None = None
    binary: str | None = None
    nccl_tests_version: str | None = None
    nccl_version: str | None = None
    rccl: bool = False
    header: dict[str, int] = field(default_factory=dict)
    step_kind: str | None = None
    devices: list[Device] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)
    error_column: Literal["wrong_count", "max_error", "none"] = "none"
    out_of_bounds: int | None = None
    avg_busbw_bytes_per_s: float | None = None
    avg_busbw_status: str | None = None
    warnings: list[str] = field(default_factory=list)
    inferred_ranks: int | None = None
    nccl_env: dict[str, str] = field(default_factory=dict)

    @property
    def num_ranks(self) -> int | None:
        """Ranks in the communicator: the device list, else the header of a single process, else inferred."""
        if self.devices:
            return len({d.rank for d in self.devices})
        return self.inferred_ranks

    @property
    def hosts(self) -> list[str]:
        return sorted({d.host for d in self.devices})

    @property
    def peak_busbw_bytes_per_s(self) -> float:
        return max((row.best_busbw_bytes_per_s for row in self.rows), default=0.0)

    @property
    def validation(self) -> bool | None:
        value = self.header.get("validation")
        return None if value is None else value != 0


def _number(token: str) -> float | None:
    text = token.rstrip("*")
    if text.upper() in ("N/A", "NA", "-"):
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _integer(token: str) -> int | None:
    try:
        return int(token)
    except ValueError:
        return None


def _clean(line: str) -> tuple[str, str | None]:
    """The table-relevant part of a raw line, and an NCCL message spliced into it (if any)."""
    text = _ANSI.sub("", line).replace("\r", "")
    text = _SRUN_LABEL.sub("", text, count=1)
    message = _NCCL_MESSAGE.search(text) if "NCCL " in text else None
    spliced = None
    if message is not None:
        spliced = text[message.start() :]
        text = text[: message.start()]
    return _TAGS.sub(" ", text).strip(), spliced


def _columns(text: str) -> list[str] | None:
    """Column names from the header line ``size count type redop root time algbw busbw #wrong ...``."""
    tokens = text.lstrip("#").split()
    lowered = [t.lower() for t in tokens]
    if len(tokens) < 6 or lowered[:2] != ["size", "count"]:
        return None
    if not any(t in _TIME_NAMES for t in lowered):
        return None
    return ["wrong" if t in _WRONG_NAMES else t for t in lowered]


class _Reader:
    def __init__(self, run: NcclTestsRun):
        self.run = run
        self.columns: list[str] | None = None
        self.pending: list[str] = []
        self.pending_line = 0
        self.rejoined = 0
        self.skipped: list[int] = []

    def header_line(self, text: str) -> None:
        run = self.run
        body = text.lstrip("#").strip()
        if not body:
            return
        if body.startswith(("nccl-tests version", "rccl-tests version")):
            run.nccl_tests_version = body.split()[2] if len(body.split()) > 2 else None
            run.rccl = run.rccl or body.startswith("rccl")
            library = re.search(r"nccl-library=(\d+)", body)
            if library is not None and run.nccl_version is None:
                run.nccl_version = version_from_code(int(library.group(1)))
        elif body.startswith("Collective test starting:") or body.startswith("Collective test concluded:"):
            run.binary = body.split(":", 1)[1].strip() or run.binary
        elif body.startswith("nThread"):
            run.header.update({k: int(v) for k, v in _HEADER_PAIRS.findall(body)})
            run.header.update({k: int(v) for k, v in _HEADER_VALUES.findall(body)})
            kind = _STEP_KIND.search(body)
            run.step_kind = kind.group(1) if kind else None
        elif (device := _DEVICE.search(body)) is not None:
            run.devices.append(
                Device(
                    rank=int(device["rank"]),
                    group=int(device["group"]) if device["group"] else None,
                    pid=int(device["pid"]),
                    host=device["host"],
                    device=int(device["device"]),
                    bus_id=device["bus"],
                    name=device["name"].strip(),
                )
            )
        elif (columns := _columns(body)) is not None:
            self.columns = columns
            lowered = body.lower()
            run.error_column = (
                "wrong_count" if "wrong" in lowered else "max_error" if "error" in lowered else "none"
            )
        elif body.startswith("Out of bounds values"):
            words = body.partition(":")[2].split()
            run.out_of_bounds = _integer(words[0]) if words else None
        elif body.startswith("Avg bus bandwidth"):
            parts = body.partition(":")[2].split()
            number = _number(parts[0]) if parts else None
            run.avg_busbw_bytes_per_s = None if number is None else number * 1e9
            run.avg_busbw_status = parts[1] if len(parts) > 1 else None
        elif body.startswith("Errors with asterisks"):
            run.rccl = True

    def data_line(self, tokens: list[str], line_number: int) -> None:
        if not self.pending:
            self.pending_line = line_number
        elif _integer(tokens[0]) is not None and len(tokens) >= 10 and self._layout(tokens) is not None:
            # a fresh complete row: the pending fragment never completed
            self.skipped.append(self.pending_line)
            self.pending, self.pending_line = [], line_number
        joined = self.pending + tokens
        layout = self._layout(joined)
        if layout is None:
            if len(joined) < max(len(self.columns or []), 11):
                self.pending = joined
                return
            self.skipped.append(self.pending_line)
            self.pending = []
            return
        if self.pending:
            self.rejoined += 1
        self.pending = []
        row = self._row(layout, joined, self.pending_line)
        if row is None:
            self.skipped.append(self.pending_line)
        else:
            self.run.rows.append(row)

    def _layout(self, tokens: list[str]) -> list[str] | None:
        merged = _merge_timestamps(tokens)
        if self.columns is not None:
            # redop and root print as blanks for collectives without them (old alltoall, broadcast)
            for dropped in ((), ("redop",), ("root",), ("redop", "root")):
                layout = [name for name in self.columns if name not in dropped]
                if len(merged) == len(layout) and (not dropped or set(dropped) <= set(self.columns)):
                    return layout
            return None
        if len(merged) in _DEFAULT_LAYOUTS and _number(merged[2]) is None:
            return _DEFAULT_LAYOUTS[len(merged)]
        return None

    def _row(self, layout: list[str], tokens: list[str], line_number: int) -> Row | None:
        values = _merge_timestamps(tokens)
        size, count = _integer(values[0]), _integer(values[1])
        if size is None or count is None or size < 0 or count < 0:
            return None
        named = dict(zip(layout, values, strict=False))
        halves = [i for i, name in enumerate(layout) if name in _TIME_NAMES]
        results: list[Result | None] = []
        for start in halves[:2]:
            names = layout[start : start + 4]
            if names[1:3] != ["algbw", "busbw"]:
                return None
            time_us, algbw, busbw = (_number(values[start + k]) for k in range(3))
            if time_us is None or algbw is None or busbw is None or time_us < 0 or algbw < 0 or busbw < 0:
                results.append(None)
                continue
            wrong = _number(values[start + 3]) if len(names) > 3 and names[3] == "wrong" else None
            results.append(Result(time_us * 1e-6, algbw * 1e9, busbw * 1e9, wrong))
        if not any(results):
            return None
        out_of_place = results[0] if len(results) == 2 else None
        in_place = results[-1]
        root = _integer(named["root"]) if "root" in named else None
        return Row(
            size_bytes=size,
            count=count,
            dtype=named.get("type"),
            redop=named.get("redop"),
            root=root,
            out_of_place=out_of_place,
            in_place=in_place,
            line=line_number,
        )

    def finish(self) -> None:
        if self.pending:
            self.skipped.append(self.pending_line)
        if self.rejoined:
            self.run.warnings.append(
                f"{self.rejoined} table row(s) were split by interleaved NCCL log lines and were rejoined"
            )
        if self.skipped:
            shown = ", ".join(str(n) for n in self.skipped[:5])
            self.run.warnings.append(
                f"{len(self.skipped)} line(s) that look like table rows could not be read (line {shown}"
                f"{' ...' if len(self.skipped) > 5 else ''})"
            )


def _merge_timestamps(tokens: list[str]) -> list[str]:
    """``-S 1`` appends ``YYYY-mm-dd HH:MM:SS``: keep it as one column."""
    merged: list[str] = []
    for token in tokens:
        if merged and _CLOCK.match(token) and _DATE.match(merged[-1]):
            merged[-1] = f"{merged[-1]} {token}"
        else:
            merged.append(token)
    return merged


def _parse_text(text: str) -> NcclTestsRun:
    run = NcclTestsRun(format="text")
    reader = _Reader(run)
    for number, raw in enumerate(text.splitlines(), start=1):
        cleaned, spliced = _clean(raw)
        if spliced is not None and (version := _NCCL_VERSION.search(spliced)) is not None:
            run.nccl_version = run.nccl_version or version.group(1)
        if spliced is not None and (env := _NCCL_ENV.search(spliced)) is not None:
            run.nccl_env[env.group(1)] = env.group(2)
        if (version := _NCCL_VERSION.search(cleaned)) is not None:
            run.nccl_version = run.nccl_version or version.group(1)
            run.rccl = run.rccl or "RCCL version" in cleaned
            continue
        if not cleaned:
            continue
        tokens = cleaned.split()
        comment = cleaned.startswith("#")
        if comment or (_integer(tokens[0]) is None and not reader.pending):
            reader.header_line(cleaned)
            continue
        reader.data_line(tokens, number)
    reader.finish()
    return run


def _json_number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value) if math.isfinite(float(value)) else None
    if isinstance(value, str):
        return _number(value.strip())
    return None


def _json_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _json_result(value: Any) -> Result | None:
    if not isinstance(value, dict):
        return None
    time_us = _json_number(value.get("time", value.get("cpu_time")))
    algbw, busbw = _json_number(value.get("alg_bw")), _json_number(value.get("bus_bw"))
    if time_us is None or algbw is None or busbw is None:
        return None
    return Result(time_us * 1e-6, algbw * 1e9, busbw * 1e9, _json_number(value.get("nwrong")))


def version_from_code(code: int) -> str | None:
    """NCCL_VERSION_CODE as text: 21207 -> "2.12.7" (>= 2.9: x10000); 2708 -> "2.7.8" (older: x1000)."""
    if code <= 0:
        return None
    if code >= 10000:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


def _parse_json(document: Any) -> NcclTestsRun:
    if not isinstance(document, dict) or not isinstance(document.get("results"), list):
        raise InputError("is JSON but not an nccl-tests -J report (no 'results' list)", field="results")
    run = NcclTestsRun(format="json")
    args = document.get("args")
    if isinstance(args, list) and args and isinstance(args[0], str):
        run.binary = args[0].rsplit("/", 1)[-1]
    version = document.get("nccl_version")
    if isinstance(version, int) and not isinstance(version, bool):
        run.nccl_version = version_from_code(version)
    config = document.get("config")
    if isinstance(config, dict):
        names = {"nthreads": "nThread", "ngpus": "nGpus", "minimum_bytes": "minBytes", "maximum_bytes": "maxBytes",
                 "warmup_iters": "warmup iters", "iterations": "iters", "validation": "validation",
                 "graph": "graph", "aggregated_iterations": "agg iters"}  # fmt: skip
        for key, name in names.items():
            value = config.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                run.header[name] = value
        run.step_kind = "factor" if "step_factor" in config else "bytes" if "step_bytes" in config else None
    devices = document.get("devices")
    for entry in devices if isinstance(devices, list) else []:
        if isinstance(entry, dict) and _json_int(entry.get("rank")) is not None:
            run.devices.append(
                Device(
                    rank=_json_int(entry.get("rank")) or 0,
                    group=_json_int(entry.get("group")),
                    pid=_json_int(entry.get("pid")),
                    host=str(entry.get("hostname", "")),
                    device=_json_int(entry.get("device")) or 0,
                    bus_id=str(entry.get("device_hex", "")),
                    name=str(entry.get("device_info", "")),
                )
            )
    for index, entry in enumerate(document["results"]):
        row = _json_row(entry, index)
        if row is None:
            run.warnings.append(f"results[{index}] is not a complete nccl-tests result; skipped")
        else:
            run.rows.append(row)
    bounds = document.get("out_of_bounds")
    if isinstance(bounds, dict):
        run.out_of_bounds = _json_int(bounds.get("count"))
    average = document.get("average_bus_bandwidth")
    if isinstance(average, dict):
        value = _json_number(average.get("bandwidth"))
        run.avg_busbw_bytes_per_s = None if value is None else value * 1e9
        okay = average.get("okay")
        run.avg_busbw_status = {"true": "OK", "false": "FAILED"}.get(str(okay).lower())
    run.error_column = "wrong_count" if run.header.get("validation") else "none"
    return run


def _json_row(entry: Any, index: int) -> Row | None:
    if not isinstance(entry, dict):
        return None
    size, count = _json_int(entry.get("size")), _json_int(entry.get("count"))
    if size is None or count is None or size < 0 or count < 0:
        return None
    out_of_place, in_place = _json_result(entry.get("out_of_place")), _json_result(entry.get("in_place"))
    if out_of_place is None and in_place is None:
        return None
    root = entry.get("root")
    return Row(
        size_bytes=size,
        count=count,
        dtype=entry.get("type") if isinstance(entry.get("type"), str) else None,
        redop=entry.get("redop") if isinstance(entry.get("redop"), str) else None,
        root=_integer(root.strip()) if isinstance(root, str) else root if isinstance(root, int) else None,
        out_of_place=out_of_place,
        in_place=in_place,
        line=index,
    )


def parse_nccl_tests(text: str, *, name_hint: str | None = None, source: str | None = None) -> NcclTestsRun:
    """Read nccl-tests output (text of any era, or the ``-J`` JSON report).

    ``name_hint`` (a file name such as ``nccl_allgather.log``) names the collective when the output does not.
    """
    stripped = text.lstrip("\ufeff \t\r\n")
    if stripped.startswith("{"):
        try:
            document = json.loads(stripped)
        except (json.JSONDecodeError, RecursionError) as error:
            raise InputError(f"looks like JSON but does not parse: {error}", source=source) from None
        try:
            run = _parse_json(document)
        except InputError as error:
            raise error.at(source=source) from None
    else:
        run = _parse_text(text)
    if not run.rows:
        raise InputError(
            "holds no nccl-tests result rows",
            source=source,
            hint="pass the stdout of an nccl-tests binary (e.g. all_reduce_perf) or its -J JSON report",
        )
    _settle_collective(run, name_hint)
    _check(run)
    return run


def _settle_collective(run: NcclTestsRun, name_hint: str | None) -> None:
    for candidate in (run.binary, name_hint):
        for text in _name_candidates(candidate or ""):
            try:
                run.collective = collective_named(text)
                return
            except UnknownNameError:
                continue
    ratios = [
        r.busbw_bytes_per_s / r.algbw_bytes_per_s
        for row in run.rows
        for r in row.results
        if r.algbw_bytes_per_s >= 1e9
    ]
    if not ratios:
        run.warnings.append("the collective is not named in the output: pass --collective")
        return
    ratio = sorted(ratios)[len(ratios) // 2]
    redop = next((row.redop for row in run.rows if row.redop), None)
    unrooted = all(row.root in (None, -1) for row in run.rows) and any(row.root == -1 for row in run.rows)
    rooted = all(row.root is not None and row.root >= 0 for row in run.rows)
    if ratio < 0.01:
        run.warnings.append(
            "busbw is 0 at every size: a 1-rank communicator; the collective cannot be inferred"
        )
        return
    if 0.99 <= ratio <= 1.01 and rooted:
        run.collective = "broadcast" if redop in (None, "none") else "reduce"
    elif 0.99 <= ratio <= 1.01 and unrooted and redop not in (None, "none"):
        # busbw == algbw for a reduction without a root: all_reduce on 2 ranks (factor 2(n-1)/n = 1)
        run.collective = "all_reduce"
        run.inferred_ranks = 2
    elif 1.05 < ratio < 2.0:
        run.collective = "all_reduce"
        run.inferred_ranks = round(2.0 / (2.0 - ratio))
    elif ratio < 0.99 and redop not in (None, "none"):
        run.collective = "reduce_scatter"
        run.inferred_ranks = round(1.0 / (1.0 - ratio))
    if run.collective is None:
        run.warnings.append(
            "the collective is not named in the output and busbw/algbw does not settle it: pass --collective"
        )
    else:
        run.warnings.append(f"collective inferred as {run.collective} from busbw/algbw = {ratio:.2f}")


MAX_INFERRED_RANKS = 1 << 16
"""Largest rank count read off busbw/algbw: past it neighbouring counts' factors differ less than the
columns' two printed decimals resolve."""


def _ranks_from_columns(run: NcclTestsRun, collective: Collective) -> tuple[int, float] | None:
    """(ranks, busbw/algbw) when the columns give the rank count: nccl-tests prints busbw = algbw x
    factor(n) (2(n-1)/n for all_reduce, (n-1)/n for all_gather, reduce_scatter, alltoall; nccl-tests
    doc/PERFORMANCE.md), so the median ratio over sizes with algbw >= 1 GB/s (three or more printed
    digits) is the n whose factor is closest, within 1 %. None for a collective whose factor is 1."""
    ratios = sorted(
        r.busbw_bytes_per_s / r.algbw_bytes_per_s
        for row in run.rows
        for r in row.results
        if r.algbw_bytes_per_s >= 1e9
    )
    counts = np.arange(2, MAX_INFERRED_RANKS + 1)
    factors = busbw_factor(collective, counts)
    if not ratios or float(factors[0]) == float(factors[-1]):
        return None
    ratio = ratios[len(ratios) // 2]
    best = int(np.argmin(np.abs(factors - ratio)))
    if abs(float(factors[best]) - ratio) > 0.01 * ratio:
        return None
    return int(counts[best]), ratio


def _name_candidates(text: str) -> list[str]:
    """Every run of adjacent words of a file or binary name: ``nccl_all_reduce_perf.log`` -> ..., ``all_reduce``."""
    base = text.replace("\\", "/").rsplit("/", 1)[-1]
    words = [w for w in re.split(r"[^A-Za-z0-9]+", base) if w][:8]
    return [base] + ["_".join(words[i:j]) for i in range(len(words)) for j in range(i + 1, len(words) + 1)]


def _check(run: NcclTestsRun) -> None:
    """Warnings about what the run itself says: validation off, wrong elements, algbw definitions."""
    if run.collective is not None and not run.devices and run.inferred_ranks is None:
        threads, gpus = run.header.get("nThread"), run.header.get("nGpus")
        from_columns = _ranks_from_columns(run, run.collective)
        if from_columns is not None:
            run.inferred_ranks, ratio = from_columns
            run.warnings.append(
                f"no device list: {run.inferred_ranks} ranks, from the file's busbw/algbw = {ratio:.4f} "
                f"(nccl-tests' factor for {run.collective})"
            )
        elif threads and gpus:
            run.inferred_ranks = threads * gpus
            run.warnings.append(
                f"no device list: assuming {threads * gpus} rank(s) (nThread x nGpus of one process)"
            )
    if run.validation is False or all(r.wrong is None for row in run.rows for r in row.results):
        run.warnings.append("validation was off (-c 0): results were not checked for correctness")
    mismatched = [
        row.size_bytes
        for row in run.rows
        for r in row.results
        if r.time_s > 0
        and r.algbw_bytes_per_s >= 1e9
        and abs(row.size_bytes / r.time_s / r.algbw_bytes_per_s - 1) > 0.05
    ]
    if mismatched:
        run.warnings.append(
            f"printed algbw differs from size/time at {len(set(mismatched))} size(s) (e.g. {mismatched[0]} B): "
            "pre-2020 all_gather builds printed (n-1)/n x size/time (nccl-tests ec1b5e2); mfukit recomputes"
        )
