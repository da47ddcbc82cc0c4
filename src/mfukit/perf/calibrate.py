"""Fit the efficiency profiles to measured runs, and predict those runs: ``python -m mfukit.perf.calibrate``.

Every case of :mod:`mfukit.perf.calibration_data` is predicted by the step-time model through
:class:`mfukit.perf.evaluator.Evaluator`.

The fit minimises a robust (soft-L1) loss of the log error r of tokens/s per GPU,
``2(sqrt(1 + (r / 0.05)^2) - 1)``, summed per (source, accelerator) group and divided by the group's size,
so that no source outweighs another by its row count and the fit aims at the median rather than at runs a
framework lost for reasons no model of the hardware sees. The GPU and framework constants are fitted on the
rows of the fit split that ran inside one node; then each network profile on the fit-split rows that
crossed that network with no pipeline across nodes (:mod:`mfukit.perf.calibrate_network`); every other
multi-node row tests the model. A framework constant that moves none of its rows' predictions (a collective
cost where no run launched one, a pipeline cost where none used PP, a host floor its GPU work always
covered) is left out and taken from the default framework's. The optimiser is Levenberg-Marquardt on the
logarithms (logits for fractions) of the constants, with a finite-difference Jacobian. The result is written
to ``perf/data/efficiency.toml`` with the SHA-256 of each data file, the split and the fit error of each
profile; borrowed profiles and framework facts are kept as they are.
"""

from __future__ import annotations

import collections
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import TypeVar

import numpy as np

from mfukit.perf.calibrate_network import fit_network
from mfukit.perf.calibration_data import (
    FIT_SHARE,
    Case,
    calibration_dir,
    file_digests,
    highest_measured_mfu,
    load_cases,
)
from mfukit.perf.efficiency import (
    EFFICIENCY_FILE,
    FRAMEWORK_FIELDS,
    HARDWARE_FIELDS,
    Efficiency,
    EfficiencyFile,
    FitRecord,
    FrameworkProfile,
    HardwareProfile,
    NetworkProfile,
    efficiency_file,
    efficiency_for,
    hardware_profile_of,
)
from mfukit.perf.evaluator import LOSS_SCALE, Evaluator, error_summary, levenberg_marquardt, soft_l1
from mfukit.perf.layouts import Floats

P = TypeVar("P", HardwareProfile, FrameworkProfile)
FRACTIONS = frozenset({"gemm_peak_fraction", "attention_peak_fraction", "fp8_gemm_peak_fraction"})


# Search bounds in the transformed space: fractions 0.01-0.99, times 0.1 us-0.1 s, GEMM dimensions 1-4096.
_BOUNDS = {
    "fraction": (math.log(0.01 / 0.99), math.log(0.99 / 0.01)),
    "time": (math.log(1e-7), math.log(0.1)),
    "dimension": (0.0, math.log(4096.0)),
}


# A GEMM's fixed cost (launch and tail) is kept to what profilers show, 2-20 us: beyond that it would trade
# places with the framework's per-layer cost (a layer runs the same handful of GEMMs every time).
_FIELD_BOUNDS = {"gemm_latency_s": (math.log(2e-6), math.log(2e-5))}


def _kind(name: str) -> str:
    return "fraction" if name in FRACTIONS else "time" if name.endswith("_s") else "dimension"


def _bounds(name: str) -> tuple[float, float]:
    return _FIELD_BOUNDS.get(name, _BOUNDS[_kind(name)])


def _encode(name: str, value: float) -> float:
    low, high = _bounds(name)
    raw = math.log(value / (1 - value)) if name in FRACTIONS else math.log(max(value, 1e-9))
    return min(high, max(low, raw))


def _decode(name: str, value: float) -> float:
    low, high = _bounds(name)
    bounded = min(high, max(low, value))
    return 1 / (1 + math.exp(-bounded)) if name in FRACTIONS else math.exp(bounded)


