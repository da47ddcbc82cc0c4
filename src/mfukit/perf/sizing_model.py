"""Sizing with the performance model's MFU: the planner's best layout at each GPU count, the smallest count
that meets the deadline with it, and the goodput of that count (the fault-tolerance model's expected ETTR
when the scenario gives a failure model); and the sizing at an assumed, constant MFU."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from mfukit.core.results import ProgressCallback
from mfukit.errors import InputError
from mfukit.perf.efficiency import beyond_measured, efficiency_for
from mfukit.perf.estimate import plan_memory
from mfukit.perf.inputs import PerfInputs, search_space
from mfukit.perf.planner import Plan, search
from mfukit.perf.scaling import smallest_count
from mfukit.perf.sizing import Candidate, Sizing, SizingInputs, check_fixed_degrees, finish, size

GoodputOf = Callable[[int, float], tuple[float, str]]
"""(GPU count, step time in s) -> (goodput, how it was found)"""


def size_by_model(
    base: SizingInputs, perf: PerfInputs, goodput: GoodputOf, progress: ProgressCallback | None = None
) -> tuple[Sizing, str]:
    """The sizing at the planner's predicted MFU (``base.mfu`` only guesses where to start) and how the
    goodput was found."""
    check_fixed_degrees(base)
    space = search_space(perf)
    workload, system, accelerator = perf.workload, perf.system, perf.accelerator
    plan: Plan | None
    why_not: list[str] = []
    if base.num_gpus is not None:
        result = search(
            workload, system, accelerator, [base.num_gpus], space=space, tokens=base.tokens, top_k=1
        )
        plan = result.best_per_count[base.num_gpus]
        if plan is None:
            why_not.append(result.nothing_fits(workload, base.num_gpus))
        searched = result.configs_evaluated
    else:
        if base.deadline_s is None:
            raise InputError(
                "needs a deadline or a GPU count",
                field="training.deadline",
                hint='e.g. training.deadline = "14d"',
            )
        found = smallest_count(
            workload,
            system,
            accelerator,
            tokens=base.tokens,
            deadline_s=base.deadline_s,
            space=space,
            goodput=lambda count, plan: goodput(count, plan.step_time_s)[0],
            mfu_guess=base.mfu,
            progress=progress,
        )
        plan = found.chosen
        why_not.extend(found.why_not)
        searched = sum(result.configs_evaluated for result in found.evaluated.values())
    if plan is None:
        return finish(base, None, why_not), ""
    rate, how = goodput(plan.num_gpus, plan.step_time_s)
    efficiency = efficiency_for(accelerator, workload.framework)
    source = (
        f"performance model: the best of {searched:,} layouts evaluated, at {plan.num_gpus:,} GPUs "
        f"({'; '.join(efficiency.notes)})"
    )
    sized = replace(
        base,
        mfu=plan.mfu,
        mfu_source=source,
        goodput=rate,
        num_gpus=base.num_gpus,
        model_warnings=tuple(
            note
            for note in (
                plan.batch_note(workload),
                beyond_measured(efficiency, plan.mfu, workload.precision),
                *why_not,  # a deadline search cut short says so (a fixed count that fits leaves none)
            )
            if note
        ),
    )
    memory = plan_memory(workload, plan, system.gpus_per_node)
    chosen = Candidate(plan.layout, memory, plan.num_microbatches)
    return finish(replace(sized, micro_batch_size=plan.micro_batch_size), chosen, []), how


def size_at_constant_mfu(inputs: SizingInputs, goodput: GoodputOf) -> tuple[Sizing, str]:
    """Size at the given MFU; with a failure model, re-sized once at the expected ETTR of the count found."""
    first = size(inputs)
    if first.chosen is None or first.step_s is None:
        return first, goodput(inputs.num_gpus or 1, 0.0)[1] if inputs.num_gpus else "flat goodput allowance"
    rate, how = goodput(first.gpus, first.step_s)
    if rate == inputs.goodput:
        return first, how
    return size(replace(inputs, goodput=rate)), how


def constant_mfu_rule(inputs: SizingInputs, *, micro_batch_given: bool) -> str:
    """How the layout is chosen at an assumed MFU (the output's first assumption)."""
    return (
        "layout at the assumed MFU: the fewest GPUs, then the least model parallelism; micro-batch size "
        f"{inputs.micro_batch_size} ("
        + ("given" if micro_batch_given else "default, --micro-batch-size")
        + "); given [parallelism] knobs fixed, the rest at the planning defaults below"
    )
