"""Prediction intervals from leave-one-source-out residuals: matched on the regime, widened beyond it."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from mfukit.perf.uncertainty import (
    EXTRAPOLATION_WIDENING,
    MIN_ROWS,
    Regime,
    Residual,
    interval_for,
    load_residuals,
    write_residuals,
)


def _pool(errors_a: list[float], errors_b: list[float], regime: Regime) -> list[Residual]:
    return [Residual("a", i, regime, e) for i, e in enumerate(errors_a)] + [
        Residual("b", i, regime, e) for i, e in enumerate(errors_b)
    ]


REGIME = Regime("ampere", "megatron-core", "sharded optimizer", 512, "16-bit")


def test_the_interval_is_the_source_weighted_spread_of_matching_residuals() -> None:
    # source a: 20 runs all 10 % faster than predicted; source b: 4 runs all 10 % slower. Weighted per
    # source, the 10th-90th percentiles reach both, where row counts would drown b.
    pool = _pool([math.log(1.1)] * 20, [math.log(0.9)] * 4, REGIME)
    interval = interval_for(REGIME, residuals=pool)
    assert interval.rows == 24 and interval.sources == 2 and not interval.extrapolated
    assert interval.low_factor == pytest.approx(0.9, rel=1e-6)
    assert interval.high_factor == pytest.approx(1.1, rel=1e-6)
    assert interval.around(0.4) == pytest.approx((0.36, 0.44))


def test_too_few_runs_fall_back_to_a_broader_regime_and_say_what_matched() -> None:
    other_band = Regime("ampere", "megatron-core", "sharded optimizer", 8, "16-bit")
    pool = _pool([0.05] * MIN_ROWS, [-0.05] * MIN_ROWS, other_band)
    interval = interval_for(REGIME, residuals=pool)
    assert interval.matched_on == ("family", "stack", "sharding", "precision")
    assert "band" not in interval.basis()


def test_a_regime_no_run_shares_is_extrapolated_and_widened() -> None:
    pool = _pool([0.1] * MIN_ROWS, [-0.1] * MIN_ROWS, REGIME)
    inside = interval_for(REGIME, residuals=pool)
    zero3 = Regime("ampere", "megatron-core", "sharded weights", 512, "16-bit")
    outside = interval_for(zero3, residuals=pool)
    assert outside.extrapolated and "sharded weights" in outside.reason
    assert math.log(outside.high_factor) == pytest.approx(
        EXTRAPOLATION_WIDENING * math.log(inside.high_factor)
    )
    larger = interval_for(
        Regime("ampere", "megatron-core", "sharded optimizer", 4096, "16-bit"), residuals=pool
    )
    assert larger.extrapolated and "beyond the largest measured" in larger.reason


def test_a_held_out_source_does_not_inform_its_own_interval() -> None:
    pool = _pool([0.3] * MIN_ROWS, [0.0] * MIN_ROWS, REGIME)
    assert interval_for(REGIME, residuals=pool).high_factor == pytest.approx(math.exp(0.3))
    alone = interval_for(REGIME, residuals=pool, exclude_source="a")
    assert alone.sources == 1 and alone.high_factor == pytest.approx(1.0)


def test_the_residual_table_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "loso_residuals.csv"
    pool = _pool([0.01, 0.02], [-0.03], REGIME)
    write_residuals(path, pool)
    assert load_residuals(path) == tuple(pool)


def test_the_shipped_table_covers_every_calibration_source() -> None:
    from mfukit.perf.calibration_data import load_cases

    shipped = {r.source for r in load_residuals()}
    assert shipped == {case.source for case in load_cases()}, "refit: python -m mfukit.perf.calibrate"
