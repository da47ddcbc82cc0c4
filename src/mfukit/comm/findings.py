"""A finding: something a judge noticed, with a stable id the diagnosis engine can key rules on."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Severity = Literal["info", "warning", "error"]
SEVERITY_ORDER: dict[Severity, int] = {"info": 0, "warning": 1, "error": 2}


@dataclass(frozen=True)
class Finding:
    """``id`` is stable (``nccl_socket_fallback``, ``low_busbw``...); ``fix`` says what to change."""

    id: str
    severity: Severity
    title: str
    detail: str
    fix: str = ""
    evidence: list[str] = field(default_factory=list)


def worst(findings: list[Finding]) -> Severity | None:
    """The highest severity among ``findings`` (None when there are none)."""
    if not findings:
        return None
    return max((f.severity for f in findings), key=lambda s: SEVERITY_ORDER[s])
