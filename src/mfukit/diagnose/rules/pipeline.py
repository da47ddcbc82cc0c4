"""``stage_imbalance`` and ``pipeline_bubble``: pipeline-parallel time lost to the schedule and to uneven stages.

With p stages, m micro-batches per step and per-micro-batch stage time t_s, a 1F1B (or GPipe) step
takes T = sum_s t_s + (m - 1) max_s t_s: the pipeline fills and drains through every stage once and
runs at the pace of the slowest stage in between. Balanced stages (t_s = mean t) give
T_bal = (m + p - 1) mean t, whose idle share (p - 1)/(m + p - 1) is the bubble (GPipe, Huang et al.
2019; Narayanan et al. SC21 §2.2). T / T_bal is the slowdown from imbalance; interleaving v model
chunks per stage divides the bubble by v (Narayanan et al. SC21, §2.2.2).

Stages come from a per-stage timeline (Megatron timers, StragglerAnalysis traces) or, for Kineto
traces, from the layout (``--pp`` with Megatron's rank order: tp fastest, then cp, dp, pp slowest).
"""

from __future__ import annotations

from collections import defaultdict

from mfukit.diagnose.breakdown import median
from mfukit.diagnose.context import Context
from mfukit.diagnose.findings import WARNING_STEP_FRACTION, Evidence, Finding, severity_for
from mfukit.diagnose.records import PipelineTimeline
from mfukit.diagnose.whatif import WhatIf, analyse

CAUSE_FINDING = {
    "stage partitioning": "stage_imbalance",
    "slow worker": "straggler_rank",
    "sequence-length imbalance": "sequence_length_imbalance",
    "communication": "straggler_communication",
}
CAUSE_FIX = {
    "stage partitioning": [
        "move layers off the slow stage: Megatron --decoder-last-pipeline-num-layers N (or "
        "--decoder-first-pipeline-num-layers), or a custom pipeline split (torchtitan pipeline_parallel_split_points)",
        "account for the embedding/output layer and loss on the first/last stage: Megatron "
        "--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split",
    ],
    "slow worker": [
        "find the node of the named rank (its hostname in the job's NCCL_DEBUG=INFO lines) and check it: "
        "nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER; dcgmi diag -r 3",
        "then exclude it: sbatch --exclude=<node>, or drain it (scontrol update nodename=<node> state=drain)",
    ],
    "sequence-length imbalance": [
        "balance the tokens (and the attention cost, sum of squared lengths) per DP rank: pack sequences to the "
        "context length, or sort and bucket by length before sharding the global batch across DP ranks",
        "with variable lengths, shard by tokens, not by sequences (a length-balanced sampler)",
    ],
    "communication": [
        "check the transport of the slow collective: NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET",
        "measure the fabric: all_reduce_perf -b 8 -e 8G -f 2 -g 1 (nccl-tests) across the job's nodes",
    ],
}

INTERLEAVE = 2  # the virtual stages the fix proposes
IMBALANCE_RATIO = 1.05  # slowest stage 5 % above the mean


def step_times(stage_s: list[float], microbatches: int) -> tuple[float, float]:
    """(T with these stage times, T with the same work balanced), for one step of ``microbatches``."""
    per_microbatch = [t / microbatches for t in stage_s]
    actual = sum(per_microbatch) + (microbatches - 1) * max(per_microbatch)
    mean = sum(per_microbatch) / len(per_microbatch)
    balanced = (microbatches + len(stage_s) - 1) * mean
    return actual, balanced


def _stages_from_timeline(timeline: PipelineTimeline) -> tuple[list[float], float]:
    per_stage: dict[int, list[float]] = defaultdict(list)
    steps: list[float] = []
    for phase in timeline.phases:
        per_stage[phase.stage].append(phase.compute_s)
        steps.append(phase.step_s)
    return [median(per_stage[s]) for s in sorted(per_stage)], median(steps)


def _stages_from_traces(ctx: Context) -> tuple[list[float], float, int] | None:
    layout = ctx.parallelism
    if layout is None or layout.pp <= 1 or not ctx.ranks:
        return None
    per_stage_ranks = layout.tp * layout.cp * layout.dp
    per_stage: dict[int, list[float]] = defaultdict(list)
    for rank in ctx.ranks:
        stage = rank.rank // per_stage_ranks
        if stage < layout.pp:
            per_stage[stage].append(rank.medians_s["compute_s"])
    if len(per_stage) < 2:
        return None
    microbatches = _microbatches(ctx)
    return (
        [median(per_stage[s]) for s in sorted(per_stage)],
        median([r.step_s for r in ctx.ranks]),
        microbatches,
    )


