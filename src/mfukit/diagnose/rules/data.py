"""``dataloader_stall``: the GPU idles while the training loop waits for the next batch.

From traces: the time the main thread spends in the data loader's ``__next__`` (``enumerate(DataLoader)``
spans) while the GPU has nothing to run — exposed data loading; data loading that overlaps GPU work
costs nothing and is not counted. From logs: a data time per step (mfukit train's ``data_time_s``,
Megatron's ``batch-generator`` timer) over the step time.
"""

from __future__ import annotations

from mfukit.diagnose.breakdown import job_fraction, median
from mfukit.diagnose.context import Context
from mfukit.diagnose.findings import WARNING_STEP_FRACTION, Evidence, Finding, severity_for
from mfukit.diagnose.records import LogEvent, TrainingLog

FIX = [
    "DataLoader(num_workers=8, pin_memory=True, prefetch_factor=4, persistent_workers=True): raise num_workers "
    "until data time stops falling (at most the CPU cores per GPU)",
    "Megatron-LM: --num-workers 8; torchtitan: [training] num_workers / prefetch in the dataset config",
    "find the slow part: py-spy top --pid <a DataLoader worker pid> (decode, augment, tokenize) and move it offline or to the GPU",
    "check storage: stage the dataset to local NVMe, or measure read throughput (fio --rw=randread) against the rate the job consumes",
]
PREVENTION = [
    "alert when data time exceeds 5 % of step time (torchtitan time_metrics/data_loading(%), Megatron batch-generator timer)",
    "size loader workers with the job: CPU cores per GPU >= num_workers + 2",
]


def _from_traces(ctx: Context) -> Finding | None:
    ranks = ctx.ranks
    if not ranks:
        return None
    fraction = job_fraction(ranks, "dataloader_exposed")
    waiting = job_fraction(ranks, "dataloader")
    if fraction < WARNING_STEP_FRACTION:
        return None
    worst = max(ranks, key=lambda r: r.fractions["dataloader_exposed"])
    evidence = [
        Evidence(
            r.file,
            f"DataLoader __next__ {r.medians_s['dataloader_s'] * 1e3:.1f} ms per step, "
            f"{r.medians_s['dataloader_exposed_s'] * 1e3:.1f} ms of it with the GPU idle "
            f"({r.fractions['dataloader_exposed']:.1%} of step time)",
            rank=r.rank,
            time_s=r.medians_s["dataloader_exposed_s"],
        )
        for r in sorted(ranks, key=lambda r: -r.fractions["dataloader_exposed"])[:8]
    ]
    return Finding(
        id="dataloader_stall",
        title=f"Data loader starves the GPU: {fraction:.0%} of each step",
        severity=severity_for(fraction),
        summary=(
            f"the training loop waits {waiting:.0%} of each step for the next batch; the GPU is idle for "
            f"{fraction:.0%} of the step because of it (worst rank {worst.rank}: {worst.fractions['dataloader_exposed']:.0%})"
        ),
        evidence=evidence,
        impact=ctx.impact(fraction, "median over ranks of data-loader time with the GPU idle / step time"),
        fix=FIX,
        prevention=PREVENTION,
        recoverable_fraction=fraction,
        mfu_after_fix=ctx.mfu_after(fraction),
        details={"dataloader_fraction": waiting, "exposed_fraction": fraction},
    )


def _from_logs(ctx: Context) -> Finding | None:
    for log in ctx.of(TrainingLog):
        pairs = [
            (s.data_time_s, s.step_time_s) for s in log.steps if s.data_time_s is not None and s.step_time_s
        ]
        timer = [e for e in log.events if isinstance(e, LogEvent) and dict(e.values).get("data_time_max_s")]
        steps = [s.step_time_s for s in log.steps if s.step_time_s]
        if pairs:
            fraction = sum(d for d, _ in pairs) / sum(t for _, t in pairs if t)
            what = f"data time {fraction:.0%} of step time over {len(pairs)} logged steps"
        elif timer and steps:
            fraction = median([dict(e.values)["data_time_max_s"] for e in timer]) / median(steps)
            what = f"Megatron batch-generator timer (slowest rank) {fraction:.0%} of the iteration time"
        else:
            continue
        if fraction < WARNING_STEP_FRACTION:
            continue
        return Finding(
            id="dataloader_stall",
            title=f"Data loading takes {fraction:.0%} of each step",
            severity=severity_for(fraction),
            summary=f"{what}; the GPU cannot work while the batch is not there",
            evidence=[Evidence(log.file, what)],
            impact=ctx.impact(
                fraction, "logged data time / step time (no trace: overlap with GPU work unknown)"
            ),
            fix=FIX,
            prevention=PREVENTION,
            recoverable_fraction=fraction,
            mfu_after_fix=ctx.mfu_after(fraction),
        )
    return None


def analyze(ctx: Context) -> list[Finding]:
    finding = _from_traces(ctx) or _from_logs(ctx)
    return [finding] if finding else []
