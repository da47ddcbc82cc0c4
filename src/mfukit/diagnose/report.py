"""The diagnosis as tables (CLI), a JSON result and a self-contained HTML report."""

from __future__ import annotations

from typing import Any

from mfukit import units
from mfukit.core.results import Table, shown
from mfukit.diagnose.breakdown import ranked_traces
from mfukit.diagnose.charts import breakdown, step_series, timeline
from mfukit.diagnose.engine import Diagnosis, post_mortem, traces_of
from mfukit.diagnose.findings import Finding
from mfukit.diagnose.records import KernelTotal, NcclLog, TrainingLog
from mfukit.report.html import Chart, Report, Section

MAX_RANK_ROWS = 16


def _percent(value: float | None) -> str:
    return "—" if value is None else units.format_percent(value)


def finding_dict(finding: Finding) -> dict[str, Any]:
    return {
        "id": finding.id,
        "title": finding.title,
        "severity": finding.severity,
        "summary": finding.summary,
        "cost_fraction": finding.cost,
        "impact": finding.impact,
        "evidence": finding.evidence,
        "fix": finding.fix,
        "prevention": finding.prevention,
        "recoverable_fraction": finding.recoverable_fraction,
        "mfu_after_fix": finding.mfu_after_fix,
        "explained_by": finding.explained_by,
        "details": finding.details,
    }


def kernels(diagnosis: Diagnosis, limit: int = 15) -> list[dict[str, Any]]:
    """Top kernels by total time over all traced ranks, with their category and tensor-core use."""
    totals: dict[str, KernelTotal] = {}
    for trace in traces_of(diagnosis):
        for kernel in trace.kernel_totals:
            seen = totals.get(kernel.name)
            totals[kernel.name] = (
                kernel
                if seen is None
                else KernelTotal(
                    kernel.name,
                    seen.total_s + kernel.total_s,
                    seen.count + kernel.count,
                    kernel.category,
                    kernel.tensor_core,
                )
            )
    ordered = sorted(totals.values(), key=lambda k: -k.total_s)
    grand = sum(k.total_s for k in ordered if k.category == "compute") or 1.0
    return [
        {"name": k.name, "category": k.category, "total_s": k.total_s, "count": k.count, "tensor_core": k.tensor_core,
         "share_of_compute": k.total_s / grand if k.category == "compute" else None}
        for k in ordered[:limit]
    ]  # fmt: skip


def network(diagnosis: Diagnosis) -> dict[str, Any]:
    """Each nccl-tests run against the model, and what each NCCL log says about the transport."""
    runs = []
    for check in diagnosis.nccl_checks:
        run, report = check.result.run, check.report
        runs.append(
            {
                "file": check.result.file,
                "collective": report.collective if report else run.collective if run else None,
                "num_ranks": report.num_ranks if report else run.num_ranks if run else None,
                "num_nodes": report.num_nodes if report else None,
                "peak_busbw_bytes_per_s": run.peak_busbw_bytes_per_s if run else None,
                "expected_peak_busbw_bytes_per_s": report.expected_peak_busbw_bytes_per_s if report else None,
                "peak_ratio": report.peak_ratio if report else None,
                "verdict": report.verdict if report else None,
                "not_judged": check.problem,
            }
        )
    logs = [
        {
            "file": log.file,
            "nccl_versions": log.report.versions,
            "networks": log.report.networks,
            "hosts": log.report.hosts,
            "hcas": log.report.hcas,
            "transports": log.report.transports,
            "gpudirect_rdma": log.report.gdr,
        }
        for log in diagnosis.records
        if isinstance(log, NcclLog)
    ]
    return {"nccl_tests": runs, "nccl_logs": logs}


