"""GEMMs timed alone: the table loads strictly, and the GEMM curve's structure reproduces real kernels."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mfukit import catalog
from mfukit.errors import InputError
from mfukit.perf.efficiency import efficiency_for, model_gemm_curve
from mfukit.perf.gemm import GemmCurve, Shapes
from mfukit.perf.gemm_kernels import COLUMNS, KernelRun, fit_curve, load_kernel_runs, model_time_ratios

H100 = catalog.accelerator("h100-sxm")
GOOD_ROW = "xla,sm_90 table,h100-sxm,bf16,1,4096,4096,4096,7.8e14"


def _csv(tmp_path: Path, *rows: str, header: str = ",".join(COLUMNS)) -> Path:
    path = tmp_path / "kernels.csv"
    path.write_text("\n".join((header, *rows)) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("row", "column"),
    [
        ("xla,t,h100-sxm,bf16,1,4096,0,4096,7.8e14", "n"),
        ("xla,t,h100-sxm,bf16,1,4096,4096,4096,fast", "flops_per_s"),
        ("xla,t,h100-sxm,bf16,1,4096,4096,4096,2e15", "flops_per_s"),  # above the BF16 peak
        ("xla,t,h100-sxm,int3,1,4096,4096,4096,7.8e14", "dtype"),
        ("xla,t,h100-xxl,bf16,1,4096,4096,4096,7.8e14", "accelerator"),
    ],
)
def test_a_bad_row_names_its_line_and_column(tmp_path: Path, row: str, column: str) -> None:
    with pytest.raises(InputError) as error:
        load_kernel_runs(_csv(tmp_path, GOOD_ROW, row))
    assert error.value.field == f"kernels.csv:3:{column}"


def test_a_missing_column_is_named(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="flops_per_s"):
        load_kernel_runs(_csv(tmp_path, header=",".join(COLUMNS[:-1])))


def test_the_fit_recovers_the_constants_of_a_known_curve() -> None:
    truth = GemmCurve(
        H100.peak_flops("bf16") * 0.9, H100.compute_units, 40.0, 96.0, 8e-6, H100.hbm_bytes_per_s * 0.8
    )
    sizes = [256, 512, 1024, 2048, 4096]
    grid = [(b, m, n, k) for b in (1, 4) for m in sizes for n in sizes for k in sizes]
    b, m, n, k = (np.asarray([float(g[i]) for g in grid]) for i in range(4))
    seconds = truth.time_s(Shapes.operands_once(m, k, n, b, "bf16"))
    runs = [
        KernelRun("synthetic", H100, "bf16", *map(int, g), 2.0 * g[0] * g[1] * g[2] * g[3] / t)
        for g, t in zip(grid, seconds, strict=True)
    ]
    fitted, record = fit_curve(efficiency_for(H100), runs)  # its HBM fraction is the truth's 0.8
    assert record.median_abs_rel_error < 0.01
    assert fitted.gemm_peak_fraction == pytest.approx(0.9, rel=0.05)
    assert fitted.gemm_tile_half_dim == pytest.approx(40.0, rel=0.15)
    assert fitted.gemm_latency_s == pytest.approx(8e-6, rel=0.15)


@pytest.mark.parametrize("name", ["h100-sxm", "b200"])
def test_the_curve_fitted_to_a_parts_xla_kernels_reproduces_them(name: str) -> None:
    runs = [r for r in load_kernel_runs() if r.accelerator.name == name]
    assert len(runs) == 375 and {r.dtype for r in runs} == {"bf16"}
    _, record = fit_curve(efficiency_for(runs[0].accelerator), runs)
    assert record.median_abs_rel_error < 0.05 and record.p90_abs_rel_error < 0.2


def test_the_curve_fitted_to_xla_h100_kernels_predicts_mamf_finders_best_gemm() -> None:
    """The structure check benchmarks/gemm_curve.py reports: the 375 shipped H100 kernels (256-4096 per side)
    reproduced, and mamf-finder's best shape, outside their range and never fitted, predicted."""
    runs = [r for r in load_kernel_runs() if r.accelerator.name == "h100-sxm"]
    fitted, _ = fit_curve(efficiency_for(H100), runs)
    best = H100.max_achievable_gemm.bf16 if H100.max_achievable_gemm else None
    assert best is not None
    seconds = model_gemm_curve(H100, fitted, "bf16").one_gemm_s(best.m, best.n, best.k, "bf16")
    assert 2.0 * best.m * best.n * best.k / seconds == pytest.approx(best.flops_per_s, rel=0.05)


def test_model_time_ratios_are_one_on_the_curve_itself() -> None:
    efficiency = efficiency_for(H100)
    curve = model_gemm_curve(H100, efficiency, "bf16")
    m, n, k = np.asarray([1024.0, 4096.0]), np.asarray([2048.0, 4096.0]), np.asarray([512.0, 4096.0])
    seconds = curve.time_s(Shapes.operands_once(m, k, n, 1.0, "bf16"))
    runs = [
        KernelRun("self", H100, "bf16", 1, int(a), int(b), int(c), 2.0 * a * b * c / t)
        for a, b, c, t in zip(m, n, k, seconds, strict=True)
    ]
    assert model_time_ratios(runs, efficiency) == pytest.approx(1.0, rel=1e-9)
