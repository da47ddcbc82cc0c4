"""``exposed_communication``: collectives the GPU waits for with no compute to hide them.

Exposed communication = time a communication kernel runs while no compute kernel does. Waiting for a
straggler also shows up as exposed communication on every other rank; that part belongs to
``straggler_rank`` and is taken out here. The bus bandwidth the fastest large inter-node collective
reached is compared with what comm's collective model says the cluster gives (:mod:`..network`): far
below it points at the transport (socket fallback, missing rails), not at overlap; when the network
rules found such a fault, this finding is its symptom (``explained_by``).
"""

from __future__ import annotations

from mfukit import units
from mfukit.diagnose.breakdown import job_fraction
from mfukit.diagnose.context import Context
from mfukit.diagnose.findings import WARNING_STEP_FRACTION, Evidence, Finding, severity_for
from mfukit.diagnose.network import BANDWIDTH_CAUSES, best_traced, expected_busbw
from mfukit.diagnose.records import RankTrace

LOW_BUSBW_SHARE = 0.5  # below half the bus bandwidth the model expects, the transport is suspect
# How to see and measure the transport: the same two steps close every network finding's fix.
CHECK_TRANSPORT = (
    "check the transport each rank uses: NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET; expect 'NET/IB ... GDRDMA', "
    "not 'NET/Socket'"
)
MEASURE_FABRIC = "measure the fabric: srun -N <nodes> --ntasks-per-node=8 all_reduce_perf -b 8 -e 8G -f 2 -g 1 (nccl-tests)"


def exposed_share(ctx: Context) -> tuple[float, float, float]:
    """(exposed communication less straggler wait, exposed communication, straggler wait), as shares
    of the step: the median rank's."""
    exposed = job_fraction(ctx.ranks, "comm_exposed") if ctx.ranks else 0.0
    straggler = ctx.find("straggler_rank")
    waiting = (straggler.impact.step_fraction or 0.0) if straggler else 0.0
    return max(0.0, exposed - waiting), exposed, waiting


def analyze(ctx: Context) -> list[Finding]:
    ranks = ctx.ranks
    if not ranks:
        return []
    fraction, exposed, waiting = exposed_share(ctx)
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
        CHECK_TRANSPORT,
        MEASURE_FABRIC,
    ]
    cluster = ctx.cluster
    details: dict[str, object] = {"exposed_fraction": exposed, "straggler_wait_fraction": waiting}
    load = ctx.gradient
    if cluster is not None:
        best = best_traced(ctx.of(RankTrace), wider_than=cluster.gpus_per_node)
        expected = expected_busbw(cluster, load) if load is not None else None
        if best is not None:
            value, sample, file = best
            details["best_inter_node_busbw_bytes_per_s"] = value
            against = ""
            if expected is not None:
                details["expected_busbw_bytes_per_s"] = expected.busbw_bytes_per_s
                against = f" vs {units.format_rate(expected.busbw_bytes_per_s)} expected ({expected.source})"
            evidence.insert(
                0,
                Evidence(
                    file,
                    f"fastest inter-node {sample.collective} ({units.format_bytes_si(sample.size_bytes)} over "
                    f"{sample.group_size} ranks): busbw {units.format_rate(value)}{against}",
                ),
            )
            if expected is not None and value < LOW_BUSBW_SHARE * expected.busbw_bytes_per_s:
                summary += (
                    f"; inter-node bus bandwidth reaches only {value / expected.busbw_bytes_per_s:.0%} of what "
                    "the cluster should give: the transport is suspect (socket fallback, missing rails, no "
                    "GPUDirect RDMA) before overlap"
                )
                fix.insert(
                    0,
                    "fix the transport first: NCCL_IB_HCA=mlx5_0,mlx5_1,... (every rail), NCCL_SOCKET_IFNAME only "
                    "for bootstrap; confirm 'Using network IB' in NCCL_DEBUG=INFO",
                )
    root = ctx.find_first(BANDWIDTH_CAUSES)
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
            recoverable_fraction=0.0 if root else fraction,
            mfu_after_fix=None if root else ctx.mfu_after(fraction),
            explained_by=root.id if root else None,
            details=details,
        )
    ]
