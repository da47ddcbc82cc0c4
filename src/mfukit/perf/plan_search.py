"""The search ``mfukit plan`` runs: the GPU count (given, or the smallest that meets the deadline), the
best layouts on it, and the best layout at the counts around it (the scaling curve)."""

from __future__ import annotations

from dataclasses import dataclass

from mfukit import units
from mfukit.core.results import ProgressCallback
from mfukit.errors import InputError
from mfukit.perf.inputs import PerfInputs
from mfukit.perf.planner import Objective, Plan, SearchResult, SearchSpace, search
from mfukit.perf.scaling import scaling_counts, smallest_count

DEFAULT_MFU_GUESS = 0.4  # the count search's start for an accelerator without a typical MFU


@dataclass
class PlanSearch:
    count: int  # the GPU count planned
    result: SearchResult  # the top layouts on it (search_s includes the scaling curve's searches)
    curve: dict[int, Plan | None]  # GPU count -> its best layout (None: nothing fits)
    notes: list[str]  # how the count was chosen


def count_for_deadline(inputs: PerfInputs, space: SearchSpace) -> tuple[int, str]:
    """The smallest GPU count whose best layout trains the tokens within the deadline (failure-free), and
    the note that says so."""
    if inputs.deadline_s is None or inputs.tokens is None:
        raise InputError(
            "needs the GPU count, or a deadline and the training tokens",
            source=inputs.source,
            field="cluster.num_gpus",
            hint='give cluster.num_gpus (or cluster.num_nodes), or training.deadline ("14d") with training.tokens ("1.4T")',
        )
    typical = inputs.accelerator.typical_mfu.value if inputs.accelerator.typical_mfu else DEFAULT_MFU_GUESS
    found = smallest_count(
        inputs.workload,
        inputs.system,
        inputs.accelerator,
        tokens=inputs.tokens,
        deadline_s=inputs.deadline_s,
        space=space,
        goodput=lambda count, plan: 1.0,
        mfu_guess=typical,
    )
    if found.chosen is None:
        raise InputError(
            "; ".join(found.why_not) or "no GPU count meets the deadline",
            source=inputs.source,
            field="training.deadline",
            hint="extend the deadline, or give cluster.num_gpus to see the time on that many GPUs",
        )
    note = (
        f"{found.chosen.num_gpus:,} GPUs: the smallest of {len(found.evaluated)} counts searched whose best layout "
        f"trains {units.format_count(inputs.tokens)} tokens in the deadline (failure-free; `mfukit size` adds goodput)"
        + "".join(f"; {why}" for why in found.why_not)
    )
    return found.chosen.num_gpus, note


def plan_search(
    inputs: PerfInputs,
    space: SearchSpace,
    *,
    objective: Objective,
    top_k: int,
    scaling: bool,
    progress: ProgressCallback | None = None,
) -> PlanSearch:
    """The top ``top_k`` layouts on the planned count, and with ``scaling`` the best at the counts from an
    eighth to twice it."""
    workload, system, accelerator = inputs.workload, inputs.system, inputs.accelerator
    notes: list[str] = []
    if inputs.num_gpus is None:
        count, note = count_for_deadline(inputs, space)
        notes.append(note)
    else:
        count = inputs.num_gpus
    result = search(
        workload,
        system,
        accelerator,
        [count],
        space=space,
        objective=objective,
        tokens=inputs.tokens,
        top_k=top_k,
        progress=progress,
        headroom_bytes=inputs.hbm_headroom_bytes,
    )
    curve: dict[int, Plan | None] = {count: result.best_per_count[count]}
    if scaling:
        for other in scaling_counts(count, workload, system, space):
            if other != count:
                found = search(
                    workload,
                    system,
                    accelerator,
                    [other],
                    space=space,
                    tokens=inputs.tokens,
                    top_k=1,
                    headroom_bytes=inputs.hbm_headroom_bytes,
                )
                curve[other] = found.best_per_count[other]
                result.search_s += found.search_s
    return PlanSearch(count, result, curve, notes)
