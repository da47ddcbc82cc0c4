"""A site's measured runs against the model (``mfukit validate``), and the site's own constants fitted on them
(``mfukit calibrate``), written as an overlay that ``MFUKIT_CATALOG`` loads.

Runs come in the calibration CSV schema (:mod:`mfukit.perf.measured_runs`). Validation predicts each with the
constants in effect and reports |predicted - measured| / measured of the MFU per source and overall, with
each prediction's 80 % interval and whether the measurement fell inside it. A row whose source the installed
constants were fitted on is marked in-sample: its error is not a test of the model.

Calibration refits the constants the site's runs exercise on those runs (the GPU curve of a family from its
single-node runs, the stack's host costs and the rank jitter from all of them) and keeps every other
constant as shipped. The overlay holds the new ``efficiency.toml`` and a ``loso_residuals.csv`` with the
shipped residuals plus the site's runs as predicted by the constants before the refit (out of sample for
them), so intervals for the site's regime rest on its own runs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np

from mfukit.errors import InputError
from mfukit.perf.calibrate import fit, write_file
from mfukit.perf.calibration_data import measured_mfu, mfu_at
from mfukit.perf.efficiency import (
    EFFICIENCY_FILE,
    EfficiencyFile,
    FrameworkProfile,
    HardwareProfile,
    efficiency_file,
    hardware_profile_of,
)
from mfukit.perf.loso import predict_with
from mfukit.perf.measured_runs import Case, SkippedRow, read_runs
from mfukit.perf.uncertainty import (
    RESIDUALS_FILE,
    Interval,
    case_regime,
    interval_for,
    load_residuals,
    residual_of,
    write_residuals,
)

P = TypeVar("P", HardwareProfile, FrameworkProfile)


@dataclass(frozen=True)
class RowCheck:
    case: Case
    measured_mfu: float
    predicted_mfu: float
    interval: Interval  # capped at the prediction's kernel ceiling
    in_sample: bool
    kernel_ceiling: float  # StepEstimate.kernel_ceiling of the prediction

    @property
    def error(self) -> float:
        return self.predicted_mfu / self.measured_mfu - 1

    @property
    def inside(self) -> bool:
        low, high = self.interval.around_mfu(self.predicted_mfu)
        return low <= self.measured_mfu <= high


@dataclass(frozen=True)
class SourceSummary:
    source: str
    rows: int
    median_abs_error: float
    p90_abs_error: float
    median_signed_error: float
    coverage: float
    in_sample: bool


def check_runs(cases: Sequence[Case], file: EfficiencyFile | None = None) -> list[RowCheck]:
    """Every case predicted under ``file`` (the constants in effect), with its interval."""
    constants = file or efficiency_file()
    predicted, ceilings = predict_with(constants, cases)
    fitted_runs = {(r.source, r.row_id) for r in load_residuals()}
    checks = []
    for case, tokens, ceiling in zip(cases, predicted.tolist(), ceilings.tolist(), strict=True):
        in_sample = (case.source, case.row_id) in fitted_runs
        # a fitted source's interval comes from the other sources' residuals, as leave-one-source-out
        interval = interval_for(case_regime(case), exclude_source=case.source if in_sample else None)
        checks.append(
            RowCheck(
                case, measured_mfu(case), mfu_at(case, tokens), interval.capped(ceiling), in_sample, ceiling
            )
        )
    return checks


def summarise(checks: Sequence[RowCheck]) -> list[SourceSummary]:
    """Per source, then ``all`` (rows of every source)."""
    groups: dict[str, list[RowCheck]] = {}
    for check in checks:
        groups.setdefault(check.case.source, []).append(check)
    if len(groups) > 1:
        groups["all"] = list(checks)
    out = []
    for source, members in groups.items():
        errors = np.asarray([check.error for check in members])
        out.append(
            SourceSummary(
                source=source,
                rows=len(members),
                median_abs_error=float(np.median(np.abs(errors))),
                p90_abs_error=float(np.quantile(np.abs(errors), 0.9)),
                median_signed_error=float(np.median(errors)),
                coverage=sum(check.inside for check in members) / len(members),
                in_sample=all(check.in_sample for check in members),
            )
        )
    return out


def read_site_runs(path: Path) -> tuple[list[Case], list[SkippedRow]]:
    return read_runs(path)


def calibrate_site(
    cases: Sequence[Case], out_dir: Path
) -> tuple[EfficiencyFile, list[RowCheck], list[RowCheck]]:
    """Fit the site's constants on ``cases`` and write the overlay into ``out_dir``; the checks before and
    after (the after figures are in-sample)."""
    shipped = efficiency_file(EFFICIENCY_FILE)  # never an overlay already on MFUKIT_CATALOG
    fitted_families = [case for case in cases if _own_constants(case, shipped)]
    if not fitted_families:
        raise InputError(
            "no run is on a GPU with constants of its own (its family borrows another's: "
            + ", ".join(sorted({case.accelerator.name for case in cases}))
            + "); calibrate cannot fit them",
            field="gpu_type",
            hint="add runs on a calibrated GPU family (A100, H100), or validate these runs instead",
        )
    before = check_runs(cases, shipped)
    refitted, _ = fit(cases, start=shipped)
    merged = _merged(shipped, refitted)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_file(merged, out_dir / "efficiency.toml")
    own = [
        residual_of(check.case, math.log(check.measured_mfu / check.predicted_mfu), check.kernel_ceiling)
        for check in before
    ]
    write_residuals(out_dir / RESIDUALS_FILE.name, [*load_residuals(RESIDUALS_FILE), *own])
    after = check_runs(cases, merged)
    return merged, before, after


def _own_constants(case: Case, file: EfficiencyFile) -> bool:
    profile = hardware_profile_of(case.accelerator.name, file)
    return profile is not None and profile.borrows is None


def _merged(shipped: EfficiencyFile, refitted: EfficiencyFile) -> EfficiencyFile:
    """The profiles this fit fitted (those with a fit record from the site's runs; a stack that borrows is
    fitted through the one it borrows), the shipped ones elsewhere."""

    def pick(old: P, new: P) -> P:
        return new if new.fit is not None and new.borrows is None else old

    hardware = [pick(old, new) for old, new in zip(shipped.hardware, refitted.hardware, strict=True)]
    frameworks = [pick(old, new) for old, new in zip(shipped.framework, refitted.framework, strict=True)]
    networks = [
        new if new.fit is not None else old
        for old, new in zip(shipped.network, refitted.network, strict=True)
    ]
    return shipped.model_copy(update={"hardware": hardware, "framework": frameworks, "network": networks})
