"""The five gates of the MFU-first framework, each pass / fail / unknown with its value and target.

1. MFU baseline: measured MFU against the framework's target (> 45 % on H100-class clusters).
2. Network: the data-parallel gradient traffic of one step (``perf.traffic``: sharding, micro-batches),
   at the bus bandwidth the job reaches (an nccl-tests all_reduce run judged by comm's model, else the
   traced collectives), must fit in the compute that can hide it (:mod:`.network`); with no measurement,
   comm's collective model decides only a fail (the fabric cannot hide it even when healthy); without the
   model, exposed communication < 5 %.
3. Failure rate: the checkpoint interval against Young's optimum sqrt(2 delta M) (``ft.interval``), M the
   MTBF of the job: the scenario's failure rate, else sacct failures, fatal XIDs over the logged window or
   an ``mfukit train`` ledger's restarts over its training time, else ``ft``'s failure model (``[ft]
   failure_model``, llama3 by default) for the cluster's size. The interval and save time: an ``mfukit
   train`` ledger's (measured per save), else the checkpoint stalls found in the training log.
4. Scheduling: GPU allocation utilization > 85 % and idle between jobs < 5 min (sacct).
5. Storage I/O: a checkpoint's blocking write < 2x a step's compute; the data loader not starving the GPU.
   Without the job's own saves, an ``mfukit bench checkpoint`` result prices the write of the job's
   checkpoint (``ft``'s bytes per parameter, one shard per node) at the save rate it measured; without a
   log or trace, the step's compute is the performance model's step time.
Targets live in ``data/gates.toml``. An unknown gate names the artifact that would decide it.
"""

from __future__ import annotations

import itertools
import tomllib
from functools import cache
from pathlib import Path
from typing import Any

from mfukit import units
from mfukit.core.scenario import FtSection
from mfukit.diagnose.breakdown import job_fraction, median
from mfukit.diagnose.context import Context
from mfukit.diagnose.findings import Gate
from mfukit.diagnose.network import expected_busbw, measured_busbw
from mfukit.diagnose.records import (
    FAILED_STATES,
    BenchCheckpoint,
    NcclLog,
    RankTrace,
    SlurmJob,
    TrainingLog,
    TrainLedger,
    XidEvent,
)
from mfukit.diagnose.rules.hardware import catalog
from mfukit.ft.checkpoint_io import bytes_per_param, state_convention
from mfukit.ft.failures import scenario_failures
from mfukit.ft.interval import young_interval_s

TARGETS = Path(__file__).parent / "data" / "gates.toml"


@cache
def targets() -> dict[str, Any]:
    return tomllib.loads(TARGETS.read_text(encoding="utf-8"))


def gates(ctx: Context) -> list[Gate]:
    return [_mfu(ctx), _network(ctx), _failure_rate(ctx), _scheduling(ctx), _storage(ctx)]


def _mfu(ctx: Context) -> Gate:
    target = float(targets()["mfu_baseline"]["min_mfu"])
    value = ctx.mfu.measured
    text = f"> {units.format_percent(target, 0)}"
    if value is None:
        return Gate.unknown(
            id="mfu_baseline",
            name="MFU baseline",
            target_text=text,
            why=ctx.mfu.method,
            decided_by="a training log with step times or tokens/s, and --model/--gpu/--gpus or a scenario",
        )
    return Gate(
        id="mfu_baseline",
        name="MFU baseline",
        status="pass" if value >= target else "fail",
        value=value,
        value_text=units.format_percent(value),
        target_text=text,
        why=f"{ctx.mfu.method} ({Path(ctx.mfu.source).name})",
    )


def _socket_fallback(ctx: Context, name: str) -> Gate | None:
    """A job that spans nodes over NCCL's socket transport fails the gate, whatever else is known: its
    inter-node collectives run at TCP speed (the finding's evidence, and its cost when priced)."""
    found = ctx.find("nccl_socket_fallback")
    if found is None:
        return None
    nodes = ctx.cluster.num_nodes if ctx.cluster is not None else None
    multi = [log for log in ctx.of(NcclLog) if log.report.multi_node]
    if not multi and not (nodes and nodes > 1):
        return None
    seen = "; ".join(e.what for e in found.evidence[:3])
    cost = (
        f"; it costs {units.format_percent(found.impact.step_fraction)} of each step ({found.impact.basis})"
        if found.impact.step_fraction is not None
        else ""
    )
    span = f"{nodes} nodes" if nodes and nodes > 1 else "several nodes (the NCCL log says so)"
    return Gate(
        id="network",
        name=name,
        status="fail",
        value=found.impact.step_fraction,
        value_text="NET/Socket",
        target_text="RDMA (NET/IB) between nodes",
        why=f"the job spans {span} over TCP sockets: {seen}{cost}",
    )


