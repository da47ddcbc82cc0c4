"""Network transport and bandwidth: what NCCL_DEBUG=INFO lines and nccl-tests runs say, judged by ``comm``.

Each NCCL log is judged again with the job's cluster (its NICs per node are the rails every host should
use; its node count says the job spans nodes when a log shows one host), each nccl-tests run with comm's
collective model on the cluster's topology (``comm.check.check_run``). Their findings keep comm's ids,
titles, details and fixes (``nccl_socket_fallback``, ``nccl_missing_rails``, ``nccl_no_gdr``, ``low_busbw``,
``nccl_watchdog_timeout``...); one finding per id, with the evidence of every file that shows it.

Cost: a fault that cuts bandwidth (``network.BANDWIDTH_CAUSES``) shows in the traces as exposed
communication. The most fundamental one found takes that cost, less straggler wait and less what the
communication would still expose at the bandwidth the model expects; the others are explained by it, and
so is ``exposed_communication``. Without traces the cost comes from the gradient traffic of one step at
the measured busbw against the model's, over the logged step time.
"""

from __future__ import annotations

from collections import defaultdict

from mfukit import units
from mfukit.comm.nccl_log import rejudge
from mfukit.core import findings as judged
from mfukit.diagnose.breakdown import job_fraction, median
from mfukit.diagnose.context import Context
from mfukit.diagnose.findings import Evidence, Finding, Impact, from_judge, severity_for, worse
from mfukit.diagnose.network import (
    BANDWIDTH_CAUSES,
    EXPLAINED_BY,
    Bandwidth,
    expected_busbw,
    measured_busbw,
    socket_price,
)
from mfukit.diagnose.records import NcclLog, RankTrace, TrainingLog
from mfukit.diagnose.rules.communication import CHECK_TRANSPORT, MEASURE_FABRIC, exposed_share
from mfukit.diagnose.rules.inputs import degraded

MAX_EVIDENCE = 8
PREVENTION: dict[str, list[str]] = {
    "transport": [
        "run nccl-tests all_reduce_perf across two nodes in every node's acceptance test and before each job "
        "(Slurm prolog); fail it below 80 % of the expected busbw",
        "keep NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET for the first minutes of every job and alert on "
        "'NET/Socket', on fewer 'NET/IB : Using' devices than rails and on a missing 'GDRDMA'",
        "pin NCCL_IB_HCA and NCCL_SOCKET_IFNAME in the job template (container images do not carry them)",
    ],
    "errors": [
        "export NCCL WARN lines and watchdog timeouts to the cluster's log pipeline and alert on them",
        "set TORCH_NCCL_ASYNC_ERROR_HANDLING=1 and a collective timeout so a hang becomes a restart",
    ],
    "config": ["keep NCCL_* settings in one reviewed job template; print `env | grep NCCL` at job start"],
}
KIND_OF: dict[str, str] = {
    **dict.fromkeys(BANDWIDTH_CAUSES, "transport"),
    **dict.fromkeys(("nccl_warnings", "nccl_watchdog_timeout", "nccl_init_incomplete"), "errors"),
}


def _judged(ctx: Context) -> list[tuple[str, judged.Finding]]:
    """(file, comm finding) for every NCCL log and every nccl-tests run; runs that cannot be judged are
    turned into degraded-input findings by :func:`analyze`."""
    cluster = ctx.cluster
    found: list[tuple[str, judged.Finding]] = []
    for log in ctx.of(NcclLog):
        report = rejudge(
            log.report,
            expected_nics_per_node=cluster.system.nics_per_node if cluster else None,
            num_nodes=cluster.num_nodes if cluster else None,
        )
        found.extend((log.file, note) for note in report.findings)
    for check in ctx.nccl_checks:
        if check.report is not None:
            found.extend((check.result.file, note) for note in check.report.findings)
    return found


def _merge(ctx: Context, notes: list[tuple[str, judged.Finding]]) -> list[Finding]:
    """One diagnosis finding per id: the first file's texts, every file's evidence, the worst severity."""
    by_id: dict[str, list[tuple[str, judged.Finding]]] = defaultdict(list)
    for file, note in notes:
        by_id[note.id].append((file, note))
    merged = []
    for finding_id, group in by_id.items():
        file, first = group[0]
        finding = from_judge(
            first,
            file=file,
            impact=Impact(None, basis="not costed: its cost is the communication it slows or stops"),
            prevention=PREVENTION[KIND_OF.get(finding_id, "config")],
            more_fix=(CHECK_TRANSPORT, MEASURE_FABRIC) if finding_id in BANDWIDTH_CAUSES else (),
        )
        for other_file, note in group[1:]:
            finding.severity = worse(finding.severity, note.severity)
            finding.evidence.extend(Evidence(other_file, what) for what in note.evidence or [note.detail])
        files = len({f for f, _ in group})
        if files > 1:
            finding.summary += f" (seen in {files} files)"
        finding.evidence = finding.evidence[:MAX_EVIDENCE]
        finding.details["files"] = sorted({f for f, _ in group})
        merged.append(finding)
    return merged