@dataclass
class _Problem:
    evaluator: Evaluator
    parameters: list[tuple[str, str, str]]  # (kind, profile, field)
    start: dict[tuple[str, str], Efficiency]
    weights: Floats

    def efficiencies(self, x: Floats) -> Callable[[str, str], Efficiency]:
        updates: dict[tuple[str, str], dict[str, float]] = collections.defaultdict(dict)
        for (kind, profile, field), value in zip(self.parameters, x.tolist(), strict=True):
            updates[(kind, profile)][field] = _decode(field, value)

        def lookup(accelerator: str, framework: str) -> Efficiency:
            base = self.start[(accelerator, framework)]
            return base.model_copy(
                update=updates.get(("hardware", base.hardware), {})
                | updates.get(("framework", base.framework), {})
            )

        return lookup

    def residuals(self, x: Floats) -> Floats:
        predicted = self.evaluator.predict(self.efficiencies(x))
        ratio = np.log(predicted / self.evaluator.measured)
        return soft_l1(ratio, self.weights)


def _group_of(case: Case) -> str:
    return f"{case.source}:{case.accelerator.name}"


def _weights(cases: Sequence[Case]) -> Floats:
    groups = [_group_of(case) for case in cases]
    sizes = collections.Counter(groups)
    return np.asarray([1.0 / sizes[name] for name in groups])


def _parameters(
    file: EfficiencyFile, start: dict[tuple[str, str], Efficiency], cases: Sequence[Case], kinds: set[str]
) -> tuple[list[tuple[str, str, str]], list[float]]:
    """The constants to fit: those of every calibrated profile the cases use, of the given kinds."""
    parameters: list[tuple[str, str, str]] = []
    x0: list[float] = []
    used_hardware = {efficiency.hardware for efficiency in start.values()}
    used_frameworks = {efficiency.framework for efficiency in start.values()}
    if "hardware" in kinds:
        for profile in file.hardware:
            if profile.name not in used_hardware or profile.borrows is not None:
                continue
            fp8 = any(
                case.workload.precision == "fp8" and hardware_profile_of(case.accelerator.name) is profile
                for case in cases
            )
            for name in HARDWARE_FIELDS:
                if name == "fp8_gemm_peak_fraction" and not fp8:
                    continue
                parameters.append(("hardware", profile.name, name))
                x0.append(_encode(name, float(getattr(profile, name) or profile.gemm_peak_fraction or 0.7)))
    if "framework" in kinds:
        for framework in file.framework:
            if framework.name not in used_frameworks or framework.borrows is not None:
                continue
            for name in FRAMEWORK_FIELDS:
                parameters.append(("framework", framework.name, name))
                x0.append(_encode(name, float(getattr(framework, name) or 1e-5)))
    return parameters, x0


def _solve(
    file: EfficiencyFile, cases: Sequence[Case], kinds: set[str]
) -> dict[tuple[str, str], dict[str, float]]:
    """Fit the constants of ``kinds`` on ``cases`` starting from ``file``."""
    evaluator = Evaluator(cases)
    start = {
        (group.accelerator, group.framework): _efficiency(file, cases[int(group.indices[0])], group.framework)
        for group in evaluator.groups
    }
    parameters, x0 = _parameters(file, start, cases, kinds)
    problem = _Problem(evaluator, parameters, start, _weights(cases))
    best = levenberg_marquardt(problem.residuals, np.asarray(x0))
    values: dict[tuple[str, str], dict[str, float]] = collections.defaultdict(dict)
    for (kind, profile, name), value in zip(parameters, best.tolist(), strict=True):
        values[(kind, profile)][name] = _decode(name, value)
    return values


def _efficiency(file: EfficiencyFile, case: Case, framework: str) -> Efficiency:
    """The constants of ``file`` (not the installed one) for a case."""
    return efficiency_for(case.accelerator, framework, file=file)


def _updated(file: EfficiencyFile, values: dict[tuple[str, str], dict[str, float]]) -> EfficiencyFile:
    hardware = [p.model_copy(update=values.get(("hardware", p.name), {})) for p in file.hardware]
    frameworks = [p.model_copy(update=values.get(("framework", p.name), {})) for p in file.framework]
    return file.model_copy(update={"hardware": hardware, "framework": frameworks})


