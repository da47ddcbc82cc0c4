"""How long one GEMM takes on one accelerator: a tiled, wave-quantised roofline.

A GEMM (M x K) @ (K x N), or a batch of them in one kernel, runs as thread blocks (CTAs), each computing one ``tm x tn`` tile of the output
over a share of K. The accelerator runs them ``compute_units`` at a time (one wave per SM or CU), so a
GEMM of ``C`` CTAs takes ``ceil(C / units)`` waves whatever the last wave's occupancy: the *wave
quantisation* that makes a GEMM whose tiles barely overflow a wave nearly twice as slow per FLOP (NVIDIA,
"Matrix Multiplication Background User's Guide", §"Wave Quantization"; Calculon, Isaev et al. SC23, uses
measured per-size efficiency tables to the same effect). One CTA's time is

    2 x tm x tn x (K / s + k0) / (per-unit peak x tile efficiency)

where ``k0`` is the prologue and epilogue of a tile in K-steps (filling the operand pipeline, writing the
output), ``s`` the split-K factor (cuBLAS splits K when the tiles alone cannot fill the GPU, and pays a
reduction of the fp32 partial sums through memory), and the tile efficiency ``1 / (1 + d_half (1/tm +
1/tn) / 2)`` the cost of loading operands into shared memory, which a larger tile amortises over more
multiply-adds (a square tile of side ``d_half`` reaches half the peak). Like cuBLAS's heuristics, the model
takes the fastest of a few standard tiles and split factors. The result is bounded below by the memory
roofline (operands and output once through HBM) and gets a fixed launch-and-drain latency.

Shapes repeat across the planner's layouts (M depends on the micro-batch, N and K on TP), so the curve is
computed once per distinct shape.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mfukit.perf.layouts import Floats, Ints

TILES: tuple[tuple[int, int], ...] = ((256, 128), (128, 256), (128, 128), (128, 64), (64, 128), (64, 64))
SPLIT_K: tuple[int, ...] = (1, 2, 4)
SPLIT_PARTIAL_BYTES = 4.0  # fp32 partial sums, written by each split and read back by the reduction


@dataclass(frozen=True)
class Shapes:
    """GEMM shapes of many configurations, stored once per distinct shape."""

    table: Floats  # 5 x distinct: M, K, N, the batch and the bytes the kernel moves
    inverse: Ints  # configuration -> column of ``table``
    shape: tuple[int, ...]

    @classmethod
    def of(cls, m: Floats, k: Floats, n: Floats, batch: Floats | float, bytes_moved: Floats) -> Shapes:
        columns = (m, k, n, batch, bytes_moved)
        shape = np.broadcast_shapes(*(np.shape(x) for x in columns))
        table = np.stack([np.broadcast_to(x, shape).ravel() for x in columns])
        unique, inverse = np.unique(table, axis=1, return_inverse=True)
        return cls(unique, np.asarray(inverse, dtype=np.int64).reshape(-1), shape)

    @classmethod
    def operands_once(cls, m: Floats, k: Floats, n: Floats, batch: Floats | float, dtype: str) -> Shapes:
        """``batch`` products (M x K) @ (K x N) in ``dtype`` (FP8 or 16-bit) whose operands and output go
        through HBM once."""
        element_bytes = 1.0 if dtype == "fp8" else 2.0
        return cls.of(m, k, n, batch, element_bytes * batch * (m * k + k * n + m * n))


@dataclass(frozen=True)
class GemmCurve:
    """The constants of one accelerator's GEMM curve (from its efficiency profile and catalog entry)."""

    peak_flops_per_s: float  # the dense peak of the GEMM's input type x the fitted peak fraction
    compute_units: int | None  # SMs or CUs; None: no wave quantisation (tiles spread evenly)
    tile_half_dim: float  # d_half of the tile efficiency
    k_overhead: float  # k0, in K elements per CTA
    latency_s: float  # launch and drain of one kernel
    hbm_bytes_per_s: float  # what the kernel's operands move at

    def one_gemm_s(self, m: int, n: int, k: int, dtype: str) -> float:
        """Seconds of one (M x K) @ (K x N) GEMM in ``dtype`` whose operands and output go through HBM once."""
        rows, inner, cols = (np.asarray([float(x)]) for x in (m, k, n))
        return float(self.time_s(Shapes.operands_once(rows, inner, cols, 1.0, dtype))[0])

    def time_s(self, shapes: Shapes) -> Floats:
        """Seconds for each GEMM of ``shapes``."""
        times = self._unique_time_s(*shapes.table)
        return np.asarray(times[shapes.inverse].reshape(shapes.shape), dtype=np.float64)

    def _unique_time_s(self, m: Floats, k: Floats, n: Floats, batch: Floats, bytes_moved: Floats) -> Floats:
        # every (tile, split) candidate at once: rows are candidates, columns shapes
        tm, tn, split = (_CANDIDATES[:, i : i + 1] for i in range(3))
        tile_efficiency = 1.0 / (1.0 + self.tile_half_dim * (1.0 / tm + 1.0 / tn) / 2.0)
        if self.compute_units:
            units = float(self.compute_units)
            ctas = np.ceil(m / tm) * np.ceil(n / tn) * batch * split
            slots = np.ceil(ctas / units) * units  # CTA slots of all waves, the last one's idle ones included
        else:
            slots = m * n / (tm * tn) * batch * split
        per_cta_flops = 2.0 * tm * tn * (k / split + self.k_overhead)
        compute = slots * per_cta_flops / (self.peak_flops_per_s * tile_efficiency)
        # each split writes its fp32 partial tile and the reduction reads them all back
        compute = (
            compute
            + np.where(split > 1, 2.0 * split * batch * m * n * SPLIT_PARTIAL_BYTES, 0.0)
            / self.hbm_bytes_per_s
        )
        best = np.min(compute, axis=0)
        return np.asarray(
            np.maximum(best, bytes_moved / self.hbm_bytes_per_s) + self.latency_s, dtype=np.float64
        )


_CANDIDATES = np.asarray([(tm, tn, split) for tm, tn in TILES for split in SPLIT_K], dtype=np.float64)
