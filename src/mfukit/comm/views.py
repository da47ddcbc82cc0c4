"""What ``mfukit comm`` shows: predicted collectives (one size, or an nccl-tests-style sweep), the verdict
on an nccl-tests run, and an NCCL log's analysis, as command outputs (``echo``: the inputs the command echoes)."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np

from mfukit import units
from mfukit.comm.check import CheckReport
from mfukit.comm.collectives import Collective
from mfukit.comm.model import Prediction, estimates
from mfukit.comm.nccl_log import NcclLogReport
from mfukit.comm.topology import CommTopology
from mfukit.core.cluster import Cluster
from mfukit.core.results import Output, Table, findings_table, shown


def gb(value: float) -> str:
    return f"{value / 1e9:.2f}"


def us(value: float) -> str:
    return f"{value * 1e6:.2f}"


def prediction_table(title: str, prediction: Prediction) -> Table:
    table = Table(
        title,
        ["size (B)", "time (us)", "algbw (GB/s)", "busbw (GB/s)", "algorithm", "protocol", "bottleneck"],
        csv_columns=[
            "size_bytes",
            "time_s",
            "algbw_bytes_per_s",
            "busbw_bytes_per_s",
            "algorithm",
            "protocol",
            "bottleneck",
        ],
    )
    for j, size in enumerate(prediction.message_bytes):
        table.add(
            int(size),
            shown(float(prediction.time_s[j]), us),
            shown(float(prediction.algbw_bytes_per_s[j]), gb),
            shown(float(prediction.busbw_bytes_per_s[j]), gb),
            prediction.algorithm[j],
            prediction.protocol[j],
            prediction.bottleneck[j],
        )
    return table


def group_note(prediction: Prediction, topology: CommTopology, cluster: Cluster) -> str:
    group = prediction.group
    link = topology.scale_up_link
    domains = f"{group.gpus_per_domain} per {link} domain x {group.num_domains} domain(s)"
    if group.partial:
        domains = (
            f"{group.gpus_per_domain} per {link} domain x {group.num_domains - 1} domain(s) + "
            f"{group.smallest_domain_gpus} on a partial one (its {group.smallest_domain_gpus} GPUs' NICs bound "
            "every inter-node algorithm: NCCL builds the same channels on every node)"
        )
    return (
        f"{group.num_gpus} GPUs of {cluster.system.name}: {domains}, {group.num_nodes} node(s), "
        f"{group.switch_hops} switch hop(s) apart"
    )


def predict_output(
    name: Collective,
    message_bytes: float,
    prediction: Prediction,
    topology: CommTopology,
    cluster: Cluster,
    assumptions: list[str],
    kwargs: dict[str, Any],
    echo: dict[str, Any],
) -> Output:
    """``comm predict``: the prediction of one size and every algorithm and protocol considered
    (``kwargs``: the group and tuning ``predict`` was given)."""
    table = prediction_table(f"{name} of {units.format_bytes(message_bytes)}", prediction)
    alternatives = Table(
        "every algorithm and protocol considered",
        ["algorithm", "protocol", "time (us)", "latency (us)", "algbw (GB/s)", "limited by"],
        csv_columns=["algorithm", "protocol", "time_s", "latency_s", "algbw_bytes_per_s", "bottleneck"],
    )
    options_found = (
        estimates(name, message_bytes, topology, cluster.num_gpus, **kwargs) if cluster.num_gpus > 1 else []
    )
    for option in sorted(options_found, key=lambda o: float(o.time_s(np.asarray([message_bytes]))[0])):
        alternatives.add(
            option.algorithm,
            option.protocol,
            shown(float(option.time_s(np.asarray([message_bytes]))[0]), us),
            shown(option.latency_s, us),
            shown(float(option.algbw_bytes_per_s[0]), gb),
            option.bottleneck,
        )
    result = {
        "collective": name,
        "message_bytes": message_bytes,
        "num_gpus": cluster.num_gpus,
        "gpus_per_domain": prediction.group.gpus_per_domain,
        "num_domains": prediction.group.num_domains,
        "smallest_domain_gpus": prediction.group.smallest_domain_gpus,
        "time_s": float(prediction.time_s[0]),
        "algbw_bytes_per_s": float(prediction.algbw_bytes_per_s[0]),
        "busbw_bytes_per_s": float(prediction.busbw_bytes_per_s[0]),
        "latency_s": float(prediction.latency_s[0]),
        "algorithm": prediction.algorithm[0],
        "protocol": prediction.protocol[0],
        "bottleneck": prediction.bottleneck[0],
        "alternatives": [
            {
                "algorithm": o.algorithm,
                "protocol": o.protocol,
                "time_s": float(o.time_s(np.asarray([message_bytes]))[0]),
                "latency_s": o.latency_s,
                "algbw_bytes_per_s": float(o.algbw_bytes_per_s[0]),
                "bottleneck": o.bottleneck,
            }
            for o in options_found
        ],
    }
    return Output(
        schema="comm.predict/1",
        inputs=echo,
        result=result,
        assumptions=assumptions,
        tables=[table, alternatives],
        notes=[group_note(prediction, topology, cluster)],
    )


def sweep_output(
    name: str,
    prediction: Prediction,
    topology: CommTopology,
    cluster: Cluster,
    assumptions: list[str],
    echo: dict[str, Any],
) -> Output:
    """``comm sweep``: the prediction at every size; its first table is the sweep's."""
    table = prediction_table(
        f"predicted {name}, {cluster.num_gpus} GPUs of {cluster.system.name}", prediction
    )
    peak = int(np.argmax(prediction.busbw_bytes_per_s))
    return Output(
        schema="comm.sweep/1",
        inputs=echo,
        result={
            "collective": name,
            "num_gpus": cluster.num_gpus,
            "peak_busbw_bytes_per_s": float(prediction.busbw_bytes_per_s[peak]),
            "rows": [
                {
                    "size_bytes": int(size),
                    "time_s": float(prediction.time_s[j]),
                    "algbw_bytes_per_s": float(prediction.algbw_bytes_per_s[j]),
                    "busbw_bytes_per_s": float(prediction.busbw_bytes_per_s[j]),
                    "algorithm": prediction.algorithm[j],
                    "protocol": prediction.protocol[j],
                    "bottleneck": prediction.bottleneck[j],
                }
                for j, size in enumerate(prediction.message_bytes)
            ],
        },
        assumptions=assumptions,
        tables=[table],
        notes=[group_note(prediction, topology, cluster)],
    )


