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


_HOST_PREFIX = re.compile(r"^([A-Za-z][\w.-]{0,62}): ")


def host_prefix(line: str) -> tuple[str, str]:
    """(host, rest) of a line as pdsh/clush print each node's output (``node017: ...``); ("", line) when the
    line carries no host. The host never comes from a file's name: files are named by whoever collected
    them (``nvidia-smi_node007.csv`` may hold another node's GPUs)."""
    found = _HOST_PREFIX.match(line)
    if found is None or found.group(1).lower() in ("gpu", "timestamp"):
        return "", line
    return found.group(1), line[found.end() :]


def gpu_label(host: str, gpu: str, uuid: str | None, file: str) -> str:
    """How to point at one GPU: on its host when an artifact named it, else by its id, UUID and file."""
    if host:
        return f"{host} GPU {gpu}"
    return (
        f"GPU {gpu}"
        + (f" ({uuid})" if uuid else "")
        + f" of the node whose output is {file} (it names no host)"
    )


def drain_step(hosts: list[str], reason: str, unnamed: list[tuple[str | None, str]]) -> str:
    """The ``scontrol`` drain for the hosts the artifacts named; for GPUs no artifact placed on a host
    ((uuid, file)), the command that finds their node first. Never a host made up from a file name."""
    if hosts:
        return (
            f"drain the node(s) now: scontrol update nodename={','.join(hosts)} state=drain reason={reason}"
        )
    uuid, file = unnamed[0]
    if uuid:
        return (
            f"find the node holding {uuid} ({file} names no host): srun --nodes=<job's nodes> --ntasks-per-node=1 "
            f"bash -c 'nvidia-smi -L | grep -q {uuid} && hostname', then scontrol update nodename=<that node> "
            f"state=drain reason={reason}"
        )
    return (
        f"find the node {file} was collected on (it names no host; collect with pdsh -w <nodes> so each line "
        f"carries its host), then scontrol update nodename=<that node> state=drain reason={reason}"
    )
