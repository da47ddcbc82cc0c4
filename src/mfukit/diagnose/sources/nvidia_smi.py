"""``nvidia-smi --query-gpu=... --format=csv`` series and ``nvidia-smi -q`` reports.

The CSV header names the fields (``clocks.sm [MHz]``); values carry units (``1410 MHz``, ``250.3 W``),
missing ones read ``[N/A]``. Clock event reasons come either as the hex mask
(``clocks_event_reasons.active``, legacy ``clocks_throttle_reasons.active``) or one Active/Not Active
column per reason. The host is the ``node: `` prefix pdsh/clush put on each line, never the file's name
(which names whoever collected it); without one it is unknown ('').
"""

from __future__ import annotations

import csv
import re
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

from mfukit.diagnose.records import GpuSample, GpuSeries
from mfukit.diagnose.sources import Source
from mfukit.diagnose.sources.jsonstream import open_text
from mfukit.diagnose.sources.telemetry import Q_REASON_LABELS, REASON_BITS, active, host_prefix, number

MHZ = 1e6
_HEADER_FIELD = re.compile(r"^[a-z_][a-z0-9_.]*$")
_CSV_MARKERS = (
    "utilization.gpu",
    "clocks.",
    "power.draw",
    "temperature.gpu",
    "pci.bus_id",
    "clocks_event_reasons",
)


def _field(header: str) -> str:
    """``clocks.sm [MHz]`` -> ``clocks.sm``: string operations, linear in the header (a lazy regex was
    quadratic on a long one)."""
    name = header.strip()
    if name.endswith("]") and "[" in name:
        name = name[: name.index("[")].rstrip()
    return name.lower()


_STAMP = re.compile(r"^\s*(\d{4})[/-](\d\d)[/-](\d\d)[ T](\d\d):(\d\d):(\d\d)(?:\.(\d+))?")


def _timestamp(text: str) -> float | None:
    match = _STAMP.match(text)
    if match:
        year, month, day, hour, minute, second = (int(match.group(i)) for i in range(1, 7))
        fraction = float("0." + match.group(7)) if match.group(7) else 0.0
        try:
            return datetime(year, month, day, hour, minute, second, tzinfo=UTC).timestamp() + fraction
        except ValueError:
            return None
    for fmt in ("%Y/%m/%d %H:%M:%S.%f", "%Y/%m/%d %H:%M:%S", "%Y-%m-%d %H:%M:%S.%f", "%Y-%m-%d %H:%M:%S"):
        try:
            return datetime.strptime(text.strip(), fmt).replace(tzinfo=UTC).timestamp()
        except ValueError:
            continue
    return None


def _reasons(row: dict[str, str]) -> int | None:
    for key in ("clocks_event_reasons.active", "clocks_throttle_reasons.active"):
        value = row.get(key, "").strip()
        if value.lower().startswith("0x"):
            try:
                return int(value, 16)
            except ValueError:
                return None
    mask = None
    for key, value in row.items():
        for prefix in ("clocks_event_reasons.", "clocks_throttle_reasons."):
            if key.startswith(prefix) and key.removeprefix(prefix) in REASON_BITS:
                state = active(value)
                if state is not None:
                    mask = (mask or 0) | (REASON_BITS[key.removeprefix(prefix)] if state else 0)
    return mask


def _csv_sample(row: dict[str, str]) -> GpuSample:
    def get(*keys: str) -> float | None:
        for key in keys:
            if key in row:
                value = number(row[key])
                if value is not None:
                    return value
        return None

    sm = get("clocks.sm", "clocks.current.sm")
    max_sm = get("clocks.max.sm", "clocks.max.sm_clock")
    utilization = get("utilization.gpu")
    pending = row.get("retired_pages.pending", "")
    return GpuSample(
        time_s=_timestamp(row.get("timestamp", "")),
        sm_clock_hz=sm * MHZ if sm is not None else None,
        max_sm_clock_hz=max_sm * MHZ if max_sm is not None else None,
        power_w=get("power.draw", "power.draw.instant"),
        power_limit_w=get("enforced.power.limit", "power.limit"),
        temperature_c=get("temperature.gpu"),
        utilization=utilization / 100.0 if utilization is not None else None,
        throttle_reasons=_reasons(row),
        ecc_uncorrected=get("ecc.errors.uncorrected.volatile.total"),
        ecc_corrected=get("ecc.errors.corrected.volatile.total"),
        retired_pending=active(pending) if pending else None,
        remap_pending=active(row["remapped_rows.pending"]) if "remapped_rows.pending" in row else None,
        remap_failure=active(row["remapped_rows.failure"]) if "remapped_rows.failure" in row else None,
    )


