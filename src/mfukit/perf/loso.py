"""Leave-one-source-out prediction of measured runs: how the model does on a source it was never fitted on.

For each source (a paper's table, a vendor's benchmark page, a sweep), every constant of the step-time model
is fitted again without that source's rows (:func:`mfukit.perf.calibrate.fit`: GPU curves, stack costs,
network profiles, rank jitter; a stack or network only that source ran on falls back to the defaults), and
the source's rows are predicted with those constants. The ratios measured / predicted are the residuals the
prediction intervals come from (:mod:`mfukit.perf.uncertainty`) and what ``benchmarks/accuracy.py`` reports.
Each fold starts the solver from the given constants and runs it to convergence; where a constant has no
rows in a fold it is not kept (the fit drops it), so no held-out row reaches its own prediction.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

import numpy as np

from mfukit.perf.calibrate import fit
from mfukit.perf.efficiency import EfficiencyFile, efficiency_file, efficiency_for
from mfukit.perf.evaluator import Evaluator
from mfukit.perf.layouts import Floats
from mfukit.perf.measured_runs import Case


def predict_with(file: EfficiencyFile, cases: Sequence[Case]) -> Floats:
    """Tokens/s per GPU of ``cases`` under the constants of ``file`` (its network profiles included)."""
    if not cases:
        return np.zeros(0)
    accelerators = {case.accelerator.name: case.accelerator for case in cases}
    evaluator = Evaluator(cases, networks={profile.name: profile for profile in file.network})
    return evaluator.predict(lambda name, stack: efficiency_for(accelerators[name], stack, file=file))


def leave_one_source_out(
    cases: Sequence[Case],
    start: EfficiencyFile | None = None,
    progress: Callable[[str], None] | None = None,
) -> Floats:
    """Tokens/s per GPU of every case, predicted by constants fitted on the other sources only."""
    start = start or efficiency_file()
    predicted = np.empty(len(cases))
    sources = sorted({case.source for case in cases})
    for number, source in enumerate(sources, start=1):
        held = [index for index, case in enumerate(cases) if case.source == source]
        if progress:
            progress(f"[{number}/{len(sources)}] fitting without {source} ({len(held)} rows held out)")
        folded, _ = fit([case for case in cases if case.source != source], start=start)
        predicted[held] = predict_with(folded, [cases[index] for index in held])
    return predicted


def stderr_progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
