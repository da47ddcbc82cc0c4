"""dmesg / journald / syslog lines with NVIDIA XIDs (``NVRM: Xid (PCI:0000:3b:00): 79, ...``) and
NVSwitch SXids. Timestamps: ISO, ``dmesg -T`` (``[Tue Sep 10 10:47:46 2024]``) or journald
(``Sep 10 10:47:46 host kernel:``, no year: kept as the time of day for ordering only).
"""

from __future__ import annotations

import calendar
import re
from pathlib import Path

from mfukit.diagnose.records import XidEvent
from mfukit.diagnose.sources import Source
from mfukit.diagnose.sources.jsonstream import open_text
from mfukit.diagnose.sources.training_log import wall_seconds

# gpud's robust form: "NVRM: Xid.*?: (\d+)," with the PCI id in the parentheses.
XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9a-fA-F:.]+)\):\s*(\d+),")
SXID = re.compile(r"nvidia-nvswitch\d*: SXid \((?:PCI:)?([0-9a-fA-F:.]+)\):\s*(\d+),")
JOURNAL = re.compile(r"^(\w{3})\s+(\d{1,2})\s+(\d\d):(\d\d):(\d\d)\s+(\S+)\s+kernel:")
DMESG_T = re.compile(r"^\[\w{3} (\w{3})\s+(\d{1,2}) (\d\d):(\d\d):(\d\d) (\d{4})\]")
MONTHS = {name: index for index, name in enumerate(calendar.month_abbr) if name}
_NAME_HINTS = ("dmesg", "journal", "kern", "syslog", "messages")


def detect(path: Path, head: str) -> bool:
    if "NVRM: Xid" in head or "SXid (" in head:
        return True
    named = any(hint in path.name.lower() for hint in _NAME_HINTS)
    return named and ("kernel:" in head or re.search(r"^\[\s*\d+\.\d+\]", head, re.MULTILINE) is not None)


def _time(line: str) -> tuple[str | None, float | None]:
    journal = JOURNAL.match(line)
    if journal:
        month, day, hour, minute, second, host = journal.groups()
        seconds = (
            (MONTHS.get(month, 1) * 31 + int(day)) * 86400 + int(hour) * 3600 + int(minute) * 60 + int(second)
        )
        return host, float(seconds)
    dmesg = DMESG_T.match(line)
    if dmesg:
        month, day, hour, minute, second, year = dmesg.groups()
        stamp = (int(year), MONTHS.get(month, 1), int(day), int(hour), int(minute), int(second), 0, 0, 0)
        return None, float(calendar.timegm(stamp))
    return None, wall_seconds(line)


def parse(path: Path) -> list[XidEvent]:
    events: list[XidEvent] = []
    with open_text(path) as stream:
        for number, line in enumerate(stream, start=1):
            match = XID.search(line)
            nvswitch = False
            if match is None:
                match = SXID.search(line)
                nvswitch = match is not None
            if match is None:
                continue
            host, wall = _time(line)
            events.append(
                XidEvent(
                    file=str(path),
                    line=number,
                    host=host,  # journal lines name it; dmesg does not (never the file's name)
                    pci=match.group(1),
                    xid=int(match.group(2)),
                    text=line.strip()[:300],
                    wall_s=wall,
                    nvswitch=nvswitch,
                )
            )
    return events


SOURCE = Source(
    kind="kernel_log",
    description="dmesg / journal lines with NVIDIA XID and NVSwitch SXid errors",
    detect=detect,
    parse=parse,
)
