"""Judge an nccl-tests run against the collective model: each size ok / slow / broken, the peak against
what the cluster should reach, and the classic ways a run misleads (busbw 0 from 1-rank communicators,
``# Avg bus bandwidth`` read as the peak, 2-node Tree/NVLS busbw above the NIC limit)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from mfukit.comm.collectives import Collective, busbw_factor
from mfukit.comm.model import NCCL_CHOICES, Algorithm, predict
from mfukit.comm.nccl_tests import NcclTestsRun, Row
from mfukit.comm.topology import CommTopology
from mfukit.core.findings import Finding
from mfukit.errors import InputError

Status = Literal["ok", "slow", "broken"]
Regime = Literal["latency", "transition", "bandwidth"]

# A size is "slow" below this fraction of the modelled busbw. Healthy runs reach 0.95-1.0 of the model
# in its bandwidth regime (superbench A100: 235 of 240 GB/s; DGX A100 8x HDR: 192 of 192), and the
# model's NVLS figure is ~8 % above NVIDIA's measured ~480 GB/s: 0.8 flags real losses, not noise.
SLOW_BELOW = 0.8
# The run's own small-message floor is launch overhead, not network: a single process driving 8 GPUs
# (-g 8) launches 8 kernels back to back (superbench A100: 35 us at 8 B where NCCL's model says 15 us).
# Sizes are judged against model time + (measured floor - model floor), so slowness means bandwidth.
FLOOR_NOTE_ABOVE = 2.0
# Between the latency and bandwidth regimes (bandwidth term < 90 % of the modelled time) NCCL ramps its
# channels and threads up with size (tuning.cc threadThresholds), which an alpha-beta model does not
# capture: superbench's healthy A100 all_gather sits at 0.57-0.8 of the model there. Only losses
# below this fraction are flagged in that transition.
TRANSITION_SLOW_BELOW = 0.4


@dataclass(frozen=True)
class SizeVerdict:
    size_bytes: int
    time_s: float
    algbw_bytes_per_s: float
    busbw_bytes_per_s: float
    expected_busbw_bytes_per_s: float
    expected_time_s: float
    ratio: float
    algorithm: str
    regime: Regime
    status: Status
    note: str = ""


@dataclass
class CheckReport:
    run: NcclTestsRun
    collective: Collective
    num_ranks: int
    num_nodes: int
    sizes: list[SizeVerdict] = field(default_factory=list)
    peak_busbw_bytes_per_s: float = 0.0
    expected_peak_busbw_bytes_per_s: float = 0.0
    nic_limit_bytes_per_s: float | None = None
    latency_floor_s: float | None = None
    model_latency_floor_s: float | None = None
    nvls_peak_busbw_bytes_per_s: float | None = None
    findings: list[Finding] = field(default_factory=list)

    @property
    def peak_ratio(self) -> float:
        if self.expected_peak_busbw_bytes_per_s <= 0:
            return 0.0
        return self.peak_busbw_bytes_per_s / self.expected_peak_busbw_bytes_per_s

    @property
    def verdict(self) -> Status:
        errors = [f for f in self.findings if f.severity == "error" and f.id != "low_busbw"]
        if errors or any(v.status == "broken" for v in self.sizes):
            return "broken"
        if any(f.id == "low_busbw" for f in self.findings):
            return "slow"
        return "ok"

    @property
    def negative(self) -> bool:
        """Exit 1: a size is broken or the peak is below the threshold."""
        return self.verdict != "ok"


def _best(row: Row) -> tuple[float, float] | None:
    """(time, recomputed algbw) of the faster half of a row; None when it has no usable time."""
    times = [r.time_s for r in row.results if r.time_s > 0]
    if not times:
        return None
    time_s = min(times)
    return time_s, row.size_bytes / time_s


def check_run(
    run: NcclTestsRun,
    topology: CommTopology,
    *,
    num_nodes: int | None = None,
    collective: Collective | None = None,
    num_ranks: int | None = None,
    slow_below: float = SLOW_BELOW,
    algorithm: Algorithm | Literal["auto"] = "auto",
) -> CheckReport:
    """Judge ``run`` on ``topology`` over the hosts its device list names (every rank's line names its
    host, so the file is the better witness), else over ``num_nodes``.

    The expectation is NCCL's own choice among ring and tree (and CollNet with SHARP): a run at that
    figure has healthy links. NVLS / NVLSTree, which need NVLink SHARP to be up, are judged separately
    (``nccl_tests_no_nvls``) unless ``algorithm`` or an ``NCCL_ALGO`` line in the output names them.
    """
    ranks = num_ranks or run.num_ranks
    chosen = collective or run.collective
    if chosen is None and ranks != 1:
        raise InputError(
            "the collective of this run is unknown", field="--collective", hint="pass --collective"
        )
    nodes = len(run.hosts) if run.hosts else num_nodes
    if ranks is None:
        if nodes is None:
            raise InputError(
                "the rank count is unknown (no device list)",
                field="cluster.num_gpus",
                hint="give cluster.num_gpus or cluster.num_nodes",
            )
        ranks = nodes * topology.gpus_per_node
    nodes = nodes or max(1, -(-ranks // topology.gpus_per_node))
    report = CheckReport(run, chosen or "all_reduce", ranks, nodes)
    if run.hosts and num_nodes and len(run.hosts) != num_nodes:
        run.warnings.append(
            f"the device list shows {len(run.hosts)} host(s) ({', '.join(run.hosts[:4])}"
            f"{', ...' if len(run.hosts) > 4 else ''}), the command line says {num_nodes} node(s): judged as "
            f"{len(run.hosts)} host(s), as the file's ranks say where they ran"
        )
    if ranks == 1:
        report.findings.append(_single_rank(run, nodes))
        return report
    if ranks % nodes:
        raise InputError(
            f"{ranks} ranks do not split evenly over {nodes} nodes", field="cluster.num_nodes", value=nodes
        )
    per_node = ranks // nodes
    if per_node > topology.gpus_per_node:
        raise InputError(
            f"{per_node} ranks per node exceed the {topology.gpus_per_node} GPUs of {topology.name}",
            field="cluster.num_nodes",
            value=nodes,
        )
    per_domain = per_node if nodes > 1 else None
    rows = [(row, best) for row in run.rows if row.size_bytes > 0 and (best := _best(row)) is not None]
    if not rows:
        report.findings.append(
            Finding("nccl_tests_no_sizes", "error", "no non-empty sizes", "every row has size 0 or no time")
        )
        return report
    sizes = np.asarray([row.size_bytes for row, _ in rows], dtype=np.float64)
    forced = algorithm if algorithm != "auto" else _algorithm_from_env(run.nccl_env.get("NCCL_ALGO"))
    choices = NCCL_CHOICES - {"nvls", "nvls_tree"}
    model = predict(
        report.collective,
        sizes,
        topology,
        ranks,
        gpus_per_domain=per_domain,
        algorithm=forced or "auto",
        choices=choices,
    )
    if forced is None:
        with_nvls = predict(report.collective, sizes, topology, ranks, gpus_per_domain=per_domain)
        report.nvls_peak_busbw_bytes_per_s = float(np.max(with_nvls.busbw_bytes_per_s))
    factor = float(busbw_factor(report.collective, ranks))
    shares = 1.0 - model.latency_s / np.maximum(model.time_s, 1e-30)
    latency_bound = [j for j, share in enumerate(shares) if share < 0.1]
    floor_s = min((rows[j][1][0] for j in latency_bound), default=0.0)
    model_floor_s = min((float(model.time_s[j]) for j in latency_bound), default=0.0)
    offset_s = max(0.0, floor_s - model_floor_s)
    for j, (row, (time_s, algbw)) in enumerate(rows):
        expected_time = float(model.time_s[j]) + offset_s
        ratio = expected_time / time_s
        regime: Regime = (
            "latency" if j in latency_bound else "bandwidth" if shares[j] >= 0.9 else "transition"
        )
        threshold = slow_below * TRANSITION_SLOW_BELOW / SLOW_BELOW if regime == "transition" else slow_below
        status: Status = "ok" if ratio >= threshold else "slow"
        note = ""
        wrong = [r.wrong for r in row.results if r.wrong is not None]
        if run.error_column == "wrong_count" and any(w > 0 for w in wrong):
            status, note = "broken", f"{int(max(wrong))} wrong element(s)"
        report.sizes.append(
            SizeVerdict(
                size_bytes=row.size_bytes,
                time_s=time_s,
                algbw_bytes_per_s=algbw,
                busbw_bytes_per_s=algbw * factor,
                expected_busbw_bytes_per_s=row.size_bytes / expected_time * factor,
                expected_time_s=expected_time,
                ratio=ratio,
                algorithm=model.algorithm[j],
                regime=regime,
                status=status,
                note=note,
            )
        )
    report.latency_floor_s = floor_s if latency_bound else None
    report.model_latency_floor_s = model_floor_s if latency_bound else None
    peak = max(report.sizes, key=lambda v: v.busbw_bytes_per_s)
    report.peak_busbw_bytes_per_s = peak.busbw_bytes_per_s
    largest = max(report.sizes, key=lambda v: v.size_bytes)
    report.expected_peak_busbw_bytes_per_s = max(
        largest.expected_busbw_bytes_per_s, peak.expected_busbw_bytes_per_s
    )
    if nodes > 1:
        report.nic_limit_bytes_per_s = per_node * topology.nic_bytes_per_s_per_gpu
    report.findings.extend(_findings(report, slow_below))
    return report


_NCCL_ALGO_NAMES: dict[str, Algorithm] = {
    "ring": "ring",
    "tree": "tree",
    "nvls": "nvls",
    "nvlstree": "nvls_tree",
    "collnetdirect": "collnet",
    "collnetchain": "collnet",
    "collnet": "collnet",
}


def _algorithm_from_env(value: str | None) -> Algorithm | None:
    """``NCCL_ALGO=Ring`` -> ``ring``; lists, exclusions (``^NVLS``) and per-function forms -> None."""
    if not value or value.startswith("^") or "," in value or ":" in value:
        return None
    return _NCCL_ALGO_NAMES.get(value.strip().lower())


def _single_rank(run: NcclTestsRun, nodes: int) -> Finding:
    return Finding(
        "nccl_tests_single_rank",
        "error",
        "1-rank communicator: busbw is 0 by definition",
        "busbw = algbw x 2(n-1)/n is 0 for n = 1. Under mpirun this is nccl-tests built without MPI=1: "
        f"every process runs its own 1-rank test{' on each of the ' + str(nodes) + ' nodes' if nodes > 1 else ''}"
        " and nothing crosses the network (nccl-tests#182).",
        fix="rebuild with `make MPI=1 MPI_HOME=...` and launch one rank per GPU, or use -g N in one process",
        evidence=[
            f"device list: {len(run.devices)} rank(s); header nThread x nGpus = "
            f"{run.header.get('nThread', '?')} x {run.header.get('nGpus', '?')}"
        ],
    )


def _findings(report: CheckReport, slow_below: float) -> list[Finding]:
    run, found = report.run, []
    gb = 1e9
    if report.peak_ratio < slow_below:
        found.append(
            Finding(
                "low_busbw",
                "error",
                "peak busbw below the model",
                f"peak busbw {report.peak_busbw_bytes_per_s / gb:.1f} GB/s is {report.peak_ratio:.0%} of the "
                f"{report.expected_peak_busbw_bytes_per_s / gb:.1f} GB/s this cluster should reach "
                f"(threshold {slow_below:.0%})",
                fix="run `mfukit comm nccl-log` on the NCCL_DEBUG=INFO output of this run to see the transports",
            )
        )
    broken = [v for v in report.sizes if v.status == "broken"]
    if broken:
        found.append(
            Finding(
                "nccl_tests_wrong_results",
                "error",
                "wrong results",
                f"{len(broken)} size(s) report wrong elements, from {broken[0].size_bytes} B",
                fix="a data-corrupting path (GPU, NVLink, NIC or LL128 on an unsupported platform): rerun with "
                "NCCL_PROTO=^LL128 and check dmesg / nvidia-smi -q for Xid and NVLink errors",
            )
        )
    if run.out_of_bounds:
        found.append(
            Finding(
                "nccl_tests_out_of_bounds",
                "error",
                "out-of-bounds values",
                f"'# Out of bounds values : {run.out_of_bounds}'",
                fix="treat as data corruption",
            )
        )
    if (
        run.avg_busbw_bytes_per_s is not None
        and run.avg_busbw_bytes_per_s < 0.8 * report.peak_busbw_bytes_per_s
    ):
        found.append(
            Finding(
                "nccl_tests_avg_not_peak",
                "info",
                "'# Avg bus bandwidth' is not the peak",
                f"the footer's {run.avg_busbw_bytes_per_s / gb:.2f} GB/s is the mean over every size and both "
                f"in- and out-of-place results; the peak is {report.peak_busbw_bytes_per_s / gb:.2f} GB/s",
                fix="compare the peak busbw at large sizes (>= 1 GB) with the expectation, not the average",
            )
        )
    nvls_peak = report.nvls_peak_busbw_bytes_per_s
    if (
        nvls_peak
        and report.collective == "all_reduce"
        and nvls_peak > report.expected_peak_busbw_bytes_per_s * 1.05
        and report.peak_busbw_bytes_per_s < slow_below * nvls_peak
    ):
        found.append(
            Finding(
                "nccl_tests_no_nvls",
                "info",
                "below the NVLink SHARP figure",
                f"peak {report.peak_busbw_bytes_per_s / gb:.1f} GB/s is judged against ring/tree "
                f"({report.expected_peak_busbw_bytes_per_s / gb:.1f} GB/s); with NVLS the model expects "
                f"{nvls_peak / gb:.1f} GB/s",
                fix="if NVLS should be on: check nvidia-fabricmanager, NCCL_NVLS_ENABLE, and the log line "
                "'NVLS multicast support is available' (mfukit comm nccl-log)",
            )
        )
    limit = report.nic_limit_bytes_per_s
    if report.num_nodes == 2 and limit and report.peak_busbw_bytes_per_s > 1.02 * limit:
        found.append(
            Finding(
                "nccl_tests_above_nic_limit",
                "warning",
                "busbw above the NIC limit on 2 nodes",
                f"{report.peak_busbw_bytes_per_s / gb:.1f} GB/s exceeds the {limit / gb:.1f} GB/s the NICs can "
                "carry: on 2 nodes Tree/NVLSTree move S per node instead of ~2S, so busbw is not network "
                "bandwidth (nccl-tests#196)",
                fix="rerun with NCCL_ALGO=RING to measure the network",
            )
        )
    floor, model_floor = report.latency_floor_s, report.model_latency_floor_s
    if floor is not None and model_floor and floor > FLOOR_NOTE_ABOVE * model_floor:
        found.append(
            Finding(
                "nccl_tests_latency_floor",
                "info",
                "high small-message floor",
                f"the smallest sizes take {floor * 1e6:.1f} us where NCCL's model says {model_floor * 1e6:.1f} us: "
                "launch or transport overhead (one process driving several GPUs with -g, a busy CPU, no "
                "CUDA graphs, or a slow transport such as TCP sockets); larger sizes are judged with this "
                "floor added",
                fix="launch one rank per GPU (mpirun -np N, -g 1) to measure NCCL's own latency",
            )
        )
    if run.validation is False or run.error_column == "none":
        found.append(
            Finding(
                "nccl_tests_validation_off",
                "info",
                "results not validated",
                "validation was off (-c 0) or the output has no error column",
                fix="use -c 1 when the question is correctness",
            )
        )
    if run.avg_busbw_status == "FAILED":
        found.append(
            Finding(
                "nccl_tests_min_bw_failed",
                "warning",
                "NCCL_TESTS_MIN_BW check failed",
                "the footer says FAILED: the average fell below 0.9 x NCCL_TESTS_MIN_BW",
            )
        )
    return found
