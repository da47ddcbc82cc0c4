"""``exposed_gradient_sync``: the gradient synchronisation a framework's own timers show outside compute.

Megatron-LM times ``all-grads-sync`` (2023: ``grads-all-reduce`` / ``grads-reduce-scatter``) after the
backward pass; with ``--overlap-grad-reduce`` the reduction runs inside the backward and this timer holds
only what is left over. DeepSpeed's ``wall_clock_breakdown`` prints ``bwd_allreduce``: the all-reduce inside
``backward`` at a gradient-accumulation boundary (the sum over the boundary's micro-steps), exposed unless
``overlap_comm`` hides it. Either is time every rank spends in a collective and not in compute.

Cost: the timer (median of its reports, the max across ranks where the log gives one) less what the
performance model of the job's layout leaves exposed for the same traffic (its ``dp_comm``), over today's
step. When the transport is at fault (a socket fallback, missing rails), that finding is the root cause and
this one its symptom (``explained_by``): it is not counted twice.
"""

from __future__ import annotations

from mfukit.diagnose.breakdown import median
from mfukit.diagnose.context import Context
from mfukit.diagnose.findings import Evidence, Finding, Impact, severity_for
from mfukit.diagnose.network import BANDWIDTH_CAUSES
from mfukit.diagnose.records import TrainingLog

TIMERS = {
    "all-grads-sync": "megatron",
    "grads-all-reduce": "megatron",
    "grads-reduce-scatter": "megatron",
    "bwd_allreduce": "deepspeed",
}
FIX = {
    "megatron": [
        "overlap the gradient reduction with the backward: --overlap-grad-reduce (with "
        "--use-distributed-optimizer also --overlap-param-gather); keep --ddp-bucket-size at its default or larger",
    ],
    "deepspeed": [
        'overlap the all-reduce with the backward: "zero_optimization": {"overlap_comm": true, '
        '"contiguous_gradients": true, "reduce_bucket_size": 5e8}',
        "fewer, larger reductions: raise gradient_accumulation_steps at the same global batch if memory allows",
    ],
}


def analyze(ctx: Context) -> list[Finding]:
    step = ctx.step_now_s
    for log in ctx.of(TrainingLog):
        for name, stack in TIMERS.items():
            values = log.timers_ms.get(name)
            if not values:
                continue
            sync_s = median(values) / 1e3
            if step is None or step <= 0:
                return []
            modelled_s = (ctx.expected.breakdown_s or {}).get("dp_comm", 0.0)
            recoverable = min(0.99, max(0.0, sync_s - modelled_s) / step)
            root = next((f.id for cause in BANDWIDTH_CAUSES for f in ctx.findings if f.id == cause), None)
            basis = (
                f"{name} {sync_s:.2f} s per step (the log's timer) less the {modelled_s:.2f} s the performance model "
                f"of the layout leaves exposed, over today's step of {step:.2f} s"
                if ctx.expected.breakdown_s is not None
                else f"{name} {sync_s:.2f} s per step (the log's timer) over today's step of {step:.2f} s"
            )
            impact = ctx.impact(recoverable, basis) if root is None else Impact(
                recoverable, None, f"counted in {root}, its cause: {basis}"
            )  # fmt: skip
            return [
                Finding(
                    id="exposed_gradient_sync",
                    title=f"Gradient sync outside compute: {name} {sync_s:.2f} s per step",
                    severity=severity_for(recoverable),
                    summary=f"{stack}'s {name} timer says every rank waits {sync_s:.2f} s per step for the "
                    f"gradient collectives ({sync_s / step:.0%} of the step), after the backward",
                    evidence=[
                        Evidence(
                            log.file, f"{name}: median {sync_s * 1e3:,.1f} ms over {len(values)} reports"
                        )
                    ],
                    impact=impact,
                    fix=FIX[stack],
                    prevention=[
                        "keep the framework's timers on (Megatron --timing-log-level 1, DeepSpeed "
                        "wall_clock_breakdown) and alert when the gradient sync passes 5 % of the step"
                    ],
                    recoverable_fraction=recoverable if root is None else None,
                    mfu_after_fix=ctx.mfu_after(recoverable) if root is None else None,
                    explained_by=root,
                    details={"timer": name, "sync_s": sync_s, "modelled_exposed_s": modelled_s},
                )
            ]
    return []
