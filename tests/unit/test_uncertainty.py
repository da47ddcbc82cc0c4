"""Prediction intervals from leave-one-source-out residuals: matched on the regime, from past extrapolations
beyond it, scaled to the coverage measured on held-out runs."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from mfukit.perf.uncertainty import (
    MIN_ROWS,
    MIN_SOURCES,
    SCALES,
    TARGET_COVERAGE,
    Regime,
    Residual,
    _table_of,
    annotated,
    band_scale,
    ceiling_margin,
    interval_for,
    load_residuals,
    scaled,
    write_residuals,
)


def _pool(errors_a: list[float], errors_b: list[float], regime: Regime) -> list[Residual]:
    return [Residual("a", i, regime, e) for i, e in enumerate(errors_a)] + [
        Residual("b", i, regime, e) for i, e in enumerate(errors_b)
    ]


REGIME = Regime("ampere", "megatron-core", "full weights", 512, "16-bit")


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
    other_band = Regime("ampere", "megatron-core", "full weights", 8, "16-bit")
    pool = _pool([0.05] * MIN_ROWS, [-0.05] * MIN_ROWS, other_band)
    interval = interval_for(REGIME, residuals=pool)
    assert interval.matched_on == ("family", "stack", "sharding", "precision")
    assert "band" not in interval.basis()


def test_a_regime_no_run_shares_is_extrapolated_and_rests_on_past_extrapolations() -> None:
    pool = _pool([0.1] * MIN_ROWS, [-0.1] * MIN_ROWS, REGIME)
    zero3 = Regime("ampere", "megatron-core", "sharded weights", 512, "16-bit")
    outside = interval_for(zero3, residuals=pool)
    assert outside.extrapolated and "sharded weights" in outside.reason
    larger = interval_for(Regime("ampere", "megatron-core", "full weights", 4096, "16-bit"), residuals=pool)
    assert larger.extrapolated and "beyond the largest measured" in larger.reason
    # runs whose own held-out prediction extrapolated (sources c and d: a stack no other source ran) were
    # 40 % off: an extrapolated prediction's band is theirs, not the matched runs' 10 %
    novel = Regime("ampere", "nanotron", "full weights", 64, "16-bit")
    matched = [
        Residual(name, i, REGIME, e)
        for name, e in (("a", 0.1), ("b", -0.1), ("e", 0.0))
        for i in range(MIN_ROWS)
    ]
    wider = annotated(
        matched
        + [Residual("c", i, novel, 0.4) for i in range(MIN_ROWS)]
        + [Residual("d", i, novel, -0.4) for i in range(MIN_ROWS)]
    )
    assert {r.source for r in wider if r.extrapolated} == {"c", "d"}
    band = interval_for(zero3, residuals=wider)
    assert band.matched_on == ("runs whose own prediction extrapolated",)
    assert math.log(band.high_factor) / band.scales[1] == pytest.approx(0.4, rel=1e-6)


def test_a_regime_only_one_source_measured_says_how_many_runs_match_and_what_is_needed() -> None:
    # one source's runs of the regime (a second GPU family), the rest of another family: the regime is
    # measured, but too thinly to stand on its own
    hopper = Regime("hopper", "megatron-core", "full weights", 512, "16-bit")
    pool = _pool([0.05] * MIN_ROWS, [-0.05] * MIN_ROWS, REGIME) + [
        Residual("c", i, hopper, 0.0) for i in range(4)
    ]
    thin = interval_for(hopper, residuals=pool)
    assert thin.extrapolated
    assert "4 runs of 1 source match its family, stack, sharding, band, precision" in thin.reason
    assert f"({MIN_ROWS} runs of {MIN_SOURCES} sources needed)" in thin.reason


def test_the_band_is_scaled_until_the_held_out_runs_reach_the_target_coverage() -> None:
    # three sources, each biased its own way: the band pooled from two of them misses the third's runs; the
    # scale is the smallest that puts 80 % of the runs (sources weighted equally) inside their own bands
    sources = {"a": 0.05, "b": -0.05, "c": 0.25}
    pool = annotated(
        [
            Residual(name, i, REGIME, bias + 0.01 * (i % 3))
            for name, bias in sources.items()
            for i in range(MIN_ROWS)
        ]
    )
    interval = interval_for(REGIME, residuals=pool)
    below, above = interval.scales
    assert max(below, above) > 1.0
    bands = np.asarray([[r.band_low, r.band_high] for r in pool])
    errors = np.asarray([r.log_error for r in pool])
    miss = (1 - TARGET_COVERAGE) / 2

    def misses(low_scale: float, high_scale: float) -> tuple[float, float]:
        inside = scaled(bands, low_scale, high_scale)
        return float(np.mean(errors < inside[:, 0])), float(np.mean(errors > inside[:, 1]))

    # each half is the smallest that leaves at most 10 % of the runs beyond it
    assert max(misses(below, above)) <= miss
    if below > SCALES[0]:
        assert misses(below - 0.05, above)[0] > miss
    if above > SCALES[0]:
        assert misses(below, above - 0.05)[1] > miss
    assert interval.low_factor < 1.0 < interval.high_factor


def test_a_held_out_source_does_not_inform_its_own_interval() -> None:
    pool = _pool([0.3] * MIN_ROWS, [0.0] * MIN_ROWS, REGIME)
    assert interval_for(REGIME, residuals=pool).high_factor == pytest.approx(math.exp(0.3))
    alone = interval_for(REGIME, residuals=pool, exclude_source="a")
    assert alone.sources == 1 and alone.high_factor == pytest.approx(1.0)


def test_the_residual_table_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "loso_residuals.csv"
    pool = _pool([0.01, 0.02], [-0.03], REGIME)
    write_residuals(path, pool)
    assert load_residuals(path) == tuple(annotated(pool))


def test_the_shipped_table_covers_every_calibration_source() -> None:
    from mfukit.perf.calibration_data import load_cases

    shipped = {r.source for r in load_residuals()}
    assert shipped == {case.source for case in load_cases()}, "refit: python -m mfukit.perf.calibrate"


def test_a_plan_interval_stops_at_the_kernel_ceiling_and_never_below_the_estimate() -> None:
    from mfukit import catalog
    from mfukit.core.parallelism import Parallelism
    from mfukit.perf.layouts import Workload, grid_of
    from mfukit.perf.planner import evaluate_grid, plan_at
    from mfukit.perf.step_time import machine_for
    from mfukit.perf.uncertainty import Interval

    workload = Workload(model=catalog.model("gpt3-175b"), seq_len=2048, global_batch_sequences=1536)
    layout = Parallelism(tp=8, pp=8, dp=16, recompute="full")
    grid = grid_of([layout], model=workload.model, micro_batch_size=[1], num_microbatches=[96])
    machine = machine_for(catalog.system("dgx-a100-80gb"), catalog.accelerator("a100-80gb-sxm"), 1024)
    estimate, memory, crosses = evaluate_grid(workload, grid, machine)
    wide = Interval(0.5, 10.0, 100, 5, ("family",), False, "")
    plan = plan_at(workload, grid, estimate, memory, crosses, 0, None, wide)
    kernels = plan.breakdown_s["compute"] + plan.breakdown_s["recompute"]
    assert plan.mfu_interval is not None
    assert plan.mfu_interval[1] == pytest.approx(plan.mfu * plan.step_time_s / kernels)
    assert wide.capped(0.7).high_factor == 1.0 and wide.capped(2.0).high_factor == 2.0


def test_the_kernel_ceiling_is_stretched_as_far_as_held_out_runs_passed_it() -> None:
    # every run 30 % faster than predicted; their ceilings at +20 %: the margin is the smallest step that
    # leaves none of them above it (1.1: 1.2 x 1.1 = 1.32), and with it the band's 1.4 may stand
    base = [
        Residual(s, i, REGIME, math.log(1.3), band_low=-0.1, band_high=math.log(1.4), ceiling=math.log(1.2))
        for s in "abcd"
        for i in range(5)
    ]
    table = _table_of(tuple(base))
    everyone = np.ones(len(base), dtype=bool)
    assert ceiling_margin(table, everyone) == pytest.approx(1.1)
    assert band_scale(table, everyone)[1] <= 1.0
    # a fifth of the runs twice as fast as their ceiling says: the margin must reach past 2
    fast = [replace(r, log_error=math.log(2.5)) for r in base if r.row_id == 0]
    wider = _table_of(tuple([r for r in base if r.row_id != 0] + fast))
    assert ceiling_margin(wider, everyone) >= 2.5 / 1.2 - 0.05
    interval = interval_for(REGIME, residuals=tuple(base))
    assert interval.capped(1.2).high_factor == pytest.approx(min(interval.high_factor, 1.2 * 1.1))
