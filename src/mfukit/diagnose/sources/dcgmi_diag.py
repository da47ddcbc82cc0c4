"""``dcgmi diag -r 1..4`` output: the +---+ table, or its ``-j`` JSON.

Rows read ``| Memory Bandwidth | Pass |``, ``| Diagnostic | Fail - GPU: 0 |`` and continuation rows with
the reason (``| Warning | GPU 0 Thermal violations totaling 13.3 seconds ...``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Literal, cast

from mfukit.diagnose.records import DiagResult
from mfukit.diagnose.sources import Source
from mfukit.diagnose.sources.jsonstream import open_text

Status = Literal["pass", "fail", "warn", "skip"]
_STATUS = re.compile(r"^(Pass|Fail|Warn(?:ing)?|Skip)\b", re.IGNORECASE)
_GPU = re.compile(r"GPU[:\s]+(\d+)")


def detect(path: Path, head: str) -> bool:
    if "DCGM GPU Diagnostic" in head:
        return True
    return (
        "Diagnostic" in head
        and "+---" in head
        and ("Deployment" in head or "Hardware" in head or "Stress" in head)
    )


def _row(line: str) -> tuple[str, str] | None:
    r"""``| name | cell |`` -> (name, cell), by string operations (linear; a regex of lazy groups
    before ``\s*\|\s*$`` was quadratic on a long line); None for any other line."""
    text = line.strip()
    if len(text) < 2 or text[0] != "|" or text[-1] != "|":
        return None
    name, bar, cell = text[1:-1].partition("|")
    return (name.strip(), cell.strip()) if bar else None


def _status(text: str) -> Status | None:
    match = _STATUS.match(text)
    if match is None:
        return None
    word = match.group(1).lower()
    return cast(Status, "warn" if word.startswith("warn") else word)


def parse(path: Path) -> list[DiagResult]:
    with open_text(path) as stream:
        text = stream.read()
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            return _parse_json(path, json.loads(stripped))
        except json.JSONDecodeError:
            pass
    results: list[DiagResult] = []
    last_test = ""
    for line in text.splitlines():
        row = _row(line)
        if row is None:
            continue
        name, cell = row
        status = _status(cell)
        if status is not None and name:
            last_test = name
            gpu = _GPU.search(cell)
            results.append(DiagResult(str(path), name, status, gpu.group(1) if gpu else None, cell))
        elif not name and cell and last_test and results:
            # a continuation row: the reason behind the previous result
            previous = results[-1]
            gpu = _GPU.search(cell)
            results.append(
                DiagResult(str(path), last_test, previous.status, gpu.group(1) if gpu else previous.gpu, cell)
            )
        elif name.lower().startswith(("warning", "error")) and cell:
            gpu = _GPU.search(cell)
            results.append(
                DiagResult(str(path), last_test or name, "warn" if name.lower().startswith("warn") else "fail",
                           gpu.group(1) if gpu else None, cell)
            )  # fmt: skip
    return results


def _parse_json(path: Path, data: Any) -> list[DiagResult]:
    results: list[DiagResult] = []
    diagnostic = data.get("DCGM GPU Diagnostic", {}) if isinstance(data, dict) else {}
    for category in diagnostic.get("test_categories", []) if isinstance(diagnostic, dict) else []:
        for test in category.get("tests", []) if isinstance(category, dict) else []:
            for result in test.get("results", []) if isinstance(test, dict) else []:
                status = _status(str(result.get("status", "")))
                if status is None:
                    continue
                info = result.get("info") or result.get("warnings") or ""
                message = json.dumps(info) if not isinstance(info, str) else info
                gpu = result.get("gpu_id", result.get("gpu_ids"))
                results.append(
                    DiagResult(
                        str(path),
                        str(test.get("name")),
                        status,
                        str(gpu) if gpu is not None else None,
                        message,
                    )
                )
    return results


SOURCE = Source(
    kind="dcgmi_diag",
    description="dcgmi diag output (table or -j JSON)",
    detect=detect,
    parse=parse,
)
