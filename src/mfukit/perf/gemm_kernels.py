"""GEMMs timed alone (isolated-kernel sweeps), and how the step-time model's GEMM curve compares with them.

The curve of :mod:`mfukit.perf.gemm` has four constants (the peak fraction, the tile half-dimension, the
K prologue and the launch latency). Fitted to a sweep of shapes each timed alone it reproduces them closely,
which tests its structure. The step-time model's own constants are fitted on whole training steps
(:mod:`mfukit.perf.calibrate`), where a GEMM is slower than alone (clocks under a node's power draw, SMs and
HBM shared with collectives, operands no longer resident in L2, which a kernel repeated on the same
buffers keeps) and where its constants also absorb what the rest of the model leaves out. The sweeps are
kept to measure that gap, not fitted: pinning the H100 curve to XLA's kernels made the leave-one-source-out
error worse (docs/performance-model.md). ``benchmarks/gemm_curve.py`` prints both.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mfukit import catalog
from mfukit.core.hardware import Accelerator, Dtype
from mfukit.errors import InputError
from mfukit.perf.efficiency import Efficiency, FitRecord, model_gemm_curve
from mfukit.perf.evaluator import error_summary, levenberg_marquardt, soft_l1
from mfukit.perf.gemm import Shapes
from mfukit.perf.layouts import Floats

KERNELS_FILE = Path(__file__).resolve().parents[3] / "benchmarks" / "data" / "kernels" / "gemm_kernels.csv"
COLUMNS = ("source", "source_detail", "accelerator", "dtype", "batch", "m", "n", "k", "flops_per_s")
# searched in logit / log space: peak fraction 1-99.9 %, tile half-dimension 1-4096, K prologue 0.1-4096
# elements, launch and drain 0.1-100 us
_BOUNDS = (
    (math.log(0.01 / 0.99), math.log(0.999 / 0.001)),
    (0.0, math.log(4096.0)),
    (math.log(0.1), math.log(4096.0)),
    (math.log(1e-7), math.log(1e-4)),
)


@dataclass(frozen=True)
class KernelRun:
    """One GEMM timed alone: ``batch`` products (M x K) @ (K x N) in ``dtype`` at ``flops_per_s``."""

    source: str
    accelerator: Accelerator
    dtype: Dtype
    batch: int
    m: int
    n: int
    k: int
    flops_per_s: float


def load_kernel_runs(path: Path = KERNELS_FILE) -> list[KernelRun]:
    """The kernel sweeps of ``path`` (the shipped ``benchmarks/data/kernels/gemm_kernels.csv`` by default);
    a bad row is an :class:`InputError` naming its line and column."""
    if not path.is_file():
        raise InputError(
            f"cannot find {path}", field="path", hint="a CSV with the header " + ",".join(COLUMNS)
        )
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        missing = [name for name in COLUMNS if name not in (reader.fieldnames or ())]
        if missing:
            raise InputError(
                f"{path.name} lacks the column(s) {', '.join(missing)}",
                field=path.name,
                hint="the header is " + ",".join(COLUMNS),
            )
        return [_kernel_run(row, path.name, line) for line, row in enumerate(reader, start=2)]


def _kernel_run(row: dict[str, str], name: str, line: int) -> KernelRun:
    def bad(column: str, hint: str) -> InputError:
        return InputError(
            f"{name} line {line}, column {column}: {row.get(column)!r} is not valid",
            field=f"{name}:{line}:{column}",
            hint=hint,
        )

    accelerator = catalog.accelerator(row["accelerator"], field=f"{name}:{line}:accelerator", source=name)
    if row["dtype"] not in accelerator.peak_flops_per_s:
        raise bad("dtype", "one of " + ", ".join(sorted(accelerator.peak_flops_per_s)))
    sizes: list[int] = []
    for column in ("batch", "m", "n", "k"):
        text = row[column]
        if not text.isdigit() or int(text) < 1:
            raise bad(column, "a whole number of at least 1")
        sizes.append(int(text))
    try:
        rate = float(row["flops_per_s"])
    except ValueError:
        raise bad("flops_per_s", "the measured rate in FLOP/s, e.g. 7.8e14") from None
    if not 0 < rate <= accelerator.peak_flops(row["dtype"]):
        raise bad("flops_per_s", f"a rate above 0 and at most the part's {row['dtype']} peak")
    batch, m, n, k = sizes
    return KernelRun(row["source"], accelerator, row["dtype"], batch, m, n, k, rate)


@dataclass(frozen=True)
class _Sweep:
    """One part's runs of one dtype as the curve takes them."""

    accelerator: Accelerator
    dtype: Dtype
    shapes: Shapes
    measured_s: Floats

    @classmethod
    def of(cls, runs: Sequence[KernelRun]) -> _Sweep:
        batch, m, n, k = (np.asarray([float(getattr(r, f)) for r in runs]) for f in ("batch", "m", "n", "k"))
        measured_s = 2.0 * batch * m * n * k / np.asarray([r.flops_per_s for r in runs])
        shapes = Shapes.operands_once(m, k, n, batch, runs[0].dtype)
        return cls(runs[0].accelerator, runs[0].dtype, shapes, measured_s)

    def model_over_measured(self, efficiency: Efficiency) -> Floats:
        """Each run's time on the model's curve under ``efficiency`` over its measured time."""
        curve = model_gemm_curve(self.accelerator, efficiency, self.dtype)
        return np.asarray(curve.time_s(self.shapes) / self.measured_s, dtype=np.float64)


