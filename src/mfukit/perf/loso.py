"""Leave-one-source-out prediction of measured runs: how the model does on a source it was never fitted on.

For each source (a paper's table, a vendor's benchmark page, a sweep; sources of one publisher or code base
together, :func:`mfukit.perf.calibration_data.source_family`), every constant of the step-time model is
fitted again without that source's rows (:func:`mfukit.perf.calibrate.fit`: GPU curves, stack costs, network
profiles, rank jitter; a stack or network only that source ran falls back to the defaults), and the source's
rows are predicted with those constants. The ratios measured / predicted are the residuals the prediction
intervals come from (:mod:`mfukit.perf.uncertainty`) and what ``benchmarks/accuracy.py`` reports. Each fold
starts the solver from neutral constants (:func:`mfukit.perf.calibrate.neutral_prior`, no network profile)
and runs at most :data:`FOLD_ITERATIONS` steps per stage, so no held-out row reaches its own prediction. Folds run in :data:`WORKERS` processes.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from mfukit.perf.calibrate import fit, neutral_prior
from mfukit.perf.calibration_data import source_family
from mfukit.perf.efficiency import EfficiencyFile, efficiency_file, efficiency_for
from mfukit.perf.evaluator import Evaluator
from mfukit.perf.layouts import Floats
from mfukit.perf.measured_runs import Case

FOLD_ITERATIONS = 15
WORKERS = 2


def predict_with(file: EfficiencyFile, cases: Sequence[Case]) -> tuple[Floats, Floats]:
    """Tokens/s per GPU of ``cases`` under the constants of ``file`` (its network profiles included), and
    each prediction's kernel ceiling (``StepEstimate.kernel_ceiling``)."""
    if not cases:
        return np.zeros(0), np.zeros(0)
    accelerators = {case.accelerator.name: case.accelerator for case in cases}
    evaluator = Evaluator(cases, networks={profile.name: profile for profile in file.network})
    return evaluator.predict_with_ceiling(
        lambda name, stack: efficiency_for(accelerators[name], stack, file=file)
    )


def _fold(cases: Sequence[Case], family: str, start: EfficiencyFile) -> tuple[Floats, Floats]:
    held = [case for case in cases if source_family(case.source) == family]
    folded, _ = fit([case for case in cases if source_family(case.source) != family], start, FOLD_ITERATIONS)
    return predict_with(folded, held)


def leave_one_source_out(
    cases: Sequence[Case],
    start: EfficiencyFile | None = None,
    progress: Callable[[str], None] | None = None,
) -> tuple[Floats, Floats]:
    """Tokens/s per GPU of every case, predicted by constants fitted on the other sources only, and each
    prediction's kernel ceiling."""
    # every fold starts from no fitted value: a constant its runs do not pin down keeps nothing of the
    # held-out source (the constants fitted on every source are not a fold's start)
    start = neutral_prior(start or efficiency_file())
    predicted = np.empty(len(cases))
    ceilings = np.empty(len(cases))
    families = sorted({source_family(case.source) for case in cases})
    with ProcessPoolExecutor(max_workers=WORKERS) as pool:
        futures = {family: pool.submit(_fold, list(cases), family, start) for family in families}
        for number, (family, future) in enumerate(futures.items(), start=1):
            held = [index for index, case in enumerate(cases) if source_family(case.source) == family]
            predicted[held], ceilings[held] = future.result()
            if progress:
                progress(f"[{number}/{len(families)}] predicted {family} ({len(held)} rows) without it")
    return predicted, ceilings


def stderr_progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
