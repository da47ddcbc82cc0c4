"""Run a diagnosis: find the artifacts, parse each with its source, run every rule family, rank, gate.

The entry point is :func:`diagnose`; it returns a :class:`Diagnosis` (data only, no printing). A file
that no source recognises, or whose parser fails, is reported as degraded input, never raised.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from mfukit.catalog.resolve import ResolvedNode
from mfukit.core.cluster import Cluster
from mfukit.core.findings import SEVERITY_RANK
from mfukit.core.model import ModelSpec
from mfukit.core.parallelism import Parallelism
from mfukit.core.results import ProgressCallback
from mfukit.core.scenario import FtSection, TrainingSection
from mfukit.diagnose import mfu as mfu_module
from mfukit.diagnose.breakdown import RankSummary, time_breakdown
from mfukit.diagnose.context import Context
from mfukit.diagnose.findings import Finding, Gate
from mfukit.diagnose.gates import gates as judge_gates
from mfukit.diagnose.job import Provenance, resolve_job
from mfukit.diagnose.network import NcclCheck
from mfukit.diagnose.parsing import collect, parse_files
from mfukit.diagnose.records import FAILED_STATES, RankTrace, Record, SlurmJob, TrainingLog, XidEvent
from mfukit.diagnose.rules import rules
from mfukit.diagnose.rules.hardware import catalog
from mfukit.diagnose.sources import sources
from mfukit.errors import InputError


@dataclass
class Diagnosis:
    inputs: list[dict[str, str]]
    findings: list[Finding]
    gates: list[Gate]
    mfu: mfu_module.MfuEstimate
    expected: mfu_module.Expected
    ranks: list[RankSummary]
    time_breakdown: dict[str, object]
    records: list[Record]
    nccl_checks: list[NcclCheck] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)
    provenance: list[Provenance] = field(default_factory=list)
    """Where each value of the job the diagnosis used came from (flag, log line, derived, default)."""
    job_warnings: list[str] = field(default_factory=list)
    """Defaults that move the answer (sequence length, layout, precision), and a layout that was unusable."""
    skipped: list[dict[str, str]] = field(default_factory=list)
    """Every file no source read, with the reason."""

    @property
    def top(self) -> Finding | None:
        """The costliest finding that is a cause (not a degraded-input note, not explained by another, not
        information only)."""
        return next(
            (
                f
                for f in self.findings
                if f.id != "degraded_input" and f.explained_by is None and f.severity != "info"
            ),
            None,
        )

    @property
    def has_errors(self) -> bool:
        return any(f.severity == "error" for f in self.findings)


def rank_findings(findings: list[Finding]) -> list[Finding]:
    """By cost (largest first), then severity, causes before notes on degraded input; a finding explained
    by another follows its root cause."""
    roots = sorted(
        (f for f in findings if f.explained_by is None),
        key=lambda f: (-f.cost, -SEVERITY_RANK[f.severity], f.id == "degraded_input", f.id),
    )
    ordered: list[Finding] = []
    for root in roots:
        ordered.append(root)
        ordered.extend(f for f in findings if f.explained_by == root.id and f not in ordered)
    ordered.extend(f for f in findings if f not in ordered)
    return ordered


def diagnose(
    paths: Iterable[Path],
    *,
    model: ModelSpec | None = None,
    training: TrainingSection | None = None,
    parallelism: Parallelism | None = None,
    cluster: Cluster | None = None,
    ft: FtSection | None = None,
    node: ResolvedNode | None = None,
    progress: ProgressCallback | None = None,
) -> Diagnosis:
    paths = list(paths)
    files = collect(paths)
    records: list[Record] = []
    inputs: list[dict[str, str]] = []
    skipped: list[dict[str, str]] = []
    for path, kind, parsed, error in parse_files(files, progress=progress):
        inputs.append({"file": str(path), "kind": kind})
        records.extend(parsed)
        if error is not None:
            skipped.append({"file": str(path), "reason": error})
    if not records:
        raise InputError(
            f"nothing to diagnose: none of the {len(files)} file(s) is an artifact mfukit reads ("
            + "; ".join(f"{s['file']}: {s['reason']}" for s in skipped[:20])
            + ("; ..." if len(skipped) > 20 else "")
            + ")",
            value=[str(p) for p in paths] if len(paths) > 1 else str(paths[0]),
            expected="files of these kinds: " + "; ".join(source.description for source in sources()),
            hint="point mfukit diagnose at the job's training log, profiler traces, NCCL_DEBUG=INFO log, "
            "nvidia-smi/DCGM telemetry or sacct output",
        )
    job = resolve_job(
        records,
        model=model,
        training=training,
        parallelism=parallelism,
        cluster=cluster,
        node=node,
    )
    model, training, parallelism, cluster = job.model, job.training, job.parallelism, job.cluster
    logs = [r for r in records if isinstance(r, TrainingLog)]
    estimate = mfu_module.measure(logs, model, training, cluster)
    ctx = Context(
        records=records,
        mfu=estimate,
        expected=mfu_module.expected_mfu(model, training, parallelism, cluster),
        model=model,
        training=training,
        parallelism=parallelism,
        cluster=cluster,
        ft=ft,
        unrecognised=[(entry["file"], entry["reason"]) for entry in skipped],
    )
    for rule in rules():
        ctx.findings.extend(rule(ctx))
    findings = rank_findings(ctx.findings)
    return Diagnosis(
        inputs=inputs,
        findings=findings,
        gates=judge_gates(ctx),
        mfu=estimate,
        expected=ctx.expected,
        ranks=ctx.ranks,
        time_breakdown=time_breakdown(ctx.ranks),
        records=records,
        nccl_checks=ctx.nccl_checks,
        assumptions=ctx.assumptions,
        provenance=job.provenance,
        job_warnings=job.warnings,
        skipped=skipped,
    )


def post_mortem(diagnosis: Diagnosis) -> dict[str, object]:
    """Root cause -> Impact (jobs lost, GPU-hours wasted) -> Fix -> Prevention, from the top finding."""
    top = diagnosis.top
    jobs = [r for r in diagnosis.records if isinstance(r, SlurmJob)]
    lost = [j for j in jobs if j.state in FAILED_STATES]
    fatal = [
        e
        for e in diagnosis.records
        if isinstance(e, XidEvent) and catalog().get(e.xid) is not None and catalog()[e.xid].fatal
    ]
    by_state: dict[str, int] = defaultdict(int)
    for job in lost:
        by_state[job.state] += 1
    if top is None:
        return {
            "root_cause": "no cause found in the artifacts given",
            "impact": {},
            "fix": [],
            "prevention": [],
        }
    return {
        "root_cause": f"{top.title}. {top.summary}",
        "impact": {
            "step_fraction": top.impact.step_fraction,
            "gpu_hours_wasted_per_day": top.impact.gpu_hours_per_day,
            "jobs_lost": len(lost) if jobs else None,
            "jobs_lost_by_state": dict(by_state),
            "fatal_xids": len(fatal),
            "mfu_now": diagnosis.mfu.measured,
            "mfu_after_fix": top.mfu_after_fix,
        },
        "fix": top.fix,
        "prevention": top.prevention,
    }


def traces_of(diagnosis: Diagnosis) -> list[RankTrace]:
    return [r for r in diagnosis.records if isinstance(r, RankTrace)]