def _network(ctx: Context) -> Gate:
    spec = targets()["network"]
    name = "Network (gradient traffic vs compute)"
    socket = _socket_fallback(ctx, name)
    if socket is not None:
        return socket
    limit = float(spec["max_transfer_to_window"])
    target = f"<= {limit:.1f}x"
    load, cluster = ctx.gradient, ctx.cluster
    broken = [c.result.file for c in ctx.nccl_checks if c.report is not None and c.report.verdict == "broken"]
    if load is not None and cluster is not None:
        traffic = load.traffic
        what = (
            f"{units.format_bytes_si(load.bus_bytes_per_step)} of bus traffic per GPU per step "
            f"({traffic.pattern}, {traffic.group_ranks} ranks) against "
            f"{units.format_duration(load.window_s)} of compute that can hide it ({load.compute_basis})"
        )
        expected = expected_busbw(cluster, load)
        measured = measured_busbw(ctx.nccl_checks, ctx.of(RankTrace), cluster, spans_nodes=load.spans_nodes)
        model_text = (
            f"; the model expects {units.format_rate(expected.busbw_bytes_per_s)} ({expected.source})"
            if expected
            else ""
        )
        if measured is not None:
            ratio = load.transfer_s(measured.busbw_bytes_per_s) / load.window_s
            ok = ratio <= limit and not broken
            wrong = f"; nccl-tests reports wrong results in {', '.join(broken)}" if broken else ""
            return Gate(
                id="network",
                name=name,
                status="pass" if ok else "fail",
                value=ratio,
                value_text=f"{ratio:.2f}x",
                target_text=target,
                why=f"{what}: {units.format_duration(load.transfer_s(measured.busbw_bytes_per_s))} at "
                f"{units.format_rate(measured.busbw_bytes_per_s)} busbw ({measured.source}){model_text}{wrong}",
            )
        if expected is not None:
            ratio = load.transfer_s(expected.busbw_bytes_per_s) / load.window_s
            verdict = "even a healthy fabric cannot hide it" if ratio > limit else "not measured"
            return Gate(
                id="network",
                name=name,
                status="fail" if ratio > limit else "unknown",
                value=ratio,
                value_text=f"{ratio:.2f}x (model)",
                target_text=target,
                why=f"{what}: {units.format_duration(load.transfer_s(expected.busbw_bytes_per_s))} at the "
                f"{units.format_rate(expected.busbw_bytes_per_s)} busbw the cluster should give "
                f"({expected.source}); {verdict}",
                decided_by="nccl-tests all_reduce_perf across the job's nodes, or profiler traces of a few steps",
            )
    traces = [t for t in ctx.of(RankTrace) if t.steps]
    if traces and not any(t.num_comm_kernels for t in traces):
        worlds = [t.world_size for t in traces if t.world_size]
        single = not worlds or max(worlds) <= 1
        reason = (
            "the traced job runs on one GPU and issues no collective"
            if single
            else f"world size {max(worlds)}, but no communication kernel was recognised in the traces (see "
            "the degraded-input notes)"
        )
        return Gate.unknown(
            id="network",
            name=name,
            target_text="gradient traffic hidden by compute",
            why=f"not applicable: {reason}",
            decided_by="profiler traces of a multi-GPU job (NCCL/RCCL kernels), or nccl-tests all_reduce_perf "
            "across the job's nodes",
        )
    if ctx.ranks:
        exposed = job_fraction(ctx.ranks, "comm_exposed")
        limit = float(spec["max_exposed_comm_fraction"])
        return Gate(
            id="network",
            name=name,
            status="pass" if exposed <= limit else "fail",
            value=exposed,
            value_text=units.format_percent(exposed),
            target_text=f"<= {units.format_percent(limit, 0)} exposed",
            why="proxy: exposed communication share of step time (give the model, batch and cluster to weigh "
            "the gradient traffic against the compute that hides it)",
        )
    why = (
        f"{len(ctx.nccl_checks)} nccl-tests run(s), but the job's gradient traffic is unknown without its model and batch"
        if ctx.nccl_checks
        else "no model of the job, no trace with a usable step and no nccl-tests result"
    )
    return Gate.unknown(
        id="network",
        name=name,
        target_text="gradient traffic hidden by compute",
        why=why,
        decided_by="--model, --gpu, --gpus and the batch (or a scenario), with nccl-tests all_reduce_perf "
        "across the job's nodes or profiler traces",
    )


