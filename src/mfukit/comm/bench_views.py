"""What ``mfukit bench matmul`` and ``bench membw`` show: the measured points against the catalog peak, as
command outputs (``echo``: the inputs the command echoes). Reads the points only; no torch here."""

from __future__ import annotations

from typing import Any, cast

from mfukit import units
from mfukit.comm.bench import MatmulPoint, MembwPoint
from mfukit.core.hardware import Accelerator, Dtype
from mfukit.core.results import Output, Table, shown


def _threads_note(cpu_threads: int | None) -> list[str]:
    return [f"{cpu_threads} torch CPU thread(s)"] if cpu_threads is not None else []


def matmul_output(
    points: list[MatmulPoint],
    dtypes: list[str],
    accelerator: Accelerator | None,
    environment: dict[str, Any],
    *,
    cpu_threads: int | None,
    thread_warning: str | None,
    echo: dict[str, Any],
) -> Output:
    """GEMM throughput per dtype and size; ``cpu_threads``: the torch threads on CPU (None on CUDA)."""
    best = {dtype: max(p.flops_per_s for p in points if p.dtype == dtype) for dtype in dtypes}
    peaks = {d: accelerator.peak_flops_per_s.get(cast(Dtype, d)) for d in dtypes} if accelerator else {}
    table = Table(
        "GEMM throughput",
        ["dtype", "M=N=K", "time", "achieved", "of peak"],
        csv_columns=["dtype", "size", "time_s", "flops_per_s", "fraction_of_peak"],
    )
    for point in points:
        peak = peaks.get(point.dtype)
        table.add(
            point.dtype,
            point.size,
            shown(point.time_s, units.format_duration),
            shown(point.flops_per_s, units.format_flops_rate),
            shown(point.flops_per_s / peak if peak else None, units.format_percent),
        )
    result = {
        "points": points,
        "peak_flops_per_s": best,
        "catalog_peak_flops_per_s": peaks,
        "fraction_of_catalog_peak": {d: best[d] / p for d, p in peaks.items() if p},
        "environment": environment,
    }
    assumptions = [
        "FLOP/s = 2 M N K / time; two warm-up calls; at least 0.2 s timed per point",
        *_threads_note(cpu_threads),
    ]
    return Output(
        "bench.matmul/1",
        result,
        inputs=echo,
        assumptions=assumptions,
        warnings=[thread_warning] if thread_warning else [],
        tables=[table],
    )


def membw_output(
    points: list[MembwPoint],
    accelerator: Accelerator | None,
    environment: dict[str, Any],
    *,
    cpu_threads: int | None,
    thread_warning: str | None,
    echo: dict[str, Any],
) -> Output:
    """Copy bandwidth per buffer size; ``cpu_threads``: the torch threads on CPU (None on CUDA)."""
    limit = accelerator.hbm_bytes_per_s if accelerator else None
    table = Table(
        "Copy bandwidth",
        ["buffer", "time", "bandwidth", "of HBM peak"],
        csv_columns=["buffer_bytes", "time_s", "bytes_per_s", "fraction_of_peak"],
    )
    for point in points:
        table.add(
            shown(point.buffer_bytes, units.format_bytes),
            shown(point.time_s, units.format_duration),
            shown(point.bytes_per_s, units.format_rate),
            shown(point.bytes_per_s / limit if limit else None, units.format_percent),
        )
    best = max(p.bytes_per_s for p in points)
    result = {
        "points": points,
        "best_bytes_per_s": best,
        "catalog_bytes_per_s": limit,
        "fraction_of_catalog": best / limit if limit else None,
        "environment": environment,
    }
    assumptions = [
        "bytes moved = 2 x buffer per copy (read + write, STREAM Copy convention)",
        *_threads_note(cpu_threads),
    ]
    return Output(
        "bench.membw/1",
        result,
        inputs=echo,
        assumptions=assumptions,
        warnings=[thread_warning] if thread_warning else [],
        tables=[table],
    )
