"""NCCL_DEBUG=INFO lines, in a log of their own or interleaved with a training log or nccl-tests output,
analysed by ``comm.nccl_log`` as they stream past (``embedded``: a file may feed this source and another)."""

from __future__ import annotations

from pathlib import Path

from mfukit.diagnose.records import NcclLog
from mfukit.diagnose.sources import Source
from mfukit.diagnose.sources.jsonstream import open_text


def detect(path: Path, head: str) -> bool:
    """Any NCCL INFO/WARN line (``host:pid:tid [dev] NCCL INFO ...``) in the head of a text file."""
    if head.lstrip()[:1] in ("{", "["):  # a trace or a JSON report: its strings are not log lines
        return False
    if "NCCL" not in head:
        return False
    from mfukit.comm.nccl_log import analyse_nccl_lines  # loaded only when a file may hold NCCL lines

    report = analyse_nccl_lines(head.splitlines())
    return report.nccl_lines > 0 or bool(report.timeouts)


def parse(path: Path) -> list[NcclLog]:
    from mfukit.comm.nccl_log import analyse_nccl_lines

    with open_text(path) as stream:
        report = analyse_nccl_lines(stream)
    if not report.nccl_lines and not report.timeouts:
        return []
    return [NcclLog(str(path), report)]


SOURCE = Source(
    kind="nccl_log",
    description="NCCL_DEBUG=INFO output, alone or interleaved in any log",
    detect=detect,
    parse=parse,
    embedded=True,
)