def _mtbf_s(ctx: Context) -> tuple[float | None, str]:
    """The job's MTBF and where it comes from (see the module docstring for the order)."""
    cluster = ctx.cluster
    ft = ctx.ft or FtSection()
    if cluster is not None and cluster.node_failure_rate_per_s:
        failures, _ = scenario_failures(ft, node_rate_per_s=cluster.node_failure_rate_per_s,
                                        num_gpus=cluster.num_gpus, num_nodes=cluster.num_nodes, source="scenario")  # fmt: skip
        return failures.mtbf_s, "scenario failure rate per 1,000 node-days"
    jobs = [j for j in ctx.of(SlurmJob) if j.start_s and j.end_s and j.end_s > j.start_s]
    failed = [j for j in jobs if j.state in FAILED_STATES]
    if jobs and failed:
        run_s = sum((j.end_s or 0.0) - (j.start_s or 0.0) for j in jobs)
        return run_s / len(failed), f"sacct: {len(failed)} failed of {len(jobs)} jobs"
    fatal = [
        e
        for e in ctx.of(XidEvent)
        if catalog().get(e.xid) is not None and catalog()[e.xid].fatal and e.wall_s
    ]
    if len(fatal) >= 2:
        stamps = sorted(e.wall_s for e in fatal if e.wall_s is not None)
        return (stamps[-1] - stamps[0]) / (len(fatal) - 1), f"{len(fatal)} fatal XIDs in the kernel logs"
    runs = [r.goodput for r in ctx.of(TrainLedger) if r.goodput.failures and r.goodput.training_phase_s > 0]
    if runs:
        run = max(runs, key=lambda g: g.training_phase_s)
        return run.training_phase_s / run.failures, (
            f"mfukit train ledger: {run.failures} failure(s) in {units.format_duration(run.training_phase_s)} "
            "of training"
        )
    if cluster is not None:
        failures, _ = scenario_failures(ft, node_rate_per_s=None, num_gpus=cluster.num_gpus,
                                        num_nodes=cluster.num_nodes, source="scenario")  # fmt: skip
        return failures.mtbf_s, (
            f"failure model {failures.model} ({failures.display_name}) for {cluster.num_gpus} GPUs"
        )
    return None, ""


def _checkpoint(ctx: Context) -> tuple[float | None, float | None]:
    """(interval between saves in seconds, blocking seconds per save): an ``mfukit train`` ledger's
    measured ones, else the checkpoint finding's."""
    for ledger in ctx.of(TrainLedger):
        interval, blocking = ledger.goodput.interval_s, ledger.goodput.blocking_per_save_s
        if interval is not None and blocking is not None:
            return interval, blocking
    finding = ctx.find("checkpoint_stall")
    if finding is None:
        return None, None
    every = finding.details.get("interval_steps")
    per_save = finding.details.get("stall_s_per_save")
    step = ctx.mfu.step_time_s
    if step is None and ctx.ranks:
        step = median([r.step_s for r in ctx.ranks])
    interval = float(every) * step if isinstance(every, int | float) and step else None
    return interval, float(per_save) if isinstance(per_save, int | float) else None


