"""The job's network as the diagnosis weighs it: nccl-tests runs judged by comm's collective model, the bus
bandwidth collectives reach in the traces, and the gradient traffic of one step against both.

Traffic: per GPU and step, and the compute window that can hide it, from ``perf.traffic`` (sharding,
micro-batches, which traffic crosses nodes). A bus bandwidth B turns it into time with nccl-tests' own
definition: a collective that moves b bus bytes per rank takes b / B (busbw = algbw x 2(n-1)/n for an
all-reduce, (n-1)/n for reduce-scatter and all-gather; nccl-tests doc/PERFORMANCE.md), and
``GradientTraffic.bytes_per_step`` is exactly that bus traffic. (Hybrid FSDP: only its inter-node
all-reduce of the shard is weighed; its per-micro-batch collectives stay on NVLink.)

Bandwidth, in order: an nccl-tests all_reduce run that spans nodes when the job's data-parallel group
does, the fastest large collective in the traces (idem), else comm's collective model on the cluster's
topology, which is what the cluster should give, not what it gives.
"""

from __future__ import annotations

import math
import re
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from mfukit import units
from mfukit.comm.check import CheckReport, check_run
from mfukit.comm.collectives import COLLECTIVES, Collective, busbw_factor
from mfukit.comm.model import predict
from mfukit.comm.topology import CommTopology, from_system
from mfukit.core.cluster import Cluster
from mfukit.core.model import ModelSpec
from mfukit.core.parallelism import Parallelism
from mfukit.core.scenario import TrainingSection
from mfukit.diagnose.records import CollectiveSample, NcclTestsResult, RankTrace
from mfukit.errors import InputError
from mfukit.perf.estimate import training_plan
from mfukit.perf.flops import model_flops_per_token
from mfukit.perf.memory import StepShape
from mfukit.perf.traffic import GradientTraffic, model_gradient_traffic


def topology(cluster: Cluster, num_nodes: int) -> CommTopology:
    """The cluster's network for a group spanning ``num_nodes`` of its nodes (catalog switch, non-blocking
    rail-optimised fabric: comm's defaults)."""
    return from_system(cluster.system, cluster.accelerator, num_nodes=num_nodes)[0]


@dataclass(frozen=True)
class NcclCheck:
    """One nccl-tests run judged against the model, or why it could not be."""

    result: NcclTestsResult
    report: CheckReport | None
    problem: str | None = None


def judge_runs(results: list[NcclTestsResult], cluster: Cluster | None) -> list[NcclCheck]:
    """Each run on the cluster's system, over the hosts its device list names (else packed ranks)."""
    checks = []
    for result in results:
        if result.run is None:
            checks.append(NcclCheck(result, None, f"could not be read: {result.problem}"))
            continue
        if result.problem is not None:
            checks.append(NcclCheck(result, None, result.problem))
            continue
        if cluster is None:
            checks.append(
                NcclCheck(result, None, "no cluster given to compare with (--system or --gpu, and --gpus)")
            )
            continue
        nodes = len(result.run.hosts) or None
        try:
            network = topology(cluster, nodes or 1)
            checks.append(NcclCheck(result, check_run(result.run, network, num_nodes=nodes)))
        except InputError as error:
            checks.append(NcclCheck(result, None, error.message))
    return checks


def collective_of(text: str) -> Collective | None:
    """``allreduce``, ``_reduce_scatter_base``, ``all_gather_into_tensor_coalesced`` -> the collective."""
    key = re.sub(r"[^a-z]", "", text.lower())
    return next((name for name in COLLECTIVES if name.replace("_", "") in key), None)


def sample_busbw(sample: CollectiveSample) -> float:
    """Bus bandwidth of one traced collective kernel (nccl-tests' factor; 1 for point-to-point)."""
    name = collective_of(sample.collective)
    factor = float(busbw_factor(name, max(sample.group_size, 2))) if name else 1.0
    return sample.size_bytes / sample.duration_s * factor


def best_traced(traces: list[RankTrace], *, wider_than: int) -> tuple[float, CollectiveSample, str] | None:
    """The fastest large collective over more than ``wider_than`` ranks (least waiting inside it)."""
    best: tuple[float, CollectiveSample, str] | None = None
    for trace in traces:
        for sample in trace.collectives:
            if sample.group_size > wider_than:
                value = sample_busbw(sample)
                if best is None or value > best[0]:
                    best = (value, sample, trace.file)
    return best