def parse_csv(path: Path) -> list[GpuSeries]:
    series: dict[tuple[str, str], list[GpuSample]] = defaultdict(list)
    names: dict[tuple[str, str], str] = {}
    uuids: dict[tuple[str, str], str] = {}
    with open_text(path) as stream:
        reader = csv.reader(stream, skipinitialspace=True)
        header: list[str] | None = None
        for cells in reader:
            if not cells or not any(c.strip() for c in cells):
                continue
            host, cells[0] = host_prefix(cells[0])
            fields = [_field(c) for c in cells]
            if all(_HEADER_FIELD.match(f) for f in fields):
                header = fields
                continue
            if header is None or len(cells) != len(header):
                continue
            row = dict(zip(header, (c.strip() for c in cells), strict=True))
            key = (host, row.get("index") or row.get("pci.bus_id") or row.get("uuid") or "0")
            series[key].append(_csv_sample(row))
            if row.get("name"):
                names[key] = row["name"]
            if row.get("uuid"):
                uuids[key] = row["uuid"]
    return [
        GpuSeries(str(path), host, gpu, names.get((host, gpu)), samples, uuids.get((host, gpu)))
        for (host, gpu), samples in series.items()
    ]


# ------------------------------------------------------------------------------------------ nvidia-smi -q

_GPU_HEADER = re.compile(r"^GPU\s+([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d)\s*$")


def parse_q(path: Path) -> list[GpuSeries]:
    host = ""  # nvidia-smi -q names no host (its lines carry a pdsh prefix at most, stripped below)
    gpus: list[tuple[str, dict[str, str]]] = []
    fields: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    with open_text(path) as stream:
        for raw in stream:
            prefix, line = host_prefix(raw.rstrip("\n"))
            host = prefix or host
            header = _GPU_HEADER.match(line.strip())
            if header:
                fields = {}
                gpus.append((header.group(1), fields))
                stack = []
                continue
            if not gpus or not line.strip():
                continue
            indent = len(line) - len(line.lstrip())
            while stack and stack[-1][0] >= indent:
                stack.pop()
            # "  Key   : value" and "  Section" by partition and strip, linear in the line (the regexes
            # they replace, with lazy groups before \s*$, were cubic on a long line of spaces)
            before, colon, after = line.partition(":")
            if colon and before and after.strip():
                key = " / ".join([name for _, name in stack] + [before.strip()]).lower()
                fields[key] = after.strip()
            else:
                stack.append((indent, line.strip().rstrip(":").strip()))
    return [
        GpuSeries(
            str(path), host, bus, fields.get("product name"), [_q_sample(fields)], fields.get("gpu uuid")
        )
        for bus, fields in gpus
    ]


def _q_sample(fields: dict[str, str]) -> GpuSample:
    def get(*suffixes: str) -> float | None:
        for suffix in suffixes:
            for key, value in fields.items():
                if key.endswith(suffix):
                    found = number(value)
                    if found is not None:
                        return found
        return None

    def flag(*suffixes: str) -> bool | None:
        for suffix in suffixes:
            for key, value in fields.items():
                if key.endswith(suffix):
                    return active(value)
        return None

    mask = None
    for key, value in fields.items():
        block, _, label = key.rpartition(" / ")
        if (
            "clocks event reasons" in block or "clocks throttle reasons" in block
        ) and label in Q_REASON_LABELS:
            state = active(value)
            if state is not None:
                mask = (mask or 0) | (REASON_BITS[Q_REASON_LABELS[label]] if state else 0)
    sm = get("clocks / sm")
    max_sm = get("max clocks / sm")
    uncorrected = [
        number(v)
        for k, v in fields.items()
        if "ecc errors / volatile" in k
        and ("uncorrectable" in k or "double bit" in k)
        and number(v) is not None
    ]
    utilization = get("utilization / gpu")
    return GpuSample(
        time_s=None,
        sm_clock_hz=sm * MHZ if sm is not None else None,
        max_sm_clock_hz=max_sm * MHZ if max_sm is not None else None,
        power_w=get("power draw", "average power draw"),
        power_limit_w=get("current power limit", "power limit"),
        temperature_c=get("gpu current temp"),
        utilization=utilization / 100.0 if utilization is not None else None,
        throttle_reasons=mask,
        ecc_uncorrected=sum(v for v in uncorrected if v is not None) if uncorrected else None,
        retired_pending=flag("retired pages / pending page blacklist", "retired pages / pending"),
        remap_pending=flag("remapped rows / pending"),
        remap_failure=flag("remapped rows / remapping failure occurred"),
    )


def detect(path: Path, head: str) -> bool:
    first = head.lstrip().split("\n", 1)[0]
    if "," in first and any(marker in first for marker in _CSV_MARKERS):
        return True
    return "NVSMI LOG" in head or ("Attached GPUs" in head and "Driver Version" in head)


def parse(path: Path) -> list[GpuSeries]:
    with open_text(path) as stream:
        start = stream.read(4096)
    if "NVSMI LOG" in start or "Attached GPUs" in start:
        return parse_q(path)
    return parse_csv(path)


SOURCE = Source(
    kind="nvidia_smi",
    description="nvidia-smi --query-gpu CSV series, or nvidia-smi -q",
    detect=detect,
    parse=parse,
)