def _socket_interfaces(ctx: Context) -> int:
    """How many socket interfaces NCCL used per node (``NET/Socket : Using [0]eth0 [1]eth1``), at least 1."""
    found = [len(log.report.socket_interfaces) for log in ctx.of(NcclLog) if log.report.socket_interfaces]
    return max(found) if found else 1


def _socket_busbw(ctx: Context) -> tuple[float, str] | None:
    """An nccl-tests run over sockets across nodes (its file also says NET/Socket): its peak busbw."""
    socket_files = {log.file for log in ctx.of(NcclLog) if "Socket" in log.report.networks}
    for check in ctx.nccl_checks:
        run = check.result.run
        if run is not None and check.result.file in socket_files and len(run.hosts) > 1:
            return run.peak_busbw_bytes_per_s, f"nccl-tests over sockets in {check.result.file}"
    return None


def _timer_evidence(ctx: Context, root: Finding) -> None:
    """Megatron's gradient-sync timers (max across ranks, per iteration): the time the sync takes today."""
    for log in ctx.of(TrainingLog):
        for name in ("all-grads-sync", "grads-all-reduce", "grads-reduce-scatter"):
            values = log.timers_ms.get(name)
            if values:
                root.evidence.insert(
                    0,
                    Evidence(log.file, f"Megatron timer {name}: {median(values) / 1e3:.2f} s per iteration (median of "
                             f"{len(values)} reports, max across ranks)"),
                )  # fmt: skip
                root.details[f"timer_{name.replace('-', '_')}_s"] = median(values) / 1e3
                return


def _price_socket(ctx: Context, root: Finding) -> bool:
    """The socket fallback priced by the performance model of the job's layout, sockets against the
    node's fabric (see :func:`diagnose.network.socket_price`). False when it cannot be."""
    step = ctx.step_now_s
    if step is None or ctx.parallelism is None:
        return False
    measured = _socket_busbw(ctx)
    price = socket_price(
        ctx.model, ctx.training, ctx.parallelism, ctx.cluster, interfaces=_socket_interfaces(ctx),
        measured_bytes_per_s=measured[0] if measured else None, measured_source=measured[1] if measured else "",
    )  # fmt: skip
    if price is None:
        return False
    added, basis = (
        price.added_s,
        (
            f"the performance model's step on sockets minus on the node's fabric ({price.added_s:.2f} s) over "
            f"today's step ({step:.2f} s)"
        ),
    )
    timed = next(
        (v for k, v in root.details.items() if k.startswith("timer_") and isinstance(v, float)), None
    )
    if timed is not None:  # the log measured the gradient sync: it stands for the model's DP part
        fabric_dp = (ctx.expected.breakdown_s or {}).get("dp_comm", 0.0)
        others = sum(v for k, v in price.parts_s.items() if k != "dp_comm")
        added = max(0.0, timed - fabric_dp) + others
        basis = (
            f"the gradient sync the log's timer measured ({timed:.2f} s) less the {fabric_dp:.2f} s the model "
            f"leaves exposed on the node's fabric, plus the model's growth of the other traffic over sockets "
            f"({others:.2f} s), over today's step ({step:.2f} s); the model alone, at "
            f"{units.format_rate(price.socket_bytes_per_s_per_node)} per node over sockets, predicts "
            f"{price.added_s:.2f} s: the measured sync follows the measured data"
        )
    recoverable = min(0.99, added / step)
    parts = ", ".join(
        f"{name} +{seconds:.2f} s" for name, seconds in sorted(price.parts_s.items(), key=lambda p: -p[1])
    )
    root.evidence.append(Evidence("performance model", f"{price.basis}; {parts or 'no part grows'}"))
    root.details.update(
        fabric_step_s=price.fabric_step_s, socket_step_s=price.socket_step_s,
        socket_bytes_per_s_per_node=price.socket_bytes_per_s_per_node, added_s_by_part=price.parts_s,
    )  # fmt: skip
    root.impact = ctx.impact(recoverable, basis)
    root.recoverable_fraction = recoverable
    root.mfu_after_fix = ctx.mfu_after(recoverable)
    root.severity = worse(root.severity, severity_for(recoverable))
    return True


