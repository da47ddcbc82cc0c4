"""Slurm accounting: ``sacct -P`` (pipe-separated, with header) or the default fixed-width table.

Rows of job steps (``123.batch``, ``123.0``) are skipped; the allocation row carries ``AllocTRES``
(``gres/gpu=24``) and the times. Times are ISO (``2026-11-29T16:15:04``); ``Unknown``/``None`` -> None.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

from mfukit.diagnose.records import SlurmJob
from mfukit.diagnose.sources import Source
from mfukit.diagnose.sources.jsonstream import open_text

_GPUS = re.compile(r"gres/gpu(?::[\w-]+)?=(\d+)")
_NODES = re.compile(r"node=(\d+)")


def detect(path: Path, head: str) -> bool:
    first = head.lstrip().split("\n", 1)[0]
    return first.startswith("JobID") and "State" in first


def _time(text: str) -> float | None:
    try:
        return datetime.strptime(text.strip(), "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


def parse(path: Path) -> list[SlurmJob]:
    with open_text(path) as stream:
        lines = [line.rstrip("\n") for line in stream if line.strip()]
    if not lines:
        return []
    pipe = "|" in lines[0]
    header = [h.strip().lower() for h in (lines[0].split("|") if pipe else lines[0].split())]
    jobs: list[SlurmJob] = []
    for line in lines[1:]:
        if set(line.strip()) <= {"-", " "}:
            continue
        cells = line.split("|") if pipe else line.split()
        if len(cells) < len(header):
            continue
        row = dict(zip(header, (c.strip() for c in cells), strict=False))
        job_id = row.get("jobid", "")
        if not job_id or "." in job_id:
            continue
        tres = row.get("alloctres", "")
        gpus = _GPUS.search(tres)
        nodes = row.get("nnodes") or (_NODES.search(tres).group(1) if _NODES.search(tres) else "")  # type: ignore[union-attr]
        jobs.append(
            SlurmJob(
                file=str(path),
                job_id=job_id,
                name=row.get("jobname", ""),
                state=row.get("state", "").split()[0].upper() if row.get("state") else "",
                submit_s=_time(row.get("submit", "")),
                eligible_s=_time(row.get("eligible", "")),
                start_s=_time(row.get("start", "")),
                end_s=_time(row.get("end", "")),
                num_gpus=int(gpus.group(1)) if gpus else None,
                num_nodes=int(nodes) if nodes.isdigit() else None,
                nodes=row.get("nodelist", ""),
            )
        )
    return jobs


SOURCE = Source(
    kind="sacct",
    description="Slurm sacct output (-P pipe-separated, or the default table)",
    detect=detect,
    parse=parse,
)
