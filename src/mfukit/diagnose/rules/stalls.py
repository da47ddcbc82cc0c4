"""``checkpoint_stall`` and ``gc_pause``: periodic or sporadic steps far slower than the rest.

Step times come from the training log. A spike is a step (or logging interval) more than
``SPIKE_FACTOR`` x the median. Spikes at a fixed stride, or next to a checkpoint-save line, are
checkpoint stalls; Megatron (and ``mfukit train``) leave saves out of the logged step time, so the
wall-clock stamps are compared with the reported times and the difference is the stall (``mfukit train``'s
saves come from its goodput ledger). Spikes with GC lines (torchtitan ``[GC]``), or GC spans in traces,
are GC pauses; other sporadic spikes are reported as suspected GC pauses.
Async checkpointing cut a 7B model's blocking save from 148.8 s to 6.3 s (PyTorch blog "Reducing
checkpointing times by over 10x with PyTorch Distributed Asynchronous Checkpointing", 2024): the fix
recovers 1 - 6.3/148.8 = 96 % of the stall.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from mfukit import units
from mfukit.diagnose.breakdown import job_fraction, median
from mfukit.diagnose.context import Context
from mfukit.diagnose.findings import WARNING_STEP_FRACTION, Evidence, Finding, severity_for
from mfukit.diagnose.records import LogEvent, PipelineTimeline, StepRecord, TrainingLog

SPIKE_FACTOR = 1.5
ASYNC_RECOVERY = 1.0 - 6.3 / 148.8
MIN_PERIODIC = 3


@dataclass(frozen=True)
class Stall:
    step: int
    extra_s: float


def _stalls(log: TrainingLog) -> tuple[list[Stall], float, float]:
    """Stalls (extra seconds over the median step, per spike), the median step time, the total time."""
    timed = [s for s in log.steps if s.step_time_s is not None and s.rank in (None, 0)]
    if len(timed) < 5:
        return [], 0.0, 0.0
    typical = median([s.step_time_s for s in timed if s.step_time_s is not None])
    stalls: list[Stall] = []
    total = 0.0
    previous: StepRecord | None = None
    for record in timed:
        per_step = record.step_time_s or 0.0
        interval_s = per_step * record.interval_steps
        extra = (per_step - typical) * record.interval_steps if per_step > SPIKE_FACTOR * typical else 0.0
        window = interval_s
        if previous is not None and previous.wall_s is not None and record.wall_s is not None:
            elapsed = record.wall_s - previous.wall_s
            unaccounted = elapsed - interval_s
            if unaccounted > (SPIKE_FACTOR - 1.0) * typical:
                extra = max(extra, unaccounted)
            window = max(interval_s, elapsed)
        total += window
        if extra > 0:
            stalls.append(Stall(record.step, extra))
        previous = record
    return stalls, typical, total


def _stride(steps: list[int]) -> int | None:
    if len(steps) < MIN_PERIODIC:
        return None
    gaps = [b - a for a, b in itertools.pairwise(steps)]
    common = median([float(g) for g in gaps])
    if common > 0 and sum(1 for g in gaps if abs(g - common) <= 0.1 * common) >= 0.8 * len(gaps):
        return int(common)
    return None


def analyze(ctx: Context) -> list[Finding]:
    findings: list[Finding] = []
    for log in ctx.of(TrainingLog):
        stalls, typical, total = _stalls(log)
        saves = sorted({e.step for e in log.events if e.kind == "checkpoint" and e.step is not None})
        gcs = [e for e in log.events if e.kind == "gc"]
        if not stalls or total <= 0:
            continue
        near_save = [s for s in stalls if any(abs(s.step - save) <= _interval(log) for save in saves)]
        stride = _stride([s.step for s in stalls])
        checkpoint = near_save or (stalls if stride else [])
        other = [s for s in stalls if s not in checkpoint]
        if checkpoint:
            findings.append(_checkpoint(ctx, log, checkpoint, typical, total, saves, stride))
        if other and (gcs or len(other) >= MIN_PERIODIC):
            findings.append(_gc(ctx, log, other, gcs, typical, total))
        break
    findings.extend(_gc_from_traces(ctx, findings))
    return [
        f
        for f in findings
        if (f.impact.step_fraction or 0.0) >= WARNING_STEP_FRACTION or f.severity == "error"
    ]


def _interval(log: TrainingLog) -> int:
    intervals = [s.interval_steps for s in log.steps]
    return max(intervals) if intervals else 1


def _checkpoint(
    ctx: Context,
    log: TrainingLog,
    stalls: list[Stall],
    typical: float,
    total: float,
    saves: list[int],
    stride: int | None,
) -> Finding:
    stalled = sum(s.extra_s for s in stalls)
    fraction = stalled / total
    per_save = stalled / len(stalls)
    # the logged saves' own spacing when there are saves (stalls may land on the steps after a save too)
    every = _stride(saves) or (saves[1] - saves[0] if len(saves) > 1 else None) or stride
    recoverable = fraction * ASYNC_RECOVERY
    return Finding(
        id="checkpoint_stall",
        title=f"Checkpoint stalls: {units.format_duration(per_save)} per save{f' every {every} steps' if every else ''}, {fraction:.0%} of the time",
        severity=severity_for(fraction),
        summary=(
            f"{len(stalls)} stalls of {units.format_duration(per_save)} on average (a normal step takes {typical:.2f} s)"
            + (
                " at the logged checkpoint saves"
                if saves
                else " at a fixed stride (checkpoint saves or evaluation)"
            )
            + "; training stops while the checkpoint is written"
        ),
        evidence=[
            Evidence(
                log.file,
                f"step {s.step}: {s.extra_s:.1f} s beyond a normal step",
                step=s.step,
                time_s=s.extra_s,
            )
            for s in stalls[:10]
        ],
        impact=ctx.impact(fraction, "stall seconds / wall time of the logged window"),
        fix=[
            'save asynchronously: torch.distributed.checkpoint.async_save (PyTorch >= 2.3); Megatron --async-save --ckpt-format torch_dist; torchtitan [checkpoint] async_mode = "async"',
            "write to node-local NVMe first and copy to the parallel file system in the background",
            "set the interval from the failure rate, not by habit: Young's optimum sqrt(2 x save time x MTBF) (mfukit ft plan)",
        ],
        prevention=[
            "track blocking save time per checkpoint (Megatron save-checkpoint timer) and alert when it exceeds 2x a step's compute"
        ],
        recoverable_fraction=recoverable,
        mfu_after_fix=ctx.mfu_after(recoverable),
        details={"stall_s_per_save": per_save, "saves": len(stalls), "interval_steps": every},
    )


def _gc(
    ctx: Context, log: TrainingLog, stalls: list[Stall], gcs: list[LogEvent], typical: float, total: float
) -> Finding:
    stalled = sum(s.extra_s for s in stalls)
    fraction = stalled / total
    suspected = not gcs
    return Finding(
        id="gc_pause",
        title=("Suspected " if suspected else "")
        + f"GC pauses: {len(stalls)} sporadic slow steps, {fraction:.1%} of the time",
        severity="info" if suspected and fraction < 0.15 else severity_for(fraction),
        summary=(
            f"{len(stalls)} steps take {SPIKE_FACTOR}x or more of the {typical:.2f} s median at no fixed stride"
            + (
                "; no GC lines in the log: a Python GC pass on one rank stalls all others in NCCL, confirm with gc.callbacks timing"
                if suspected
                else f"; {len(gcs)} GC passes logged"
            )
        ),
        evidence=[
            Evidence(log.file, f"step {s.step}: {s.extra_s:.2f} s beyond a normal step", step=s.step)
            for s in stalls[:10]
        ],
        impact=ctx.impact(fraction, "extra seconds of the slow steps / wall time of the logged window"),
        fix=[
            "take GC off the critical path on all ranks at once: gc.disable() at start, gc.collect() every N steps (torchtitan [training] gc_freq = 50; Megatron --manual-gc --manual-gc-interval 100)",
            "gc.freeze() after model setup so long-lived objects leave the collected generations",
        ],
        prevention=["log per-step time on every rank and alert on downward MFU spikes"],
        recoverable_fraction=fraction,
        mfu_after_fix=ctx.mfu_after(fraction),
    )


def _gc_from_traces(ctx: Context, found: list[Finding]) -> list[Finding]:
    if any(f.id == "gc_pause" for f in found):
        return []
    fraction = job_fraction(ctx.ranks, "gc_exposed") if ctx.ranks else 0.0
    timelines = ctx.of(PipelineTimeline)
    if fraction < WARNING_STEP_FRACTION and not timelines:
        return []
    if fraction < WARNING_STEP_FRACTION:
        return []
    return [
        Finding(
            id="gc_pause",
            title=f"GC pauses: {fraction:.0%} of each step with the GPU idle",
            severity=severity_for(fraction),
            summary="Python garbage collection spans in the traces leave the GPU without work",
            evidence=[
                Evidence(r.file, f"GC with GPU idle {r.fractions['gc_exposed']:.1%} of step", rank=r.rank)
                for r in ctx.ranks[:6]
            ],
            impact=ctx.impact(fraction, "median over ranks of GC time with the GPU idle / step time"),
            fix=[
                "gc.disable() and gc.collect() every N steps on all ranks (torchtitan gc_freq, Megatron --manual-gc)"
            ],
            prevention=["keep GC scheduled, never automatic, in long training jobs"],
            recoverable_fraction=fraction,
            mfu_after_fix=ctx.mfu_after(fraction),
        )
    ]