def _cost(ctx: Context, root: Finding) -> None:
    """Give the root bandwidth fault the communication time it costs (see the module docstring)."""
    if root.id == "nccl_socket_fallback":
        _timer_evidence(ctx, root)
        if not ctx.ranks and _price_socket(ctx, root):
            return
    load = ctx.gradient
    cluster = ctx.cluster
    expected: Bandwidth | None = (
        expected_busbw(cluster, load) if cluster is not None and load is not None else None
    )
    measured: Bandwidth | None = None
    if cluster is not None and load is not None:
        measured = measured_busbw(ctx.nccl_checks, ctx.of(RankTrace), cluster, spans_nodes=load.spans_nodes)
    if ctx.ranks:
        fraction, exposed, _ = exposed_share(ctx)
        still = 0.0
        if expected is not None and measured is not None:
            comm = job_fraction(ctx.ranks, "comm")
            after = comm * min(1.0, measured.busbw_bytes_per_s / expected.busbw_bytes_per_s)
            still = min(fraction, max(0.0, after - (comm - exposed)))
        recoverable = fraction - still
        basis = (
            "exposed communication in the traces (median rank, less straggler wait), less what would stay "
            "exposed at the bus bandwidth the model expects"
        )
    elif load is not None and measured is not None and expected is not None and ctx.mfu.step_time_s:
        saved = load.exposed_s(measured.busbw_bytes_per_s) - load.exposed_s(expected.busbw_bytes_per_s)
        recoverable = min(0.99, max(0.0, saved) / ctx.mfu.step_time_s)
        basis = (
            f"gradient traffic ({units.format_bytes_si(load.bus_bytes_per_step)} of bus traffic per GPU per "
            f"step) exposed at the measured busbw instead of the expected, over the logged step time"
        )
    else:
        return
    if expected is not None:
        root.details["expected_busbw_bytes_per_s"] = expected.busbw_bytes_per_s
        root.evidence.append(
            Evidence(
                "collective model",
                f"expected busbw {units.format_rate(expected.busbw_bytes_per_s)}: {expected.source}",
            )
        )
    if measured is not None:
        root.details["measured_busbw_bytes_per_s"] = measured.busbw_bytes_per_s
        root.evidence.insert(
            0,
            Evidence(
                measured.file, f"busbw {units.format_rate(measured.busbw_bytes_per_s)}: {measured.source}"
            ),
        )
    root.impact = ctx.impact(recoverable, basis)
    root.recoverable_fraction = recoverable
    root.mfu_after_fix = ctx.mfu_after(recoverable)
    root.severity = worse(root.severity, severity_for(recoverable))


def _cite_runs(ctx: Context, root: Finding) -> None:
    """The busbw the nccl-tests runs in the root fault's files reached (judged or not)."""
    files = set(root.details.get("files", []))  # type: ignore[call-overload]
    for check in ctx.nccl_checks:
        run = check.result.run
        if run is not None and check.result.file in files:
            root.evidence.append(
                Evidence(
                    check.result.file,
                    f"nccl-tests {run.collective or ''}: peak busbw {units.format_rate(run.peak_busbw_bytes_per_s)} "
                    f"over {run.num_ranks} ranks",
                )
            )


def _not_judged(ctx: Context) -> list[Finding]:
    """nccl-tests output that could not be read, or not compared with the model: degraded input."""
    unjudged = [check for check in ctx.nccl_checks if check.report is None]
    if not unjudged:
        return []
    evidence = []
    for check in unjudged:
        run = check.result.run
        seen = (
            f"{run.collective or 'collective unknown'}, peak busbw {units.format_rate(run.peak_busbw_bytes_per_s)}: "
            if run is not None
            else ""
        )
        evidence.append(Evidence(check.result.file, f"{seen}{check.problem}"))
    return [
        degraded(
            f"{len(unjudged)} nccl-tests result(s) not judged against the model",
            "; ".join(sorted({check.problem or "" for check in unjudged})),
            evidence,
            "give the system and size of the cluster they ran on (--system or --gpu, --gpus), or judge one "
            "alone with `mfukit comm check FILE --system ... --nodes ...`",
        )
    ]


def analyze(ctx: Context) -> list[Finding]:
    findings = _merge(ctx, _judged(ctx))
    ids = {f.id for f in findings}
    for finding in findings:
        finding.explained_by = next((c for c in EXPLAINED_BY.get(finding.id, ()) if c in ids), None)
    root = next((f for cause in BANDWIDTH_CAUSES for f in findings if f.id == cause), None)
    if root is not None:
        _cost(ctx, root)
        _cite_runs(ctx, root)
    return findings + _not_judged(ctx)
