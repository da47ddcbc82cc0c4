"""A finding: something a judge noticed (the nccl-tests and NCCL-log judges of ``comm``, the fabric check,
the diagnosis rules), with a stable id, a severity, what was seen and the fix.

``mfukit diagnose`` turns these into its costed findings (impact, prevention, MFU after the fix) without
rewriting their texts: see ``diagnose.findings.from_judge``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Severity = Literal["info", "warning", "error"]
SEVERITY_RANK: dict[Severity, int] = {"info": 0, "warning": 1, "error": 2}


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
    return max((f.severity for f in findings), key=lambda s: SEVERITY_RANK[s])