def _microbatches(ctx: Context) -> int:
    layout, training = ctx.parallelism, ctx.training
    if layout is None or training is None or training.global_batch_sequences is None:
        return 0
    return max(1, training.global_batch_sequences // (layout.dp * training.micro_batch_size))


def analyze(ctx: Context) -> list[Finding]:
    findings: list[Finding] = []
    for timeline in ctx.of(PipelineTimeline):
        replayed = _what_if(ctx, timeline)
        if replayed is not None:
            findings.extend(replayed)
            continue
        if timeline.num_stages >= 2 and timeline.num_microbatches >= 1:
            stages, step = _stages_from_timeline(timeline)
            findings += _judge(
                ctx, stages, step, timeline.num_microbatches, timeline.file, "per-stage timeline"
            )
    traced = _stages_from_traces(ctx)
    if traced is not None:
        stages, step, microbatches = traced
        if microbatches == 0:
            ctx.assumptions.append(
                "pipeline micro-batches unknown (give global_batch_size, micro_batch_size and dp): "
                "stage imbalance judged in steady state (m large), bubble not sized"
            )
            microbatches = 10**6
        findings += _judge(ctx, stages, step, microbatches, ctx.ranks[0].file, "traces with --pp layout")
    return findings


def _judge(
    ctx: Context, stages: list[float], step: float, microbatches: int, file: str, basis: str
) -> list[Finding]:
    findings: list[Finding] = []
    p, m = len(stages), microbatches
    actual, balanced = step_times(stages, m)
    mean = sum(stages) / p
    slowest = max(range(p), key=lambda s: stages[s])
    ratio = stages[slowest] / mean
    evidence = [
        Evidence(file, f"stage {s}: compute {t * 1e3:.0f} ms per step ({t / mean:.2f}x the mean)")
        for s, t in enumerate(stages)
    ]
    if ratio >= IMBALANCE_RATIO and step > 0:
        fraction = min(1.0, (actual - balanced) / step)
        if fraction >= WARNING_STEP_FRACTION:
            last = slowest == p - 1
            findings.append(
                Finding(
                    id="stage_imbalance",
                    title=f"Pipeline stage {slowest} of {p} is {ratio:.2f}x the mean: the pipeline runs {actual / balanced:.2f}x slower than balanced",
                    severity=severity_for(fraction),
                    summary=(
                        f"{'the last' if last else 'stage ' + str(slowest)} stage computes {ratio:.2f}x the mean "
                        f"per step; with {m if m < 10**6 else 'many'} micro-batches the step takes "
                        f"{actual / balanced:.2f}x what balanced stages would"
                        + (" (the last stage also holds the output layer and the loss)" if last else "")
                    ),
                    evidence=evidence,
                    impact=ctx.impact(
                        fraction, f"(T - T_balanced) / step time, T = sum t_s + (m-1) max t_s ({basis})"
                    ),
                    fix=[
                        "move layers off the slow stage: Megatron --decoder-last-pipeline-num-layers N (or --decoder-first-pipeline-num-layers), "
                        "or a custom pipeline split (torchtitan pipeline_parallel_split_points)",
                        "account for the embedding/output layer and loss on the first/last stage: Megatron --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split",
                        "re-profile one step per stage after the change and compare stage compute times",
                    ],
                    prevention=[
                        "check per-stage forward/backward times (Megatron --timing-log-level 2) whenever the model or pp changes"
                    ],
                    recoverable_fraction=fraction,
                    mfu_after_fix=ctx.mfu_after(fraction),
                    details={
                        "stage_compute_s": stages,
                        "slowdown_vs_balanced": actual / balanced,
                        "slowest_stage": slowest,
                    },
                )
            )
    if m < 10**6 and step > 0:
        bubble_s = (p - 1) * mean / m
        fraction = min(1.0, bubble_s / step)
        if fraction >= WARNING_STEP_FRACTION:
            recoverable = fraction * (1.0 - 1.0 / INTERLEAVE)
            findings.append(
                Finding(
                    id="pipeline_bubble",
                    title=f"Pipeline bubble: {fraction:.0%} of each step ({p} stages, {m} micro-batches)",
                    severity=severity_for(fraction),
                    summary=(
                        f"filling and draining {p} stages idles each stage (p-1)/(m+p-1) = {(p - 1) / (m + p - 1):.0%} "
                        f"of the pipeline time with {m} micro-batches per step"
                    ),
                    evidence=[
                        Evidence(
                            file,
                            f"{p} stages, {m} micro-batches per step, {mean / m * 1e3:.0f} ms per micro-batch per stage",
                        )
                    ],
                    impact=ctx.impact(fraction, "(p-1) x mean micro-batch stage time / step time"),
                    fix=[
                        f"interleaved 1F1B: Megatron --num-layers-per-virtual-pipeline-stage (v={INTERLEAVE} halves the bubble)",
                        f"more micro-batches per step: m >= 4p = {4 * p} (smaller --micro-batch-size at the same global batch)",
                        "or fewer stages: trade pp for tp/dp where memory allows",
                    ],
                    prevention=["plan pp with m >= 4p (mfukit plan reports the bubble of each layout)"],
                    recoverable_fraction=recoverable,
                    mfu_after_fix=ctx.mfu_after(recoverable),
                    details={
                        "stages": p,
                        "microbatches": m,
                        "bubble_fraction_of_pipeline": (p - 1) / (m + p - 1),
                    },
                )
            )
    return findings


def _what_if(ctx: Context, timeline: PipelineTimeline) -> list[Finding] | None:
    """The straggler slowdown of a per-op timeline by what-if replay (:mod:`..whatif`), as the finding of its
    cause; None when the timeline holds no op spans (the analytic bound then stands in)."""
    if timeline.ops is None:
        return None
    try:
        found = analyse(timeline.ops)
    except ValueError as error:
        ctx.assumptions.append(
            f"{timeline.file}: no what-if replay ({error}); stage balance judged analytically"
        )
        return None
    lost = 1.0 - 1.0 / found.slowdown  # share of today's step the stragglers cost
    if found.cause == "none" or lost < WARNING_STEP_FRACTION:
        return []
    share = {"stage partitioning": found.stage_metric, "slow worker": found.worker_metric}.get(
        found.cause, 1.0
    )
    recoverable = max(0.0, min(1.0, share)) * lost
    return [_what_if_finding(ctx, timeline.file, found, lost, recoverable)]


def _what_if_finding(ctx: Context, file: str, found: WhatIf, lost: float, recoverable: float) -> Finding:
    last = max(found.by_stage)
    slowest = max(found.by_stage, key=lambda s: found.by_stage[s])
    evidence = [
        Evidence(file, f"what-if replay: mean step {found.step_s.mean():.3f} s with the traced durations, "
                 f"{found.ideal_step_s.mean():.3f} s with ideal ones (replay within {found.replay_error:.1%} of the trace)"),
        *(Evidence(file, f"stage {s}: {v:.3f}x when only its ops keep their traced durations") for s, v in
          sorted(found.by_stage.items())),
        *(Evidence(file, f"DP rank {d}: {v:.3f}x", rank=d) for d, v in sorted(found.by_dp_rank.items())),
        Evidence(file, f"M_s (last stage) {found.stage_metric:.2f}, M_w (worst worker DP {found.worst_worker[0]} "
                 f"stage {found.worst_worker[1]}) {found.worker_metric:.2f}"),
    ]  # fmt: skip
    summary = (
        f"the job runs {found.slowdown:.3f}x slower than with every op at its ideal duration (what-if replay of "
        f"{len(found.steps)} steps); the cause is {found.cause}: {found.named}"
        + (
            " (the last stage also holds the output layer and the loss)"
            if found.cause == "stage partitioning"
            else ""
        )
    )
    return Finding(
        id=CAUSE_FINDING[found.cause],
        title=f"Stragglers: {found.slowdown:.2f}x slower than ideal, {found.cause} ({found.named})",
        severity=severity_for(lost),
        summary=summary,
        evidence=evidence,
        impact=ctx.impact(
            recoverable,
            "what-if replay (Lin et al., OSDI '25): 1 - T_ideal / T, times the share the named group's ideal "
            "durations remove",
        ),
        fix=[
            *CAUSE_FIX[found.cause],
            "re-profile after the change and compare the per-stage and per-rank times (Megatron --timing-log-level 2)",
        ],
        prevention=[
            "replay a few steps' per-op timers in every long job's first hour (mfukit diagnose on the "
            "timeline) and alert when the what-if slowdown passes 1.05x"
        ],
        recoverable_fraction=recoverable,
        mfu_after_fix=ctx.mfu_after(recoverable),
        details={
            "method": "what-if replay",
            "slowdown": found.slowdown,
            "slowdown_vs_balanced": found.by_stage[last]
            if found.cause == "stage partitioning"
            else found.slowdown,
            "by_dp_rank": found.by_dp_rank,
            "by_stage": found.by_stage,
            "by_optype": found.by_optype,
            "stage_metric": found.stage_metric,
            "worker_metric": found.worker_metric,
            "worst_worker": list(found.worst_worker),
            "cause": found.cause,
            "slowest_stage": slowest,
            "replay_error": found.replay_error,
        },
    )