def check_output(report: CheckReport, path: Path, assumptions: list[str], inputs: dict[str, Any]) -> Output:
    run = report.run
    sizes = Table(
        f"{report.collective}, {report.num_ranks} ranks on {report.num_nodes} node(s): measured vs model",
        ["size (B)", "time (us)", "busbw (GB/s)", "expected (GB/s)", "ratio", "regime", "status", "note"],
        csv_columns=[
            "size_bytes",
            "time_s",
            "busbw_bytes_per_s",
            "expected_busbw_bytes_per_s",
            "ratio",
            "regime",
            "status",
            "note",
        ],
    )
    for v in report.sizes:
        sizes.add(
            v.size_bytes,
            shown(v.time_s, us),
            shown(v.busbw_bytes_per_s, gb),
            shown(v.expected_busbw_bytes_per_s, gb),
            shown(v.ratio, lambda x: f"{x:.2f}"),
            v.regime,
            v.status,
            v.note,
        )
    summary = Table("verdict", ["field", "value"])
    summary.add("verdict", report.verdict)
    summary.add("peak busbw", shown(report.peak_busbw_bytes_per_s, units.format_rate))
    summary.add("expected peak busbw", shown(report.expected_peak_busbw_bytes_per_s, units.format_rate))
    summary.add("peak / expected", shown(report.peak_ratio, units.format_percent))
    summary.add("footer '# Avg bus bandwidth'", shown(run.avg_busbw_bytes_per_s, units.format_rate))
    if report.nic_limit_bytes_per_s is not None:
        summary.add("NIC limit per node", shown(report.nic_limit_bytes_per_s, units.format_rate))
    summary.add("NCCL version", run.nccl_version or "—")
    result = {
        "verdict": report.verdict,
        "collective": report.collective,
        "num_ranks": report.num_ranks,
        "num_nodes": report.num_nodes,
        "peak_busbw_bytes_per_s": report.peak_busbw_bytes_per_s,
        "expected_peak_busbw_bytes_per_s": report.expected_peak_busbw_bytes_per_s,
        "peak_ratio": report.peak_ratio,
        "avg_busbw_bytes_per_s": run.avg_busbw_bytes_per_s,
        "nic_limit_bytes_per_s": report.nic_limit_bytes_per_s,
        "latency_floor_s": report.latency_floor_s,
        "nccl_version": run.nccl_version,
        "format": run.format,
        "sizes": report.sizes,
        "findings": report.findings,
    }
    return Output(
        schema="comm.check/1",
        inputs={"file": str(path), **inputs},
        result=result,
        assumptions=assumptions,
        warnings=list(run.warnings),
        tables=[summary, sizes, findings_table(report.findings)],
        exit_code=1 if report.negative else 0,
    )


def nccl_log_output(report: NcclLogReport, echo: dict[str, Any]) -> Output:
    """``comm nccl-log``: the log's summary, transports and findings (exit 1 on an error finding)."""
    summary = Table("NCCL log", ["field", "value"])
    summary.add("NCCL version", ", ".join(report.versions) or "—")
    summary.add("network", ", ".join(report.networks) or "—")
    summary.add("hosts / ranks", f"{len(report.hosts)} / {report.num_ranks or '—'}")
    summary.add("GPUs per host", ", ".join(sorted({str(n) for n in report.gpus_per_host.values()})) or "—")
    summary.add("HCAs per host", ", ".join(sorted({str(len(v)) for v in report.hcas.values()})) or "—")
    summary.add("link layer", ", ".join(report.link_layers) or "—")
    summary.add("GPUDirect RDMA", {True: "yes", False: "no", None: "—"}[report.gdr])
    summary.add("channels", ", ".join(f"{k} {v}" for k, v in report.channels.items()) or "—")
    summary.add("rings / trees", f"{report.rings or '—'} / {'yes' if report.trees else '—'}")
    summary.add("NVLS", {True: "available", False: "not available", None: "—"}[report.nvls_available])
    summary.add("NCCL_* set", ", ".join(f"{k}={v}" for k, v in report.env.items()) or "—")
    transports = Table("transports", ["transport", "channel connections"])
    for transport, count in report.transports.items():
        transports.add(transport, count)
    return Output(
        schema="comm.nccl_log/1",
        inputs=echo,
        result={"severity": report.severity, **{f.name: getattr(report, f.name) for f in fields(report)}},
        tables=[summary, transports, findings_table(report.findings)],
        exit_code=1 if report.severity == "error" else 0,
    )
