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
from mfukit.diagnose.whatif import ChainWhatIf, chain_analyse

MIN_RANKS = 3
MIN_WAIT_FRACTION = 0.03
SPREAD_FACTOR = 3.0  # the late rank's lead must be this many times the others' spread


def analyze(ctx: Context) -> list[Finding]:
    found = _by_durations(ctx)
    replayed = _what_if(ctx)
    if replayed is None:
        return found
    if found:  # the what-if replay backs the duration-based finding with its slowdown and per-rank shares
        found[0].details["what_if"] = _what_if_details(replayed)
        found[0].evidence.insert(0, _what_if_evidence(replayed))
        return found
    lost = 1.0 - 1.0 / replayed.slowdown
    if replayed.cause == "none" or lost < MIN_WAIT_FRACTION:
        return []
    return [_what_if_finding(ctx, replayed, lost)]


def _what_if(ctx: Context) -> ChainWhatIf | None:
    """The what-if replay of the traced ranks' collective chains (one job's traces only)."""
    traces = [t for t in ctx.of(RankTrace) if t.rank is not None and t.chains]
    if len(traces) < 2 or not one_job(ctx):
        return None
    return chain_analyse({t.rank: t.chains for t in traces if t.rank is not None})


def _what_if_details(found: ChainWhatIf) -> dict[str, object]:
    return {"method": "what-if replay of the collectives", "slowdown": found.slowdown, "straggler": found.straggler,
            "by_rank": found.by_rank, "persistence": found.persistence, "cause": found.cause,
            "steps": found.steps, "collectives_per_step": found.collectives_per_step}  # fmt: skip


def _what_if_evidence(found: ChainWhatIf) -> Evidence:
    return Evidence(
        "what-if replay",
        f"the traced ranks run {found.slowdown:.2f}x slower than with every rank at the mean time between "
        f"its {found.collectives_per_step} collectives per step ({found.steps} steps); rank {found.straggler} "
        f"alone at its traced times gives {found.by_rank[found.straggler]:.2f}x; it is the slowest rank in "
        f"{found.persistence:.0%} of the steps",
        rank=found.straggler,
    )


def _what_if_finding(ctx: Context, found: ChainWhatIf, lost: float) -> Finding:
    slow_worker = found.cause == "slow worker"
    share = (found.by_rank[found.straggler] - 1.0) / (found.slowdown - 1.0) if slow_worker else 1.0
    recoverable = lost * min(1.0, share)
    fix = (
        [f"find rank {found.straggler}'s node (srun -l hostname; rank // GPUs per node) and check it: nvidia-smi -q "
         "-d PERFORMANCE,CLOCK,ECC, dcgmi diag -r 3; then sbatch --exclude=<node> or scontrol update "
         "nodename=<node> state=drain"]
        if slow_worker
        else ["balance the tokens per DP rank: pack sequences to the context length, or bucket by length and "
              "shard the global batch by tokens (a length-balanced sampler), not by sequences"]
    )  # fmt: skip
    return Finding(
        id="straggler_rank" if slow_worker else "sequence_length_imbalance",
        title=(
            f"Straggler: rank {found.straggler} slows the job {found.slowdown:.2f}x (what-if replay)"
            if slow_worker
            else f"Uneven load across DP ranks slows the job {found.slowdown:.2f}x (what-if replay)"
        ),
        severity=severity_for(lost),
        summary=(
            f"the job runs {found.slowdown:.2f}x slower than with every rank at the mean time between collectives; "
            + (
                f"rank {found.straggler} is the slowest in {found.persistence:.0%} of the steps (a slow worker)"
                if slow_worker
                else f"the slowest rank changes from step to step (rank {found.straggler} only in "
                f"{found.persistence:.0%} of them): the load moves, as uneven sequence lengths do"
            )
        ),
        evidence=[_what_if_evidence(found)],
        impact=ctx.impact(
            recoverable,
            "what-if replay (Lin et al., OSDI '25): 1 - T_ideal / T, times the share the named rank explains",
        ),
        fix=fix,
        prevention=[
            "replay a few profiled steps of every long job (mfukit diagnose on the ranks' traces) and "
            "alert when the what-if slowdown passes 1.05x"
        ],
        recoverable_fraction=recoverable,
        mfu_after_fix=ctx.mfu_after(recoverable),
        details={**_what_if_details(found), "ranks": [found.straggler]},
    )


def _by_durations(ctx: Context) -> list[Finding]:
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