def result(diagnosis: Diagnosis) -> dict[str, Any]:
    mfu = diagnosis.mfu
    top = diagnosis.top
    compute = [k for trace in traces_of(diagnosis) for k in trace.kernel_totals if k.category == "compute"]
    tensor = sum(k.total_s for k in compute if k.tensor_core)
    return {
        "findings": [finding_dict(f) for f in diagnosis.findings],
        "gates": diagnosis.gates,
        "mfu": {
            "measured": mfu.measured,
            "steady_state": mfu.steady_state,
            "method": mfu.method,
            "source": mfu.source,
            "tokens_per_s_per_gpu": mfu.tokens_per_s_per_gpu,
            "expected": diagnosis.expected.value,
            "expected_source": diagnosis.expected.source,
            "expected_basis": diagnosis.expected.basis,
            "expected_interval": list(diagnosis.expected.interval) if diagnosis.expected.interval else None,
            "after_top_fix": top.mfu_after_fix if top else None,
        },
        "job": [p.as_dict() for p in diagnosis.provenance],
        "skipped": diagnosis.skipped,
        "time_breakdown": diagnosis.time_breakdown,
        "post_mortem": post_mortem(diagnosis),
        "kernels": kernels(diagnosis),
        "network": network(diagnosis),
        "tensor_core_share_of_compute": tensor / sum(k.total_s for k in compute) if compute else None,
        "inputs": diagnosis.inputs,
    }


def findings_table(diagnosis: Diagnosis) -> Table:
    table = Table(
        "Findings, ranked by what they cost",
        ["#", "severity", "id", "finding", "cost", "GPU-h/day", "MFU after fix"],
        csv_columns=[
            "rank",
            "severity",
            "id",
            "title",
            "cost_fraction",
            "gpu_hours_per_day",
            "mfu_after_fix",
        ],
    )
    for index, finding in enumerate(diagnosis.findings, start=1):
        table.add(
            index,
            finding.severity,
            finding.id,
            finding.title,
            shown(finding.impact.step_fraction, units.format_percent),
            shown(finding.impact.gpu_hours_per_day, lambda h: f"{h:,.0f}"),
            shown(finding.mfu_after_fix, units.format_percent),
        )
    return table


def job_table(diagnosis: Diagnosis) -> Table | None:
    """Each value of the job the diagnosis used, and where it came from (flag, log line, derived, default)."""
    if not diagnosis.provenance:
        return None
    table = Table("The job, and where each value came from", ["value", "is", "from", "where"])
    for item in diagnosis.provenance:
        table.add(item.name, str(item.value), item.origin, item.where)
    return table


def skipped_table(diagnosis: Diagnosis) -> Table | None:
    if not diagnosis.skipped:
        return None
    table = Table("Files skipped", ["file", "reason"])
    for entry in diagnosis.skipped:
        table.add(entry["file"], entry["reason"])
    return table


def gates_tables(diagnosis: Diagnosis) -> list[Table]:
    """The verdicts, then what each rests on (a table of its own: the basis is a sentence or two, which a
    fifth column of a terminal-wide table would squeeze to a word per line)."""
    verdicts = Table("MFU-first gates", ["gate", "status", "value", "target"])
    bases = Table("What each gate rests on", ["gate", "basis"])
    for gate in diagnosis.gates:
        basis = gate.why if gate.status != "unknown" else f"{gate.why}; {gate.decided_by} would decide it"
        verdicts.add(gate.name, gate.status.upper(), gate.value_text, gate.target_text)
        bases.add(gate.name, basis)
    return [verdicts, bases]


def breakdown_table(diagnosis: Diagnosis) -> Table | None:
    ranks = diagnosis.ranks
    if not ranks:
        return None
    table = Table(
        "Time breakdown per rank (share of traced step time)",
        ["rank", "step", "compute", "exposed comm", "exposed memcpy", "idle", "host wait", "kernel wait"],
        csv_columns=["rank", "step_time_s", "compute_fraction", "comm_exposed_fraction", "memcpy_exposed_fraction",
                     "idle_fraction", "host_wait_fraction", "kernel_wait_fraction"],
    )  # fmt: skip
    chosen = (
        ranks
        if len(ranks) <= MAX_RANK_ROWS
        else sorted(ranks, key=lambda r: -r.fractions["idle"])[:MAX_RANK_ROWS]
    )
    for r in sorted(chosen, key=lambda r: r.rank):
        f = r.fractions
        table.add(
            r.rank,
            shown(r.step_s, units.format_duration),
            *(
                shown(f[key], units.format_percent)
                for key in ("compute", "comm_exposed", "memcpy_exposed", "idle", "host_wait", "kernel_wait")
            ),
        )
    if len(ranks) > MAX_RANK_ROWS:
        table.caption = f"the {MAX_RANK_ROWS} ranks with the most idle time of {len(ranks)}"
    return table