def fit(cases: Sequence[Case]) -> tuple[EfficiencyFile, dict[str, tuple[int, float, float]]]:
    """Fit every calibrated profile on the fit rows of ``cases`` that ran inside one node (the constants
    describe the GPU and the framework), then each ``[[network]]`` profile on the multi-node fit rows that
    crossed that network (:mod:`mfukit.perf.calibrate_network`); every other multi-node row tests the
    collective model. Returns the new file and, per profile, (rows, median, p90) of the fit error."""
    fitted_cases = [case for case in cases if case.fitted and case.num_gpus <= case.system.gpus_per_node]
    by_name = {case.accelerator.name: case.accelerator for case in cases}
    current = efficiency_file()
    current = _updated(current, _solve(current, fitted_cases, {"hardware", "framework"}))
    evaluator = Evaluator(fitted_cases)
    lookup = {
        (g.accelerator, g.framework): _efficiency(current, fitted_cases[int(g.indices[0])], g.framework)
        for g in evaluator.groups
    }
    predicted = evaluator.predict(lambda a, f: lookup[(a, f)])
    errors = predicted / evaluator.measured - 1
    records: dict[str, tuple[int, float, float]] = {}
    hardware, frameworks = [], []
    for profile in current.hardware:
        mask = np.asarray([_hardware_name(case, current) == profile.name for case in fitted_cases])
        hardware.append(_with_record(profile, mask, errors, fitted_cases, records))
    for framework in current.framework:
        mask = np.asarray([case.workload.framework == framework.name for case in fitted_cases])
        unidentified = {
            name: None
            for name in FRAMEWORK_FIELDS
            if mask.any() and not _moves(evaluator, lookup, predicted, framework.name, name, mask)
        }
        framework = framework.model_copy(update=unidentified)
        frameworks.append(_with_record(framework, mask, errors, fitted_cases, records))
    current = current.model_copy(update={"hardware": hardware, "framework": frameworks})
    # then each scale-out network NCCL's IB constants do not describe, under the constants just fitted
    networks = []
    fitted_file = current

    def constants(accelerator: str, framework: str) -> Efficiency:
        return efficiency_for(by_name[accelerator], framework, file=fitted_file)

    for network in current.network:
        fitted, record = fit_network(network, cases, constants)
        networks.append(fitted)
        if record is not None:
            records[f"network {network.name}"] = record
    return current.model_copy(update={"network": networks}), records


def _moves(
    evaluator: Evaluator,
    lookup: dict[tuple[str, str], Efficiency],
    predicted: Floats,
    framework: str,
    name: str,
    mask: np.ndarray,
) -> bool:
    """Whether the framework constant ``name``, halved, moves any prediction of its runs (``mask``): a run
    without TP, CP, EP or ZeRO-3/FSDP launches no per-layer collective, one without a pipeline sends nothing
    between stages, and a host floor that no run's GPU work falls under is only bounded from above by the
    data, not measured. A constant none of its runs shows is not kept: the default framework's applies."""

    def halved(accelerator: str, stack: str) -> Efficiency:
        base = lookup[(accelerator, stack)]
        if stack != framework:
            return base
        return base.model_copy(update={name: getattr(base, name) / 2})

    changed = evaluator.predict(halved)
    return bool(np.any(np.abs(changed[mask] / predicted[mask] - 1) > 1e-6))


def _hardware_name(case: Case, file: EfficiencyFile) -> str | None:
    profile = hardware_profile_of(case.accelerator.name, file)
    return profile.name if profile else None


def _with_record(
    profile: P,
    mask: np.ndarray,
    errors: Floats,
    cases: Sequence[Case],
    records: dict[str, tuple[int, float, float]],
) -> P:
    if profile.borrows is not None or not mask.any():
        return profile
    median, p90 = error_summary(errors[mask])
    rows = int(mask.sum())
    records[profile.name] = (rows, median, p90)
    sources = sorted({cases[int(i)].source for i in np.flatnonzero(mask)})
    record = FitRecord(sources=sources, rows=rows, median_abs_rel_error=median, p90_abs_rel_error=p90)
    return profile.model_copy(update={"fit": record})


