"""dcgm-exporter Prometheus scrapes (``curl host:9400/metrics``), one or many concatenated.

Each GPU is identified by ``Hostname``/``hostname`` and ``gpu`` labels. DCGM's blank sentinels
(9223372036854775794...) are dropped. The *_VIOLATION counters are in microseconds per dcgm_fields.h;
dcgm-exporter's HELP text says nanoseconds in some versions, so the HELP text decides when it says.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

from mfukit.diagnose.records import GpuSample, GpuSeries
from mfukit.diagnose.sources import Source
from mfukit.diagnose.sources.jsonstream import open_text
from mfukit.diagnose.sources.telemetry import BLANK_SENTINEL

MHZ = 1e6
_LINE = re.compile(r"^(DCGM_\w+)\{(.*?)\}\s+(\S+)")
_LABEL = re.compile(r'(?<!\w)(\w+)="((?:[^"\\]|\\.)*)"')  # a name starts a word: linear
_FIELDS: dict[str, str] = {
    "DCGM_FI_DEV_SM_CLOCK": "sm_clock_hz",
    "DCGM_FI_DEV_MAX_SM_CLOCK": "max_sm_clock_hz",
    "DCGM_FI_DEV_POWER_USAGE": "power_w",
    "DCGM_FI_DEV_ENFORCED_POWER_LIMIT": "power_limit_w",
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": "power_limit_w",
    "DCGM_FI_DEV_GPU_TEMP": "temperature_c",
    "DCGM_FI_DEV_GPU_UTIL": "utilization",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "utilization",
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": "throttle_reasons",
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": "throttle_reasons",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": "ecc_uncorrected",
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": "ecc_corrected",
    "DCGM_FI_DEV_ROW_REMAP_PENDING": "remap_pending",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": "remap_failure",
    "DCGM_FI_DEV_RETIRED_PENDING": "retired_pending",
    "DCGM_FI_DEV_THERMAL_VIOLATION": "thermal_violation_s",
    "DCGM_FI_DEV_POWER_VIOLATION": "power_violation_s",
    "DCGM_FI_DEV_XID_ERRORS": "xid",
}
_SCALE = {"sm_clock_hz": MHZ, "max_sm_clock_hz": MHZ}


def detect(path: Path, head: str) -> bool:
    return re.search(r"^DCGM_F[IX]_\w+\{", head, re.MULTILINE) is not None


def parse(path: Path) -> list[GpuSeries]:
    violation_scale = 1e-6  # microseconds (dcgm_fields.h)
    current: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    samples: dict[tuple[str, str], list[GpuSample]] = defaultdict(list)
    names: dict[tuple[str, str], str] = {}
    with open_text(path) as stream:
        for line in stream:
            if line.startswith("# HELP DCGM_FI_DEV_THERMAL_VIOLATION") or line.startswith(
                "# HELP DCGM_FI_DEV_POWER_VIOLATION"
            ):
                if "(in ns)" in line:
                    violation_scale = 1e-9
                continue
            match = _LINE.match(line)
            if match is None:
                continue
            field = _FIELDS.get(match.group(1))
            if field is None:
                continue
            try:
                value = float(match.group(3))
            except ValueError:
                continue
            if abs(value) >= BLANK_SENTINEL or value != value:
                continue
            labels = dict(_LABEL.findall(match.group(2)))
            host = labels.get("Hostname") or labels.get("hostname") or ""
            key = (host, labels.get("gpu", "0"))
            if labels.get("modelName"):
                names[key] = labels["modelName"]
            if match.group(1) == "DCGM_FI_DEV_GPU_UTIL":
                value /= 100.0
            if field.endswith("violation_s"):
                value *= violation_scale
            value *= _SCALE.get(field, 1.0)
            if field in current[key]:
                samples[key].append(_sample(current[key]))
                current[key] = {}
            current[key][field] = value
    for key, fields in current.items():
        if fields:
            samples[key].append(_sample(fields))
    return [
        GpuSeries(str(path), host, gpu, names.get((host, gpu)), series)
        for (host, gpu), series in samples.items()
    ]


def _sample(fields: dict[str, float]) -> GpuSample:
    def flag(name: str) -> bool | None:
        return bool(fields[name]) if name in fields else None

    reasons = fields.get("throttle_reasons")
    xid = fields.get("xid")
    return GpuSample(
        time_s=None,
        sm_clock_hz=fields.get("sm_clock_hz"),
        max_sm_clock_hz=fields.get("max_sm_clock_hz"),
        power_w=fields.get("power_w"),
        power_limit_w=fields.get("power_limit_w"),
        temperature_c=fields.get("temperature_c"),
        utilization=fields.get("utilization"),
        throttle_reasons=int(reasons) if reasons is not None else None,
        ecc_uncorrected=fields.get("ecc_uncorrected"),
        ecc_corrected=fields.get("ecc_corrected"),
        retired_pending=flag("retired_pending"),
        remap_pending=flag("remap_pending"),
        remap_failure=flag("remap_failure"),
        thermal_violation_s=fields.get("thermal_violation_s"),
        power_violation_s=fields.get("power_violation_s"),
        xid=int(xid) if xid else None,
    )


SOURCE = Source(
    kind="dcgm",
    description="dcgm-exporter Prometheus scrape",
    detect=detect,
    parse=parse,
)
