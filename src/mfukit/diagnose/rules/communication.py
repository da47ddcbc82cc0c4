"""``exposed_communication``: collectives the GPU waits for with no compute to hide them.

Exposed communication = time a communication kernel runs while no compute kernel does. Waiting for a
straggler also shows up as exposed communication on every other rank; that part belongs to
``straggler_rank`` and is taken out here. The bus bandwidth each large collective reached
(bytes x 2(n-1)/n / time for all-reduce, (n-1)/n for reduce-scatter and all-gather; nccl-tests
doc/PERFORMANCE.md) is compared with the per-GPU NIC rate: far below it points at the transport
(socket fallback, missing rails), not at overlap.
"""

from __future__ import annotations

from mfukit import units
from mfukit.diagnose.breakdown import job_fraction
from mfukit.diagnose.context import Context
from mfukit.diagnose.findings import WARNING_STEP_FRACTION, Evidence, Finding, severity_for
from mfukit.diagnose.records import CollectiveSample, RankTrace

LOW_BUSBW_SHARE = 0.5  # below half the NIC rate per GPU, the transport is suspect


def bus_factor(collective: str, group: int) -> float:
    """busbw / algbw for a collective over ``group`` ranks (nccl-tests doc/PERFORMANCE.md)."""
    n = max(group, 2)
    name = collective.lower().replace("_", "")
    if "allreduce" in name:
        return 2.0 * (n - 1) / n
    if "reducescatter" in name or "allgather" in name or "alltoall" in name:
        return (n - 1) / n
    return 1.0


def busbw_bytes_per_s(sample: CollectiveSample) -> float:
    return sample.size_bytes / sample.duration_s * bus_factor(sample.collective, sample.group_size)


def best_busbw(
    traces: list[RankTrace], *, inter_node_from: int
) -> tuple[float, CollectiveSample, str] | None:
    """The fastest large collective spanning more than one node (least waiting inside it)."""
    best: tuple[float, CollectiveSample, str] | None = None
    for trace in traces:
        for sample in trace.collectives:
            if sample.group_size > inter_node_from:
                value = busbw_bytes_per_s(sample)
                if best is None or value > best[0]:
                    best = (value, sample, trace.file)
    return best


def analyze(ctx: Context) -> list[Finding]:
    ranks = ctx.ranks
    if not ranks:
        return []
    exposed = job_fraction(ranks, "comm_exposed")
    straggler = ctx.find("straggler_rank")
    waiting = (straggler.impact.step_fraction or 0.0) if straggler else 0.0
    fraction = max(0.0, exposed - waiting)
    if fraction < WARNING_STEP_FRACTION:
        return []
    total = job_fraction(ranks, "comm")
    evidence = [
        Evidence(
            r.file,
            f"communication {r.fractions['comm']:.0%} of step, {r.fractions['comm_exposed']:.0%} exposed",
            rank=r.rank,
            time_s=r.medians_s["comm_exposed_s"],
        )
        for r in sorted(ranks, key=lambda r: -r.fractions["comm_exposed"])[:6]
    ]
    summary = (
        f"communication kernels run {total:.0%} of each step and {exposed:.0%} of the step has nothing else "
        f"running" + (f" ({waiting:.0%} of it is waiting for the straggler)" if waiting else "")
    )
    fix = [
        "overlap gradient reduction with backward: DDP(bucket_cap_mb=100, gradient_as_bucket_view=True); "
        "FSDP(backward_prefetch=BACKWARD_PRE, forward_prefetch=True); Megatron --overlap-grad-reduce --overlap-param-gather",
        "tensor-parallel overlap: Megatron --tp-comm-overlap (Transformer Engine userbuffers)",
        "check the transport each rank uses: NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET; expect 'NET/IB ... GDRDMA', not 'NET/Socket'",
        "measure the fabric: srun -N <nodes> --ntasks-per-node=8 all_reduce_perf -b 8 -e 8G -f 2 -g 1 (nccl-tests)",
    ]
    cluster = ctx.cluster
    details: dict[str, object] = {"exposed_fraction": exposed, "straggler_wait_fraction": waiting}
    if cluster is not None:
        best = best_busbw(ctx.of(RankTrace), inter_node_from=cluster.gpus_per_node)
        if best is not None:
            value, sample, file = best
            nic = cluster.scale_out_bytes_per_s_per_gpu
            details["best_inter_node_busbw_bytes_per_s"] = value
            details["nic_bytes_per_s_per_gpu"] = nic
            evidence.insert(
                0,
                Evidence(
                    file,
                    f"fastest inter-node {sample.collective} ({units.format_bytes_si(sample.size_bytes)} over "
                    f"{sample.group_size} ranks): busbw {units.format_rate(value)} vs NIC {units.format_rate(nic)} per GPU",
                ),
            )
            if value < LOW_BUSBW_SHARE * nic:
                summary += (
                    f"; inter-node bus bandwidth reaches only {value / nic:.0%} of the NIC rate: the transport "
                    "is suspect (socket fallback, missing rails, no GPUDirect RDMA) before overlap"
                )
                fix.insert(
                    0,
                    "fix the transport first: NCCL_IB_HCA=mlx5_0,mlx5_1,... (every rail), NCCL_SOCKET_IFNAME only for bootstrap; confirm 'Using network IB' in NCCL_DEBUG=INFO",
                )
    return [
        Finding(
            id="exposed_communication",
            title=f"Exposed communication: {fraction:.0%} of each step",
            severity=severity_for(fraction),
            summary=summary,
            evidence=evidence,
            impact=ctx.impact(
                fraction,
                "median over ranks of communication with no concurrent compute / step time, less straggler wait",
            ),
            fix=fix,
            prevention=[
                "run nccl-tests all_reduce_perf across all nodes after every fabric change and compare busbw with the baseline",
                "keep NCCL_DEBUG=INFO output of the first job on new nodes and check transport lines",
            ],
            recoverable_fraction=fraction,
            mfu_after_fix=ctx.mfu_after(fraction),
            details=details,
        )
    ]