def with_highest_mfu(profile: HardwareProfile, cases: list[Case]) -> HardwareProfile:
    """``profile`` with the highest 16-bit MFU measured on its accelerators in its fit record."""
    found = highest_measured_mfu(cases, profile.accelerators)
    if profile.fit is None or found is None:
        return profile
    mfu, run = found
    return profile.model_copy(
        update={"fit": profile.fit.model_copy(update={"highest_mfu": round(mfu, 4), "highest_mfu_run": run})}
    )


def main() -> int:
    folder = calibration_dir()
    cases = load_cases(folder)
    single = sum(case.fitted and case.num_gpus <= case.system.gpus_per_node for case in cases)
    print(
        f"{len(cases)} measured runs; fitting the {single} of the fit split that ran inside one node",
        file=sys.stderr,
    )
    fitted, records = fit(cases)
    fitted = fitted.model_copy(update={"hardware": [with_highest_mfu(h, cases) for h in fitted.hardware]})
    provenance = fitted.provenance.model_copy(
        update={
            "data": "benchmarks/data/calibration",
            "files": file_digests(folder),
            "split": f"rows with SHA-256('<source>:<row_id>') mod 10 < {FIT_SHARE} are the fit split; GPU and "
            "framework constants are fitted on its rows that ran inside one node, a network profile on its "
            "multi-node rows on that network with no pipeline across nodes; torchtitan never; every other row "
            "is test data",
            "fitted": date.today(),
            "objective": f"soft-L1 of the log error of tokens/s per GPU, scale {LOSS_SCALE}, each (source, "
            "accelerator) group weighted equally; Levenberg-Marquardt",
            "hbm_fraction_why": "not fitted: element-wise kernels are taken to move 80 % of the datasheet HBM "
            "bandwidth (copy kernels reach ~90 % on A100/H100, multi-input fused kernels less); element-wise "
            "work is a few % of a large model's step",
        }
    )
    write_file(fitted.model_copy(update={"provenance": provenance}), EFFICIENCY_FILE)
    for name, (rows, median, p90) in records.items():
        print(f"{name:12} {rows:5} rows  median {median:6.1%}  p90 {p90:6.1%}", file=sys.stderr)
    return 0


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    text = str(value).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{text}"'


def write_file(content: EfficiencyFile, path: Path) -> None:
    """The efficiency file as TOML (written to a temporary file, then renamed)."""
    lines = [
        "# Efficiency profiles of the step-time model (mfukit.perf.efficiency).",
        "# Fitted by `python -m mfukit.perf.calibrate`; edit borrowed profiles by hand, refit the others.",
        "",
        "[provenance]",
    ]
    provenance = content.provenance.model_dump()
    files = provenance.pop("files")
    lines += [f"{key} = {_toml_value(value)}" for key, value in provenance.items()]
    lines += ["", "[provenance.files]"] + [f'"{name}" = "{digest}"' for name, digest in files.items()]
    tables: tuple[tuple[str, Sequence[HardwareProfile | FrameworkProfile | NetworkProfile]], ...] = (
        ("hardware", content.hardware),
        ("framework", content.framework),
        ("network", content.network),
    )
    for table, profiles in tables:
        for profile in profiles:
            data = profile.model_dump(exclude_none=True)
            fit_record = data.pop("fit", None)
            lines += ["", f"[[{table}]]"] + [f"{key} = {_toml_value(value)}" for key, value in data.items()]
            if fit_record:
                lines += ["", f"[{table}.fit]"] + [
                    f"{key} = {_toml_value(value)}" for key, value in fit_record.items()
                ]
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text("\n".join(lines) + "\n", encoding="utf-8")
    temporary.replace(path)
    efficiency_file.cache_clear()


if __name__ == "__main__":
    raise SystemExit(main())
