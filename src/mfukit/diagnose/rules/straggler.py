"""``straggler_rank``: one rank arrives late at every collective while the others wait inside NCCL.

Judged from durations, which need no common clock across hosts: a collective kernel on a waiting rank
lasts until the last rank arrives, so the late rank's communication time per step is the shortest and
every other rank's is longer by the wait. wait = median(comm per step) - comm of the late rank; the job
loses that wait on every step. Its cause is read off the late rank's own breakdown: more compute (a
slow GPU: throttling, a degraded part) or more host wait (its CPU: contention, GC, NUMA, its data).
"""

from __future__ import annotations

from mfukit.diagnose.breakdown import RankSummary, median
from mfukit.diagnose.context import Context
from mfukit.diagnose.findings import Evidence, Finding, severity_for
from mfukit.diagnose.records import RankTrace

MIN_RANKS = 3
MIN_WAIT_FRACTION = 0.03
SPREAD_FACTOR = 3.0  # the late rank's lead must be this many times the others' spread


def analyze(ctx: Context) -> list[Finding]:
    ranks = [r for r in ctx.ranks if r.medians_s["comm_s"] > 0]
    if len(ranks) < MIN_RANKS or not one_job(ctx):
        return []
    comm = [r.medians_s["comm_s"] for r in ranks]
    typical = median(comm)
    step = median([r.step_s for r in ranks])
    late = min(ranks, key=lambda r: r.medians_s["comm_s"])
    wait = typical - late.medians_s["comm_s"]
    others = [c for r, c in zip(ranks, comm, strict=True) if r is not late]
    spread = median([abs(c - typical) for c in others])
    if step <= 0 or wait / step < MIN_WAIT_FRACTION or wait < SPREAD_FACTOR * spread:
        return []
    suspects = [r for r in ranks if typical - r.medians_s["comm_s"] >= 0.5 * wait]
    fraction = wait / step
    cause, fix = _cause(late, ranks)
    throttling = ctx.find("gpu_throttling")
    explained = None
    if throttling is not None and "compute" in cause:
        explained = "gpu_throttling"
    evidence = [
        Evidence(
            r.file,
            f"communication {r.medians_s['comm_s'] * 1e3:.1f} ms/step vs {typical * 1e3:.1f} ms median "
            f"(others wait for it); compute {r.medians_s['compute_s'] * 1e3:.1f} ms, "
            f"host wait {r.medians_s['host_wait_s'] * 1e3:.1f} ms",
            rank=r.rank,
            time_s=typical - r.medians_s["comm_s"],
        )
        for r in suspects[:8]
    ]
    names = ", ".join(str(r.rank) for r in suspects[:8])
    return [
        Finding(
            id="straggler_rank",
            title=f"Straggler: rank {names} makes every other rank wait {wait * 1e3:.0f} ms per step",
            severity=severity_for(fraction),
            summary=(
                f"rank {late.rank} reaches each collective last: the other {len(ranks) - 1} ranks spend "
                f"{wait * 1e3:.0f} ms of every {step * 1e3:.0f} ms step waiting in NCCL; {cause}"
                + (" — the throttled GPU found in telemetry explains it" if explained else "")
            ),
            evidence=evidence,
            impact=ctx.impact(fraction, "median wait of the other ranks inside collectives / median step"),
            fix=fix,
            prevention=[
                "watch per-rank step and compute times (Megatron --log-straggler, NVIDIA Resiliency Extension straggler detection) and drain hosts that fall behind",
                "run dcgmi diag -r 2 and a node health check (clocks, ECC, PCIe link width, NIC errors) in the Slurm prolog",
            ],
            recoverable_fraction=0.0 if explained else fraction,
            mfu_after_fix=None if explained else ctx.mfu_after(fraction),
            explained_by=explained,
            details={"ranks": [r.rank for r in suspects], "wait_s_per_step": wait},
        )
    ]


def one_job(ctx: Context) -> bool:
    """Traces compare across ranks only when they are one job's: distinct ranks, one world size."""
    traces = [t for t in ctx.of(RankTrace) if t.steps]
    ranks = [t.rank for t in traces if t.rank is not None]
    worlds = {t.world_size for t in traces if t.world_size}
    return len(ranks) == len(set(ranks)) and len(worlds) <= 1


def _cause(late: RankSummary, ranks: list[RankSummary]) -> tuple[str, list[str]]:
    compute = median([r.medians_s["compute_s"] for r in ranks])
    host = median([r.medians_s["host_wait_s"] for r in ranks])
    extra_compute = late.medians_s["compute_s"] - compute
    extra_host = late.medians_s["host_wait_s"] - host
    common = [
        f"find its node: the rank-to-host map of the job (e.g. srun -l hostname; rank {late.rank} // GPUs per node), "
        "then exclude it: sbatch --exclude=<node>, or drain it (scontrol update nodename=<node> state=drain)",
    ]
    if extra_compute >= extra_host:
        return (
            f"its kernels take {extra_compute * 1e3:.0f} ms longer per step (slow GPU: compute-bound straggler)",
            [
                *common,
                "on that node: nvidia-smi -q -d PERFORMANCE,CLOCK,ECC (throttle reasons, clocks, ECC) and dcgmi diag -r 3",
                "check its PCIe link: nvidia-smi -q | grep -A2 'Link Width' (x16 expected)",
            ],
        )
    return (
        f"its GPU waits {extra_host * 1e3:.0f} ms longer on its own CPU per step (host-bound: CPU contention, "
        "GC, NUMA placement or its data loading)",
        [
            *common,
            "on that node: top / pidstat -t for other processes; py-spy dump --pid <trainer pid> during a step",
            "bind ranks to their NUMA node: torchrun --numa-binding=node (PyTorch >= 2.11) or numactl --cpunodebind/--membind",
            "freeze GC across ranks: gc.disable() and gc.collect() every N steps on all ranks (torchtitan gc_freq, Megatron --manual-gc)",
        ],
    )