@dataclass(frozen=True)
class GradientLoad:
    """The data-parallel gradient traffic of one step and the compute that can hide it."""

    traffic: GradientTraffic
    layout: Parallelism
    bus_bytes_per_step: float
    compute_basis: str

    @property
    def window_s(self) -> float:
        return self.traffic.window_s * self.traffic.windows_per_step

    @property
    def spans_nodes(self) -> bool:
        return self.traffic.group_ranks > self.traffic.ranks_per_domain

    def transfer_s(self, busbw_bytes_per_s: float) -> float:
        return self.bus_bytes_per_step / busbw_bytes_per_s

    def exposed_s(self, busbw_bytes_per_s: float) -> float:
        return max(0.0, self.transfer_s(busbw_bytes_per_s) - self.window_s)


def gradient_load(
    model: ModelSpec | None,
    training: TrainingSection | None,
    layout: Parallelism | None,
    cluster: Cluster | None,
    *,
    compute_s_per_step: float | None,
    healthy_mfu: float | None,
) -> GradientLoad | None:
    """The job's gradient traffic; the compute window from the traces (``compute_s_per_step``), else from
    the model's FLOPs at ``healthy_mfu``. None when the model, cluster or batch is unknown."""
    if model is None or cluster is None or training is None:
        return None
    chosen = layout or Parallelism(dp=cluster.num_gpus)
    sequences = training.global_batch_sequences
    if sequences is None:
        return None
    microbatches = max(1, sequences // (chosen.dp * training.micro_batch_size))
    model_parallel = chosen.tp * chosen.pp * chosen.cp
    if compute_s_per_step is not None and compute_s_per_step > 0:
        microbatch_s = compute_s_per_step / microbatches
        basis = "compute per step from the traces (median over ranks)"
    elif healthy_mfu:
        flops = model_flops_per_token(model, training.seq_len, training.attention_flops)
        peak = cluster.accelerator.peak_flops(training.precision)
        microbatch_s = (
            flops * training.seq_len * training.micro_batch_size / model_parallel / (peak * healthy_mfu)
        )
        basis = f"model FLOPs at {healthy_mfu:.0%} MFU (no trace)"
    else:
        return None
    shape = StepShape(
        seq_len=training.seq_len,
        micro_batch_size=training.micro_batch_size,
        num_microbatches=microbatches,
        precision=training.precision,
        gpus_per_node=cluster.gpus_per_node,
    )
    traffic = model_gradient_traffic(
        model, chosen, shape, topology(cluster, cluster.num_nodes), microbatch_compute_s=microbatch_s
    )
    bus = traffic.inter_node_bytes_per_step if chosen.fsdp == "hybrid" else traffic.bytes_per_step
    return GradientLoad(traffic, chosen, bus, basis)


@dataclass(frozen=True)
class Bandwidth:
    busbw_bytes_per_s: float
    source: str
    file: str
    """The artifact it was measured in ('' for the model)."""


def measured_busbw(
    checks: list[NcclCheck], traces: list[RankTrace], cluster: Cluster, *, spans_nodes: bool
) -> Bandwidth | None:
    """What the job's collectives reach: an nccl-tests all_reduce run's peak busbw (over more than one
    node when the data-parallel group spans nodes), else the fastest traced collective of that width."""
    runs = [
        c
        for c in checks
        if c.report is not None
        and c.report.collective == "all_reduce"
        and c.report.peak_busbw_bytes_per_s > 0
        and (c.report.num_nodes > 1 or not spans_nodes)
    ]
    if runs:
        best = max(runs, key=lambda c: c.report.peak_busbw_bytes_per_s if c.report else 0.0)
        report = best.report
        assert report is not None  # filtered above
        return Bandwidth(
            report.peak_busbw_bytes_per_s,
            f"nccl-tests all_reduce peak busbw, {report.num_ranks} ranks on {report.num_nodes} node(s)",
            best.result.file,
        )
    traced = best_traced(traces, wider_than=cluster.gpus_per_node if spans_nodes else 1)
    if traced is None:
        return None
    value, sample, file = traced
    return Bandwidth(value, f"fastest traced {sample.collective} over {sample.group_size} ranks", file)


def expected_busbw(cluster: Cluster, load: GradientLoad) -> Bandwidth | None:
    """What comm's collective model says an all-reduce of one GPU's gradients reaches on this cluster."""
    traffic = load.traffic
    ranks = traffic.group_ranks
    if ranks < 2:
        return None
    nodes = max(1, math.ceil(ranks / traffic.ranks_per_domain))
    size = load.bus_bytes_per_step / float(busbw_factor("all_reduce", ranks))
    try:
        prediction = predict(
            "all_reduce", size, topology(cluster, nodes), ranks, gpus_per_domain=traffic.ranks_per_domain
        )
    except InputError:
        return None
    return Bandwidth(
        float(prediction.busbw_bytes_per_s[0]),
        f"all_reduce of {ranks} ranks on {nodes} node(s) of {cluster.system.name} "
        f"({prediction.algorithm[0]})",
        "",
    )


# Transport faults that cut the bandwidth collectives get, the most fundamental first: the first one a
# diagnosis finds is the root cause of slow communication; each other one is explained by its cause.
BANDWIDTH_CAUSES: tuple[str, ...] = (
    "nccl_ib_disabled",
    "nccl_socket_fallback",
    "nccl_missing_rails",
    "nccl_gdr_level_loc",
    "nccl_no_gdr",
    "nccl_p2p_disabled",
    "nccl_shm_transport",
    "low_busbw",
)
EXPLAINED_BY: dict[str, tuple[str, ...]] = {
    "nccl_socket_fallback": ("nccl_ib_disabled",),
    "nccl_no_gdr": ("nccl_gdr_level_loc",),
    "nccl_shm_transport": ("nccl_p2p_disabled",),
    "low_busbw": BANDWIDTH_CAUSES[:-1],
}


TRANSPORTS = Path(__file__).parent / "data" / "transports.toml"


@cache
def socket_bytes_per_s_per_node() -> float:
    """Per-node bandwidth of NCCL's socket transport (``data/transports.toml``, with its source)."""
    return float(tomllib.loads(TRANSPORTS.read_text(encoding="utf-8"))["socket"]["bytes_per_s_per_node"])


@dataclass(frozen=True)
class TransportPrice:
    """A step of the job's layout in the performance model on the fabric the node has and on sockets."""

    fabric_step_s: float
    socket_step_s: float
    socket_bytes_per_s_per_node: float
    basis: str
    parts_s: dict[str, float]
    """How much each communication part of the step grows on sockets (tp_comm, dp_comm, pp_comm...)."""

    @property
    def added_s(self) -> float:
        return max(0.0, self.socket_step_s - self.fabric_step_s)


def socket_price(
    model: ModelSpec | None,
    training: TrainingSection | None,
    layout: Parallelism | None,
    cluster: Cluster | None,
    *,
    interfaces: int,
    measured_bytes_per_s: float | None = None,
    measured_source: str = "",
) -> TransportPrice | None:
    """The step time the performance model gives the job's layout with the node's NICs replaced by the
    ``interfaces`` socket interface(s) NCCL used (at the socket rate: measured by nccl-tests over the same
    transport when given, else ``data/transports.toml``), against the node's own fabric. Its DP, TP, PP and
    CP traffic that crosses nodes is what slows down; None when the layout or the model is unknown."""
    if model is None or training is None or layout is None or cluster is None:
        return None
    rate = measured_bytes_per_s or socket_bytes_per_s_per_node()
    sockets = cluster.system.model_copy(
        update={"nics_per_node": max(1, interfaces), "nic_bytes_per_s": rate / max(1, interfaces)}
    )
    try:
        fabric, _ = training_plan(
            model, training, cluster.system, cluster.accelerator, cluster.num_gpus, layout
        )
        if fabric is None:
            return None
        # the same layout, micro-batch and recompute on the sockets: only the network's price changes
        slow, _ = training_plan(
            model,
            training.model_copy(update={"micro_batch_size": fabric.micro_batch_size}),
            sockets,
            cluster.accelerator,
            cluster.num_gpus,
            fabric.layout,
        )
    except InputError:
        return None
    if slow is None:
        return None
    parts = {
        name: slow.breakdown_s[name] - fabric.breakdown_s.get(name, 0.0)
        for name in slow.breakdown_s
        if name.endswith("_comm") and slow.breakdown_s[name] > fabric.breakdown_s.get(name, 0.0)
    }
    source = (
        measured_source
        or f"NCCL's socket transport: {units.format_rate(rate)} per node (data/transports.toml)"
    )
    return TransportPrice(
        fabric.step_time_s,
        slow.step_time_s,
        rate,
        f"performance model of the job's layout on {cluster.num_gpus} x {cluster.accelerator.name}: step "
        f"{fabric.step_time_s:.3g} s over {cluster.system.nics_per_node} x "
        f"{units.format_rate(cluster.system.nic_bytes_per_s)} NICs per node, {slow.step_time_s:.3g} s over "
        f"{max(1, interfaces)} socket interface(s) at {source}",
        parts,
    )