def _failure_rate(ctx: Context) -> Gate:
    spec = targets()["failure_rate"]
    name = "Failure rate (MTBF vs checkpoint interval)"
    mtbf, basis = _mtbf_s(ctx)
    interval, blocking = _checkpoint(ctx)
    band = f"{spec['min_interval_to_optimum']}x-{spec['max_interval_to_optimum']}x of sqrt(2 x save x MTBF)"
    fatal = [e for e in ctx.of(XidEvent) if catalog().get(e.xid) is not None and catalog()[e.xid].fatal]
    seen = (
        f"{len(fatal)} fatal XID(s) ({', '.join(sorted({f'XID {e.xid}' for e in fatal}))}) on "
        f"{', '.join(sorted({e.host or 'a node the log does not name' for e in fatal}))}"
        if fatal
        else ""
    )
    if fatal and interval is None:  # a node failed under the job and nothing shows it checkpoints
        return Gate(
            id="failure_rate",
            name=name,
            status="fail",
            value=None,
            value_text=f"{len(fatal)} fatal XID",
            target_text=band,
            why=f"{seen}: a GPU failed during the job, and no checkpoint save is in the artifacts, so the work "
            "since the job's start is at risk on every such failure",
        )
    if mtbf is None or interval is None or blocking is None:
        missing = [
            what
            for what, have in (("an MTBF", mtbf), ("the checkpoint interval and save time", interval))
            if have is None
        ]
        return Gate.unknown(
            id="failure_rate",
            name=name,
            target_text=band,
            why=f"missing {' and '.join(missing)}",
            decided_by="checkpoint-save lines in a training log plus a failure rate (scenario, sacct or XIDs)",
        )
    optimum = young_interval_s(blocking, mtbf)
    ratio = interval / optimum
    ok = float(spec["min_interval_to_optimum"]) <= ratio <= float(spec["max_interval_to_optimum"])
    return Gate(
        id="failure_rate",
        name=name,
        status="pass" if ok else "fail",
        value=ratio,
        value_text=f"{ratio:.2f}x optimum",
        target_text=band,
        why=f"MTBF {units.format_duration(mtbf)} ({basis}); save {units.format_duration(blocking)} every "
        f"{units.format_duration(interval)}; Young optimum {units.format_duration(optimum)}"
        + (f"; {seen}" if seen else ""),
    )


def _scheduling(ctx: Context) -> Gate:
    spec = targets()["scheduling"]
    name = "Scheduling efficiency"
    max_gap = units.parse_duration_s(spec["max_idle_between_jobs"])
    min_util = float(spec["min_utilization"])
    target = f"utilization > {units.format_percent(min_util, 0)}, idle between jobs < {units.format_duration(max_gap, 0)}"
    jobs = sorted(
        (j for j in ctx.of(SlurmJob) if j.start_s and j.end_s and j.num_gpus), key=lambda j: j.start_s or 0.0
    )
    if not jobs:
        return Gate.unknown(
            id="scheduling",
            name=name,
            target_text=target,
            why="no job accounting",
            decided_by="sacct -a -X -P -S <start> -E <end> output (JobID,State,Start,End,AllocTRES)",
        )
    if len(jobs) == 1 and ctx.cluster is None:
        return Gate.unknown(
            id="scheduling",
            name=name,
            target_text=target,
            why="one job and no cluster size: its utilization would be 100 % by construction",
            decided_by="sacct over a window with several jobs, and --gpus (or a scenario) for the cluster size",
        )
    lo = min(j.start_s or 0.0 for j in jobs)
    hi = max(j.end_s or 0.0 for j in jobs)
    capacity = ctx.cluster.num_gpus if ctx.cluster else max(j.num_gpus or 0 for j in jobs)
    used = sum((j.num_gpus or 0) * ((j.end_s or 0.0) - (j.start_s or 0.0)) for j in jobs)
    utilization = used / (capacity * (hi - lo)) if hi > lo and capacity else 0.0
    gaps = [max(0.0, (b.start_s or 0.0) - (a.end_s or 0.0)) for a, b in itertools.pairwise(jobs)]
    gap = median(gaps) if gaps else 0.0
    ok = utilization >= min_util and gap <= max_gap
    return Gate(
        id="scheduling",
        name=name,
        status="pass" if ok else "fail",
        value=utilization,
        value_text=f"{units.format_percent(utilization)}, median gap {units.format_duration(gap)}",
        target_text=target,
        why=f"{len(jobs)} jobs over {units.format_duration(hi - lo)} on {capacity} GPUs"
        + ("" if ctx.cluster else " (capacity = the largest job: give --gpus for the cluster size)"),
    )


