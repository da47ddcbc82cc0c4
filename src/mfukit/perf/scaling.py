"""Across GPU counts: the best plan at each count (MFU and time to train against the cluster size), and the
smallest count whose best plan meets a deadline (what ``size`` and ``plan --deadline`` answer).

A count is worth evaluating only if some layout exists on it: tp x pp x cp x dp on whole nodes with dp making the
global batch a whole number of micro-batches (exactly for a batch in sequences; within
:data:`~mfukit.perf.layouts.BATCH_ROUNDING_FRAC` for one in tokens, so 4M tokens of 2,048-token sequences,
1,953 sequences, run as 2,048 on DP 2,048). The
deadline search starts from the count an MFU guess gives and, on the counts that take the batch exactly,
moves up by the ratio of predicted to allowed time until a count meets the deadline, then bisects down to
the last miss. Time to train does not fall smoothly with the count (a count of awkward factors has only poor
layouts), so it then tries every count below the one found, rounded batches included, in ascending order from the
smallest that could meet the deadline at the best MFU x goodput seen, and takes the first that meets it;
where that count's MFU beats every one seen, the bound falls and the counts below it are tried again (with at
most half the searches left). Last, it tries every count below the answer so far that it has not searched, in
descending order down to a tenth below the bound (:data:`SCAN_BELOW_BOUND`; a better MFU found lowers it): a
smaller count can run a better layout than any seen. It answers the smallest count that met the deadline
(within ``MAX_EVALUATIONS`` searches in all; cut short, it says how many counts it did not try, and where).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from mfukit.core.hardware import Accelerator, System
from mfukit.core.results import ProgressCallback
from mfukit.perf import flops
from mfukit.perf.layouts import Workload, rounded_batch
from mfukit.perf.planner import Plan, SearchResult, SearchSpace, search

MAX_EVALUATIONS = 128  # counts searched at most (each one a full layout search, ~0.1 s)
# The scan below the count found also tries the counts up to this share below the bound that the best MFU
# seen gives: a smaller count runs more micro-batches per DP rank (a smaller bubble) and other
# factorisations, so its best layout can beat every one the larger counts showed (LLaMA-65B's 4M-token batch
# on A100: 3,560 GPUs run 48 % MFU where the counts from 3,744 up had shown at most 45 %, a bound of about
# 3,720 GPUs). A count tried so that shows a better MFU lowers the bound, and the window with it.
SCAN_BELOW_BOUND = 0.10


@dataclass
class CountSearch:
    """The plans found while looking for the smallest count that meets a deadline."""

    chosen: Plan | None
    goodput: float
    evaluated: dict[int, SearchResult] = field(default_factory=dict)
    why_not: list[str] = field(default_factory=list)


def valid_counts(workload: Workload, system: System, space: SearchSpace, low: int, high: int) -> list[int]:
    """Whole-node GPU counts in [low, high] on which at least one layout of ``space`` can be built."""
    gpn = system.gpus_per_node
    model = workload.model
    layers = model.num_hidden_layers
    tps = space.tp or tuple(t for t in (1, 2, 4, 8) if t <= system.scale_up_domain_gpus)
    pps = space.pp or tuple(p for p in range(1, layers + 1) if layers % p == 0 or (layers + 2) % p == 0)
    cps = space.cp or (1,)
    # dp works when some micro-batch count makes the batch (rounded, where allowed); micro-batch 1 is the
    # finest step, so it is enough to try
    dps = np.asarray(space.dp or range(1, 2 * workload.global_batch_sequences + 1), dtype=np.int64)
    dps = dps[rounded_batch(workload, dps) > 0]
    model_parallel = np.asarray([tp * pp * cp for tp in tps for pp in pps for cp in cps], dtype=np.int64)
    counts = np.unique(np.multiply.outer(model_parallel, dps))
    return [int(c) for c in counts[(counts >= low) & (counts <= high) & (counts % gpn == 0)]]


def count_guess(
    workload: Workload, accelerator: Accelerator, tokens: float, deadline_s: float, mfu: float
) -> int:
    per_token = flops.model_flops_per_token(workload.model, workload.seq_len, workload.attention)
    return max(
        1, math.ceil(tokens * per_token / (accelerator.peak_flops(workload.precision) * mfu * deadline_s))
    )


def smallest_count(
    workload: Workload,
    system: System,
    accelerator: Accelerator,
    *,
    tokens: float,
    deadline_s: float,
    space: SearchSpace,
    goodput: Callable[[int, Plan], float],
    mfu_guess: float,
    progress: ProgressCallback | None = None,
) -> CountSearch:
    """The smallest valid GPU count whose best plan trains ``tokens`` within ``deadline_s`` at ``goodput``."""
    guess = count_guess(workload, accelerator, tokens, deadline_s, mfu_guess)
    candidates = valid_counts(workload, system, space, system.gpus_per_node, 64 * guess)
    outcome = CountSearch(chosen=None, goodput=1.0)
    if not candidates:
        outcome.why_not.append("no GPU count in range allows a layout that divides the global batch")
        return outcome
    # the coarse search runs on the counts that take the batch exactly (their layouts need no rounding,
    # so time to train falls with them about as the count rises); the fine one on every count
    exact = valid_counts(
        replace(workload, batch_rounding_frac=0.0), system, space, system.gpus_per_node, 64 * guess
    )
    coarse = exact or candidates

    rated: list[tuple[float, float]] = []  # (MFU, goodput) of every count whose best plan was timed

    def days_at(count: int) -> tuple[float, Plan | None, float]:
        result = search(workload, system, accelerator, [count], space=space, tokens=tokens, top_k=1)
        outcome.evaluated[count] = result
        if progress is not None:
            progress(len(outcome.evaluated), MAX_EVALUATIONS)
        plan = result.best_per_count[count]
        if plan is None or plan.time_to_train_s is None:
            return math.inf, None, 1.0
        rate = goodput(count, plan)
        rated.append((plan.mfu, rate))
        return plan.time_to_train_s / rate, plan, rate

    # move up by the ratio of predicted to allowed time until a count meets the deadline, then bisect down
    # between it and the last miss
    position = min(bisect.bisect_left(coarse, guess), len(coarse) - 1)
    failing, meeting = -1, None
    while len(outcome.evaluated) < MAX_EVALUATIONS:
        wall, plan, rate = days_at(coarse[position])
        if plan is not None and wall <= deadline_s:
            meeting = (position, plan, rate)
            break
        failing = position
        if position == len(coarse) - 1:
            break
        needed = coarse[position] * (wall / deadline_s if math.isfinite(wall) else 2.0)
        position = max(position + 1, min(bisect.bisect_left(coarse, needed), len(coarse) - 1))
    if meeting is None:
        outcome.why_not.append(
            f"no count up to {coarse[-1]:,} GPUs meets the deadline in {len(outcome.evaluated)} searches"
        )
        return outcome
    found, best_plan, best_rate = meeting
    while found - failing > 1 and len(outcome.evaluated) < MAX_EVALUATIONS:
        middle = (failing + found) // 2
        wall, plan, rate = days_at(coarse[middle])
        if plan is not None and wall <= deadline_s:
            found, best_plan, best_rate = middle, plan, rate
        else:
            failing = middle
    # then every count below it, in ascending order from the smallest that could meet the deadline at the
    # best MFU x goodput seen (a lower bound unless an unseen count runs a better layout): the first that
    # meets it is the answer so far. A count found so runs a layout the coarse counts did not (a rounded
    # batch, a better factorisation); where its MFU x goodput beats every one seen before, the bound falls,
    # and the counts below it are scanned again
    ceiling, bound = coarse[found], 0.0
    while (seen := _best_rate(rated)) > bound:
        bound = seen
        lowest = count_guess(workload, accelerator, tokens, deadline_s, bound)
        below = candidates[bisect.bisect_left(candidates, lowest) : bisect.bisect_left(candidates, ceiling)]
        unseen = [count for count in below if count not in outcome.evaluated]
        # at most half the searches left: the descending pass below keeps a share of the budget
        met = _first_meeting(unseen[: (MAX_EVALUATIONS - len(outcome.evaluated)) // 2], days_at, deadline_s)
        if met is None:
            break
        best_plan, best_rate = met
        ceiling = best_plan.num_gpus

    # last, every count below the answer so far not yet searched, in descending order down to a tenth below
    # the bound: a smaller count runs more micro-batches per DP rank (a smaller bubble) and other
    # factorisations, so its best layout can beat every one seen; each that meets the deadline is the answer
    # so far, and one with a better MFU lowers the bound. Descending, a search cut short by its budget still
    # ends on the smallest count found
    def floor() -> float:
        return count_guess(workload, accelerator, tokens, deadline_s, _best_rate(rated)) * (
            1 - SCAN_BELOW_BOUND
        )

    for count in reversed(candidates[: bisect.bisect_left(candidates, ceiling)]):
        if count < floor() or len(outcome.evaluated) >= MAX_EVALUATIONS:
            break
        if count not in outcome.evaluated:
            wall, plan, rate = days_at(count)
            if plan is not None and wall <= deadline_s:
                best_plan, best_rate = plan, rate
    window = candidates[
        bisect.bisect_left(candidates, floor()) : bisect.bisect_left(candidates, best_plan.num_gpus)
    ]
    untried = [count for count in window if count not in outcome.evaluated]
    if untried:
        outcome.why_not.append(
            f"stopped after {MAX_EVALUATIONS} searches: {len(untried)} counts between {untried[0]:,} and "
            f"{untried[-1]:,} GPUs were not tried, and one may meet the deadline"
        )
    outcome.chosen, outcome.goodput = best_plan, best_rate
    return outcome


def _best_rate(rated: list[tuple[float, float]]) -> float:
    """The best MFU x goodput seen (each the best of the counts searched)."""
    return max(mfu for mfu, _ in rated) * max(rate for _, rate in rated)


def _first_meeting(
    counts: list[int], days_at: Callable[[int], tuple[float, Plan | None, float]], deadline_s: float
) -> tuple[Plan, float] | None:
    """The best plan (and its goodput) of the first of ``counts`` that meets the deadline."""
    for count in counts:
        wall, plan, rate = days_at(count)
        if plan is not None and wall <= deadline_s:
            return plan, rate
    return None


def scaling_counts(
    num_gpus: int, workload: Workload, system: System, space: SearchSpace, points: int = 7
) -> list[int]:
    """Valid counts from an eighth to twice ``num_gpus``, about evenly spaced on a log scale, and ``num_gpus``."""
    candidates = valid_counts(workload, system, space, max(system.gpus_per_node, num_gpus // 8), 2 * num_gpus)
    if not candidates:
        return [num_gpus]
    picked = {num_gpus}
    for step in range(points):
        target = num_gpus / 8 * 16 ** (step / max(1, points - 1))
        picked.add(min(candidates, key=lambda count: abs(math.log(count / target))))
    return sorted(picked)
