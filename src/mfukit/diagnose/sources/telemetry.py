"""Shared pieces of the GPU telemetry parsers: throttle-reason bits and value cleaning.

Clock event (throttle) reason bits, from NVML / dcgm_fields.h (``DCGM_FI_DEV_CLOCK_THROTTLE_REASONS``):
0x1 GPU idle, 0x2 application clocks setting, 0x4 SW power cap, 0x8 HW slowdown (clocks cut by half or
more: thermal, power brake or fast trigger), 0x10 sync boost, 0x20 SW thermal slowdown, 0x40 HW thermal
slowdown, 0x80 HW power brake slowdown, 0x100 display clocks.
"""

from __future__ import annotations

import re

REASON_BITS: dict[str, int] = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
    "display_clock_setting": 0x100,
}
REASON_NAMES = {bit: name for name, bit in REASON_BITS.items()}
# Reasons that mean the hardware protects itself (heat, power delivery): a fault to fix, not a setting.
HARDWARE_REASONS = 0x8 | 0x20 | 0x40 | 0x80
# Labels used by `nvidia-smi -q` ("Clocks Event Reasons" / "Clocks Throttle Reasons" block).
Q_REASON_LABELS: dict[str, str] = {
    "idle": "gpu_idle",
    "applications clocks setting": "applications_clocks_setting",
    "sw power cap": "sw_power_cap",
    "hw slowdown": "hw_slowdown",
    "hw thermal slowdown": "hw_thermal_slowdown",
    "hw power brake slowdown": "hw_power_brake_slowdown",
    "sync boost": "sync_boost",
    "sw thermal slowdown": "sw_thermal_slowdown",
    "display clock setting": "display_clock_setting",
}
BLANK_SENTINEL = 9.0e18  # DCGM's INT64 blank values (9223372036854775794 and neighbours)
_VALUE = re.compile(r"^\s*([-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)\s*([A-Za-z%]*)\s*$")


def reason_names(mask: int) -> list[str]:
    return [name for bit, name in sorted(REASON_NAMES.items()) if mask & bit]


def number(text: str) -> float | None:
    """``"1410 MHz"`` -> 1410.0; ``"[N/A]"``, ``"N/A"``, blanks and DCGM sentinels -> None."""
    match = _VALUE.match(text)
    if match is None:
        return None
    value = float(match.group(1))
    if abs(value) >= BLANK_SENTINEL:
        return None
    return value


def active(text: str) -> bool | None:
    lowered = text.strip().lower()
    if lowered in ("active", "yes", "true"):
        return True
    if lowered in ("not active", "no", "false", "none"):
        return False
    return None


def host_from(path_name: str) -> str:
    """The host a per-node telemetry file belongs to, from its name (``node017.csv`` -> ``node017``)."""
    stem = path_name.split(".")[0]
    for prefix in ("nvidia-smi-", "nvidia_smi_", "nvsmi-", "dcgm-", "dcgm_", "smi-", "q-"):
        stem = stem.removeprefix(prefix)
    return stem or path_name
