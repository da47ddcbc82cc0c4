"""What a diagnosis says: findings (root cause, evidence, impact, fix, prevention) and gates.

Every finding has a stable ``id`` (``dataloader_stall``, ``exposed_communication``, ...), a severity,
the evidence that supports it (file, rank, step, time), its impact as a fraction of step time and
GPU-hours per day, the fix (settings and commands), how to prevent it, and the MFU to expect once
it is fixed. Findings rank by what they cost.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from mfukit.core import findings as judged
from mfukit.core.findings import SEVERITY_RANK, Severity

GateStatus = Literal["pass", "fail", "unknown"]

# A cause that costs this share of step time or more is an error (it alone keeps MFU far below
# what the hardware gives); from WARNING_STEP_FRACTION it is worth fixing; below, informational.
ERROR_STEP_FRACTION = 0.15
WARNING_STEP_FRACTION = 0.03


@dataclass(frozen=True)
class Evidence:
    """One observation behind a finding: where it was seen and what was measured."""

    file: str
    what: str
    rank: int | None = None
    step: int | None = None
    time_s: float | None = None
    gpu: str | None = None


@dataclass(frozen=True)
class Impact:
    """What a cause costs: a share of step time and, with the GPU count, GPU-hours per day."""

    step_fraction: float | None
    gpu_hours_per_day: float | None = None
    basis: str = ""


@dataclass
class Finding:
    id: str
    title: str
    severity: Severity
    summary: str
    evidence: list[Evidence]
    impact: Impact
    fix: list[str]
    prevention: list[str]
    recoverable_fraction: float | None = None
    """Share of today's step time the fix removes (drives the MFU expected after the fix)."""
    mfu_after_fix: float | None = None
    explained_by: str | None = None
    """Id of another finding that is the root cause of this one (a straggler explained by throttling)."""
    details: dict[str, object] = field(default_factory=dict)

    @property
    def cost(self) -> float:
        """Share of step time this costs; a cost that cannot be quantified counts as its severity's threshold."""
        if self.impact.step_fraction is not None:
            return self.impact.step_fraction
        return {"error": ERROR_STEP_FRACTION, "warning": WARNING_STEP_FRACTION, "info": 0.0}[self.severity]


def from_judge(
    note: judged.Finding,
    *,
    file: str,
    impact: Impact,
    prevention: list[str],
    more_fix: tuple[str, ...] = (),
) -> Finding:
    """A judge's finding (``comm``'s nccl-tests and NCCL-log judges) as a diagnosis finding: its id, title,
    detail and fix as the judge wrote them, its evidence tied to ``file``, plus what diagnosis adds."""
    evidence = [Evidence(file, what) for what in note.evidence] or [Evidence(file, note.detail)]
    return Finding(
        id=note.id,
        title=note.title[:1].upper() + note.title[1:],
        severity=note.severity,
        summary=note.detail,
        evidence=evidence,
        impact=impact,
        fix=[note.fix, *more_fix] if note.fix else list(more_fix),
        prevention=prevention,
    )


def worse(a: Severity, b: Severity) -> Severity:
    return a if SEVERITY_RANK[a] >= SEVERITY_RANK[b] else b


def severity_for(step_fraction: float) -> Severity:
    """Severity of a cause that costs ``step_fraction`` of every step."""
    if step_fraction >= ERROR_STEP_FRACTION:
        return "error"
    if step_fraction >= WARNING_STEP_FRACTION:
        return "warning"
    return "info"


@dataclass(frozen=True, kw_only=True)
class Gate:
    """One MFU-first gate: pass / fail / unknown, the measured value against its target."""

    id: str
    name: str
    status: GateStatus
    value: float | None
    value_text: str
    target_text: str
    why: str
    decided_by: str = ""
    """For ``unknown``: the artifact that would decide it."""

    @classmethod
    def unknown(cls, *, id: str, name: str, target_text: str, why: str, decided_by: str) -> Gate:
        """A gate the inputs cannot decide: why, and what would decide it."""
        return cls(
            id=id,
            name=name,
            status="unknown",
            value=None,
            value_text="—",
            target_text=target_text,
            why=why,
            decided_by=decided_by,
        )