def _storage(ctx: Context) -> Gate:
    spec = targets()["storage"]
    name = "Storage I/O"
    limit = float(spec["max_checkpoint_to_step"])
    data_limit = float(spec["max_dataloader_fraction"])
    target = f"checkpoint write < {limit:.0f}x step compute; data loader < {units.format_percent(data_limit, 0)} of step"
    _, blocking = _checkpoint(ctx)
    blocking_basis = "the job's own saves"
    if blocking is None and (priced := _bench_write(ctx)) is not None:
        blocking, blocking_basis = priced
    compute, compute_basis = _step_compute(ctx)
    data_fraction, data_text = _data_loader(ctx, data_limit)
    parts, failed = [], False
    value = None
    if blocking is not None and compute:
        value = blocking / compute
        failed |= value > limit
        parts.append(
            f"checkpoint write {units.format_duration(blocking)} ({blocking_basis}) = {value:.1f}x a step's "
            f"compute of {units.format_duration(compute)} ({compute_basis})"
        )
    if data_fraction is not None:
        failed |= data_fraction > data_limit
        parts.append(data_text)
    if not parts:
        return Gate.unknown(
            id="storage",
            name=name,
            target_text=target,
            why="no checkpoint timing" + (f", and {data_text}" if data_text else " and no trace"),
            decided_by="a training log with checkpoint saves (or Megatron's save-checkpoint timer, or an mfukit "
            "train ledger, or an mfukit bench checkpoint result with the model) and a profiler trace",
        )
    shown = f"{value:.1f}x" if value is not None else units.format_percent(data_fraction or 0.0)
    return Gate(
        id="storage",
        name=name,
        status="fail" if failed else "pass",
        value=value if value is not None else data_fraction,
        value_text=shown,
        target_text=target,
        why="; ".join(parts),
    )


def _data_loader(ctx: Context, limit: float) -> tuple[float | None, str]:
    """The share of the step the data loader idles the GPU, and how it is known. Without data-loader spans
    in the traces (no CPU activity recorded, or a loader the profiler does not name) the GPU's idle share
    bounds it: a small one still passes the gate, a large one says nothing about the loader."""
    data = ctx.find("dataloader_stall")
    if data is not None and data.impact.step_fraction is not None:
        share = data.impact.step_fraction
        return share, f"data loader idles the GPU {units.format_percent(share)} of the step"
    if not ctx.ranks:
        return None, "no trace with a usable step" if ctx.of(RankTrace) else ""
    if any(r.medians_s["dataloader_s"] > 0 for r in ctx.ranks):
        share = job_fraction(ctx.ranks, "dataloader_exposed")
        return share, f"data loader idles the GPU {units.format_percent(share)} of the step"
    idle = job_fraction(ctx.ranks, "idle")
    if idle <= limit:
        return idle, (
            f"no data-loader spans in the traces, but the GPU idles only {units.format_percent(idle)} of the "
            "step (an upper bound on data-loader stalls)"
        )
    return None, (
        f"the traces hold no data-loader spans and the GPU idles {units.format_percent(idle)} of the step "
        "(record the trace with ProfilerActivity.CPU to see the loader)"
    )


def _step_compute(ctx: Context) -> tuple[float | None, str]:
    """A step's compute: the traces' (median over ranks), the log's step time, or the performance model's."""
    if ctx.ranks:
        return median([r.medians_s["compute_s"] for r in ctx.ranks]), "traced, median over ranks"
    logged = [s.step_time_s for log in ctx.of(TrainingLog) for s in log.steps if s.step_time_s]
    if ctx.mfu.step_time_s is not None or logged:
        return ctx.mfu.step_time_s or median(logged), "the log's median step"
    if ctx.expected.step_time_s is not None:
        return ctx.expected.step_time_s, "the performance model's step"
    return None, ""


def _bench_write(ctx: Context) -> tuple[float, str] | None:
    """How long the job's checkpoint takes to write at the slowest ``mfukit bench checkpoint`` save rate:
    ``ft``'s resumable bytes per parameter, every node writing its shard at once (the gate's "checkpoint
    write"; it holds while the storage's aggregate bandwidth keeps up with the nodes)."""
    benches = ctx.of(BenchCheckpoint)
    if not benches or ctx.model is None or ctx.cluster is None:
        return None
    bench = min(benches, key=lambda b: b.save_bytes_per_s)
    ft = ctx.ft or FtSection()
    precision = ctx.training.precision if ctx.training is not None else "bf16"
    convention = state_convention(ft.checkpoint_state, ctx.parallelism)
    total = ctx.model.total_params() * bytes_per_param(convention, precision)
    written = total if ft.checkpoint_mode == "single" else total / ctx.cluster.num_nodes
    blocks = {
        "sync": "the training loop waits for it",
        "single": "one rank writes it all while the others wait",
        "async": "in the background: the loop blocks only for the staging copy, but it must end before the next save",
    }[ft.checkpoint_mode]
    return written / bench.save_bytes_per_s, (
        f"{units.format_bytes(written)} of a {units.format_bytes(total)} checkpoint written per node at the "
        f"{units.format_rate(bench.save_bytes_per_s)} save rate of {Path(bench.file).name}; "
        f"{ft.checkpoint_mode} saves: {blocks}"
    )