def notes(diagnosis: Diagnosis) -> list[str]:
    mfu = diagnosis.mfu
    lines = []
    if mfu.measured is not None:
        lines.append(
            f"MFU {units.format_percent(mfu.measured)} measured ({mfu.method}); steady state "
            f"{_percent(mfu.steady_state)}; expected {_percent(diagnosis.expected.value)}"
            + (
                f" (interval {_percent(diagnosis.expected.interval[0])}-{_percent(diagnosis.expected.interval[1])})"
                if diagnosis.expected.interval
                else ""
            )
            + f" ({_basis(diagnosis)})"
        )
    else:
        lines.append(f"MFU: {mfu.method}")
    report = post_mortem(diagnosis)
    top = diagnosis.top
    if top is not None:
        impact = report["impact"] if isinstance(report["impact"], dict) else {}
        hours = top.impact.gpu_hours_per_day
        lines.append("Post-mortem")
        lines.append(f"  Root cause: {report['root_cause']}")
        lines.append(
            f"  Impact: {_percent(top.impact.step_fraction)} of step time"
            + (f", {hours:,.0f} GPU-hours/day" if isinstance(hours, float) else "")
            + (f", {impact['jobs_lost']} job(s) lost" if impact.get("jobs_lost") is not None else "")
            + (
                f"; MFU {_percent(diagnosis.mfu.measured)} -> {_percent(top.mfu_after_fix)} after the fix"
                if top.mfu_after_fix
                else ""
            )
        )
        lines.append("  Fix:")
        lines.extend(f"    - {step}" for step in top.fix)
        lines.append("  Prevention:")
        lines.extend(f"    - {step}" for step in top.prevention)
        lines.append("  Evidence:")
        lines.extend(f"    - {e.file}: {e.what}" for e in top.evidence[:5])
    return lines


def _basis(diagnosis: Diagnosis) -> str:
    return {
        "performance_model": "the performance model's prediction for this layout",
        "best_fitting_layout": "the performance model's best layout that fits; the job's own does not",
        "typical_mfu": "typical for this GPU",
        None: "unknown",
    }[diagnosis.expected.basis]


def html_report(diagnosis: Diagnosis, warnings: list[str]) -> Report:
    traces = ranked_traces(traces_of(diagnosis))
    logs = [r for r in diagnosis.records if isinstance(r, TrainingLog)]
    summary = [
        ("MFU measured", _percent(diagnosis.mfu.measured)),
        (f"MFU expected ({_basis(diagnosis)})", _percent(diagnosis.expected.value)),
    ]
    top = diagnosis.top
    if top is not None:
        summary += [("Top cause", top.id), ("MFU after its fix", _percent(top.mfu_after_fix))]
    sections = [
        Section(
            "Findings", [f"{f.id}: {f.summary}" for f in diagnosis.findings[:8]], [findings_table(diagnosis)]
        ),
        Section("MFU-first gates", [], gates_tables(diagnosis)),
        Section(
            "The job",
            diagnosis.job_warnings,
            [t for t in (job_table(diagnosis), skipped_table(diagnosis)) if t is not None],
        ),
        Section("Post-mortem", notes(diagnosis)[1:]),
    ]
    charts = []
    if traces:
        charts.append(Chart("timeline.png", timeline(traces), "per-rank timeline of the median traced step"))
    if diagnosis.ranks:
        charts.append(Chart("breakdown.png", breakdown(diagnosis.ranks), "time breakdown per rank"))
    series = step_series(logs, traces)
    if series is not None:
        charts.append(Chart("step_times.png", series, "step-time series"))
    table = breakdown_table(diagnosis)
    sections.insert(1, Section("Where the time goes", [], [table] if table else [], charts))
    return Report("mfukit diagnose", summary, sections, diagnosis.assumptions, warnings)
