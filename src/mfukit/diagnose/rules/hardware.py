"""``xid_error``, ``ecc_error`` and ``dcgm_diag_failure``: hardware faults, mapped to an action.

XIDs come from kernel logs and are looked up in the sourced catalogue (``data/xid_catalog.toml``).
Per node the first XID that is not a consequence of another (43 and 45 are) is the cause (NVIDIA XID
catalog triage rules). ECC state comes from telemetry: volatile uncorrectable errors, pending row
remaps or retired pages, remap failures.
"""

from __future__ import annotations

import tomllib
from collections import defaultdict
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from mfukit.diagnose.context import Context
from mfukit.diagnose.findings import Evidence, Finding, Impact
from mfukit.diagnose.records import DiagResult, GpuSeries, XidEvent
from mfukit.diagnose.sources.telemetry import drain_step, gpu_label

CATALOG = Path(__file__).parents[1] / "data" / "xid_catalog.toml"


@dataclass(frozen=True)
class XidInfo:
    code: int
    mnemonic: str
    meaning: str
    nvidia_action: str
    fatal: bool
    cluster_action: str
    sympathetic: bool = False
    ecc: bool = False


@cache
def catalog() -> dict[int, XidInfo]:
    data = tomllib.loads(CATALOG.read_text(encoding="utf-8"))
    return {entry["code"]: XidInfo(**entry) for entry in data["xid"]}


def catalog_source() -> str:
    data = tomllib.loads(CATALOG.read_text(encoding="utf-8"))
    return f"{data['source']['what']} ({data['source']['url']})"


def _no_cost(basis: str) -> Impact:
    return Impact(step_fraction=None, gpu_hours_per_day=None, basis=basis)


def _xids(ctx: Context) -> list[Finding]:
    events = ctx.of(XidEvent)
    if not events:
        return []
    known = catalog()
    by_gpu: dict[tuple[str | None, str | None, int], list[XidEvent]] = defaultdict(list)
    for event in events:
        by_gpu[(event.host, event.pci, event.xid)].append(event)
    root_by_host: dict[str | None, XidEvent] = {}
    for event in sorted(events, key=lambda e: (e.host or "", e.wall_s or 0.0, e.line)):
        info = known.get(event.xid)
        if event.host not in root_by_host and not (info and info.sympathetic):
            root_by_host[event.host] = event
    findings = []
    for (host, pci, code), group in sorted(by_gpu.items(), key=lambda item: (item[0][0] or "", item[0][2])):
        info = known.get(code)
        group[0]
        root = root_by_host.get(host)
        secondary = info is not None and info.sympathetic and root is not None and root.xid != code
        if info is None:
            severity, title = "warning", f"XID {code} on {host} ({pci}): not in the catalogue"
            action = [
                f"look XID {code} up in NVIDIA's XID catalog (https://docs.nvidia.com/deploy/xid-errors/); run dcgmi diag -r 3 on {host}"
            ]
        else:
            severity = "error" if info.fatal and not secondary else "warning" if not secondary else "info"
            title = f"XID {code} {info.mnemonic} on {host or 'a node the log does not name'} ({pci}) x{len(group)}"
            action = [info.cluster_action, f"NVIDIA immediate action: {info.nvidia_action}"]
            if info.fatal:
                action.insert(0, drain_step([host] if host else [], f"'XID {code}'", [(None, group[0].file)]))
        findings.append(
            Finding(
                id="ecc_error" if info is not None and info.ecc and info.fatal else "xid_error",
                title=title,
                severity=severity,  # type: ignore[arg-type]
                summary=(
                    f"{info.meaning if info else 'unknown XID'}"
                    + (f"; a consequence of XID {root.xid} on the same node" if secondary and root else "")
                ),
                evidence=[
                    Evidence(e.file, e.text, time_s=e.wall_s, gpu=f"{e.host} {e.pci}") for e in group[:5]
                ],
                impact=_no_cost("a job interruption and a node out of service; not a share of step time"),
                fix=action,
                prevention=[
                    "export XIDs (dcgm-exporter DCGM_EXP_XID_ERRORS_COUNT or a kernel-log collector) and drain on fatal ones automatically",
                    "track XIDs per GPU across jobs: hardware XIDs that recur after a reset mean replacement",
                ],
                details={"xid": code, "count": len(group), "catalogue": catalog_source() if info else None},
            )
        )
    return findings


def _ecc(ctx: Context) -> list[Finding]:
    findings = []
    for series in ctx.of(GpuSeries):
        latest = series.samples[-1] if series.samples else None
        if latest is None:
            continue
        problems = []
        if latest.remap_failure:
            problems.append(
                (
                    "error",
                    "row remapping failed",
                    "RMA the GPU (remapping failure: the memory cannot be repaired)",
                )
            )
        if latest.ecc_uncorrected:
            problems.append(
                (
                    "error",
                    f"{latest.ecc_uncorrected:.0f} volatile uncorrectable ECC errors",
                    "drain and reset the GPU (nvidia-smi -r); RMA if they recur",
                )
            )
        if latest.remap_pending or latest.retired_pending:
            problems.append(
                (
                    "warning",
                    "row remap / page retirement pending",
                    "reset the GPU at the next drain to activate the remap (nvidia-smi -r -i <gpu>)",
                )
            )
        if not problems:
            continue
        severity = "error" if any(p[0] == "error" for p in problems) else "warning"
        findings.append(
            Finding(
                id="ecc_error",
                title=f"ECC: {', '.join(p[1] for p in problems)} on "
                + gpu_label(series.host, series.gpu, series.uuid, series.file),
                severity=severity,  # type: ignore[arg-type]
                summary="; ".join(p[1] for p in problems),
                evidence=[
                    Evidence(
                        series.file, p[1], gpu=gpu_label(series.host, series.gpu, series.uuid, series.file)
                    )
                    for p in problems
                ],
                impact=_no_cost(
                    "risk of a job crash (XID 48/94/95) and of silent data corruption; not a share of step time"
                ),
                fix=[
                    drain_step([series.host] if series.host else [], "ecc", [(series.uuid, series.file)]),
                    *(p[2] for p in problems),
                ],
                prevention=[
                    "alert on DCGM_FI_DEV_ECC_DBE_VOL_TOTAL > 0, DCGM_FI_DEV_ROW_REMAP_PENDING and DCGM_FI_DEV_ROW_REMAP_FAILURE"
                ],
            )
        )
    return findings


def _diag(ctx: Context) -> list[Finding]:
    failed = [r for r in ctx.of(DiagResult) if r.status in ("fail", "warn")]
    if not failed:
        return []
    severity = "error" if any(r.status == "fail" for r in failed) else "warning"
    return [
        Finding(
            id="dcgm_diag_failure",
            title=f"dcgmi diag: {len(failed)} failed or warned test result(s)",
            severity=severity,  # type: ignore[arg-type]
            summary="; ".join(f"{r.test}: {r.message}" for r in failed[:4]),
            evidence=[Evidence(r.file, f"{r.test}: {r.message}", gpu=r.gpu) for r in failed[:10]],
            impact=_no_cost("a node that fails diagnostics slows or crashes any job placed on it"),
            fix=["drain the node and repeat dcgmi diag -r 3; replace the GPU if the failure repeats"],
            prevention=[
                "run dcgmi diag -r 1 in the Slurm prolog and -r 2 in the epilog (NVIDIA DCGM docs: L1 readiness, L2 after failures)"
            ],
        )
    ]


def analyze(ctx: Context) -> list[Finding]:
    return _xids(ctx) + _ecc(ctx) + _diag(ctx)