def _decoded(base: Efficiency, dtype: Dtype, x: Floats) -> Efficiency:
    """``base`` with the curve constants of the search point ``x`` (its peak fraction on ``dtype``'s field)."""
    fraction, tile, k_overhead, latency = (
        min(max(float(v), low), high) for v, (low, high) in zip(x, _BOUNDS, strict=True)
    )
    return base.model_copy(
        update={
            "fp8_gemm_peak_fraction" if dtype == "fp8" else "gemm_peak_fraction": 1
            / (1 + math.exp(-fraction)),
            "gemm_tile_half_dim": math.exp(tile),
            "gemm_k_overhead": math.exp(k_overhead),
            "gemm_latency_s": math.exp(latency),
        }
    )


def fit_curve(base: Efficiency, runs: Sequence[KernelRun]) -> tuple[Efficiency, FitRecord]:
    """``base`` (a part's constants) with the GEMM curve that reproduces ``runs`` (one dtype on that part):
    the peak fraction the kernels reach alone, the tile half-dimension, the K prologue and the launch
    latency; and the fit record (rows, error on them). The memory roofline keeps ``base``'s HBM fraction."""
    sweep = _Sweep.of(runs)

    def residuals(x: Floats) -> Floats:
        ratios = sweep.model_over_measured(_decoded(base, sweep.dtype, x))
        return soft_l1(np.log(ratios), np.ones(len(runs)))

    start = np.asarray([math.log(0.8 / 0.2), math.log(32.0), math.log(64.0), math.log(5e-6)])
    fitted = _decoded(base, sweep.dtype, levenberg_marquardt(residuals, start, iterations=100))
    median, p90 = error_summary(1 / sweep.model_over_measured(fitted) - 1)
    record = FitRecord(
        sources=sorted({r.source for r in runs}),
        rows=len(runs),
        median_abs_rel_error=median,
        p90_abs_rel_error=p90,
    )
    return fitted, record


def model_time_ratios(runs: Sequence[KernelRun], efficiency: Efficiency) -> Floats:
    """Each run's time on the step-time model's GEMM curve (``efficiency``'s constants) over its measured
    time (``runs``: one dtype on one accelerator): 2 means the model runs that GEMM at half the speed it ran
    alone."""
    return _Sweep.of(runs).model_over_measured(efficiency)
