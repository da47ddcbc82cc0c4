"""Fit a scale-out network's NCCL profile (``[[network]]`` in ``perf/data/efficiency.toml``) to measured runs.

Where NCCL's InfiniBand constants do not describe a network (AWS EFA: NCCL runs through the aws-ofi-nccl
plugin over the SRD transport), two physical numbers say how collectives behave on it: the fraction of the
NICs' line rate they move (nccl-tests' busbw over the line rate) and an extra latency per network step of
every algorithm. Both are fitted, after the GPU and framework constants, on the runs that crossed
that network: the multi-node runs whose pipeline stays inside a node (a pipeline's send/receive stalls
across the network are a framework effect the collective model does not describe; the accuracy table of
docs/performance-model.md shows them).
The loss is the same soft-L1 of the log error as the rest
of the calibration, each source weighted equally (each run equally within its source).
"""

from __future__ import annotations

import collections
import math
from collections.abc import Callable, Sequence

import numpy as np

from mfukit.perf.efficiency import Efficiency, FitRecord, NetworkProfile, network_name
from mfukit.perf.evaluator import Evaluator, error_summary, levenberg_marquardt, soft_l1
from mfukit.perf.layouts import Floats
from mfukit.perf.measured_runs import Case

# Searched in logit / log space: a busbw fraction of 2-99 % of line rate, 0.1 us - 2 ms per network step.
_EFFICIENCY_BOUNDS = (math.log(0.02 / 0.98), math.log(0.99 / 0.01))
_LATENCY_BOUNDS = (math.log(1e-7), math.log(2e-3))


def network_cases(cases: Sequence[Case], name: str) -> list[Case]:
    """The runs that cross network ``name`` (a link, or one system's network) with no pipeline stage boundary
    on it."""
    return [
        case
        for case in cases
        if network_name(case.system) == name
        and case.num_gpus > case.system.gpus_per_node
        and case.layout.pp == 1
    ]


def _decode(profile: NetworkProfile, x: Floats) -> NetworkProfile:
    logit = min(max(float(x[0]), _EFFICIENCY_BOUNDS[0]), _EFFICIENCY_BOUNDS[1])
    log_latency = min(max(float(x[1]), _LATENCY_BOUNDS[0]), _LATENCY_BOUNDS[1])
    return profile.model_copy(
        update={"efficiency": 1 / (1 + math.exp(-logit)), "step_latency_s": math.exp(log_latency)}
    )


def fit_network(
    profile: NetworkProfile, cases: Sequence[Case], efficiency: Callable[[str, str], Efficiency]
) -> tuple[NetworkProfile, tuple[int, float, float] | None]:
    """``profile`` fitted on its runs of ``cases`` under the (already fitted) GPU and framework constants,
    and (rows, median, p90) of its fit error; unfitted (NCCL's constants) when no run crossed the network."""
    rows = network_cases(cases, profile.name)
    if not rows:  # nothing measured it: NCCL's InfiniBand constants, said in the estimate's notes
        return profile.model_copy(update={"efficiency": None, "step_latency_s": None, "fit": None}), None
    measured = np.asarray([case.measured_tokens_per_s_per_gpu for case in rows])
    # each source that crossed the network weighs the same, its runs equally within it
    per_source = collections.Counter(case.source for case in rows)
    weights = np.asarray([1.0 / (len(per_source) * per_source[case.source]) for case in rows])

    def predicted(candidate: NetworkProfile) -> Floats:
        return Evaluator(rows, networks={profile.name: candidate}).predict(efficiency)

    def residuals(x: Floats) -> Floats:
        return soft_l1(np.log(predicted(_decode(profile, x)) / measured), weights)

    # a neutral start, not the previous fit (which may sit on a bound, where the clipping flattens the loss)
    start = np.asarray([0.0, math.log(1e-5)])
    fitted = _decode(profile, levenberg_marquardt(residuals, start, iterations=25))
    median, p90 = error_summary(predicted(fitted) / measured - 1)
    sources = sorted({case.source for case in rows})
    record = FitRecord(sources=sources, rows=len(rows), median_abs_rel_error=median, p90_abs_rel_error=p90)
    return fitted.model_copy(update={"fit": record}), (len(rows), median, p90)
