"""Invariants of the fault-tolerance model: ETTR in (0, 1], monotone in the failure rate, Daly's optimum
below Young's and minimising simulated waste, and the simulator deterministic for a seed."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mfukit import units
from mfukit.ft.failures import job_failures, load_failure_model
from mfukit.ft.interval import daly_interval_s, expected_run, young_interval_s
from mfukit.ft.restart import RestartParts
from mfukit.ft.run import RunModel
from mfukit.ft.simulate import simulate

DAY = 86400.0
SPEC = load_failure_model("meta-rsc1", source="property")


def run_for(
    node_rate: float,
    *,
    num_gpus: int = 8192,
    interval_s: float = 1800.0,
    blocking_s: float = 60.0,
    persist_s: float = 0.0,
    restart_s: float = 600.0,
    work_s: float = 10 * DAY,
) -> RunModel:
    failures = job_failures(
        SPEC,
        num_gpus=num_gpus,
        num_nodes=num_gpus // 8,
        node_rate_per_s=units.parse_failure_rate_per_s(node_rate),
    )
    return RunModel(
        work_s=work_s,
        interval_s=interval_s,
        blocking_s=blocking_s,
        persist_s=persist_s,
        save_s=blocking_s,
        failures=failures,
        restart=RestartParts(60.0, 0.0, restart_s, 0.0, 0.0, 0, None),
    )


rates = st.floats(min_value=0.1, max_value=20.0)
intervals = st.floats(min_value=60.0, max_value=4 * 3600.0)
blockings = st.floats(min_value=0.0, max_value=600.0)


@settings(max_examples=60, deadline=None)
@given(rates, intervals, blockings, st.floats(min_value=0.0, max_value=600.0))
def test_expected_ettr_is_a_fraction(rate: float, interval: float, blocking: float, persist: float) -> None:
    ettr = expected_run(run_for(rate, interval_s=interval, blocking_s=blocking, persist_s=persist)).ettr
    assert 0.0 < ettr <= 1.0


@settings(max_examples=8, deadline=None)
@given(rates, st.integers(min_value=0, max_value=2**31 - 1))
def test_simulated_ettr_is_a_fraction(rate: float, seed: int) -> None:
    sim = simulate(run_for(rate, work_s=2 * DAY), replicas=20, seed=seed)
    assert np.all(sim.ettr > 0.0) and np.all(sim.ettr <= 1.0)


@settings(max_examples=60, deadline=None)
@given(rates, st.floats(min_value=1.05, max_value=4.0), intervals, blockings)
def test_ettr_falls_as_the_failure_rate_rises(
    rate: float, factor: float, interval: float, blocking: float
) -> None:
    low = expected_run(run_for(rate, interval_s=interval, blocking_s=blocking)).ettr
    high = expected_run(run_for(rate * factor, interval_s=interval, blocking_s=blocking)).ettr
    assert high < low


def test_simulated_ettr_falls_as_the_failure_rate_rises() -> None:
    means = [simulate(run_for(rate, work_s=5 * DAY), replicas=200, seed=9).ettr.mean() for rate in (1, 3, 9)]
    assert means[0] > means[1] > means[2]


@given(st.floats(1.0, 3600.0), st.floats(3600.0, 1e8))
def test_daly_sits_below_young_and_grows_with_the_mtbf(delta_s: float, mtbf_s: float) -> None:
    tau = daly_interval_s(delta_s, mtbf_s)
    assert 0 < tau < young_interval_s(delta_s, mtbf_s)  # Young (1974) ignores the time the save itself takes
    assert daly_interval_s(delta_s, 2 * mtbf_s) > tau


@settings(max_examples=4, deadline=None)
@given(st.floats(min_value=2.0, max_value=10.0), st.floats(min_value=30.0, max_value=600.0))
def test_daly_optimum_minimises_simulated_waste(rate: float, blocking: float) -> None:
    """Saving 3x more or 3x less often than Daly's optimum wastes more (common random numbers)."""
    base = run_for(rate, blocking_s=blocking, work_s=5 * DAY)
    optimum = daly_interval_s(blocking, base.mtbf_s)

    def waste(interval: float) -> float:
        run = run_for(rate, interval_s=interval, blocking_s=blocking, work_s=5 * DAY)
        return float(simulate(run, replicas=300, seed=1).wall_s.mean()) - run.work_s

    at_optimum = waste(optimum)
    assert at_optimum < waste(optimum / 3.0)
    assert at_optimum < waste(optimum * 3.0)


@settings(max_examples=5, deadline=None)
@given(st.integers(min_value=0, max_value=2**31 - 1))
def test_same_seed_same_result(seed: int) -> None:
    run = run_for(5.0, work_s=2 * DAY)
    first, second = simulate(run, replicas=20, seed=seed), simulate(run, replicas=20, seed=seed)
    assert np.array_equal(first.wall_s, second.wall_s)
    assert first.interruptions_by_category == second.interruptions_by_category


@settings(max_examples=60, deadline=None)
@given(rates, st.floats(min_value=1e6, max_value=1e300), st.floats(min_value=0.0, max_value=600.0))
def test_intervals_far_beyond_the_mtbf_stay_finite(rate: float, interval: float, persist: float) -> None:
    """An interval of many MTBFs (1e8 steps, say) gives an ETTR near zero, never an overflow: the shares of
    wall clock stay fractions that sum to one, and a longer interval never does better."""
    run = run_for(rate, interval_s=interval, persist_s=persist, work_s=1e300)
    expected = expected_run(run)
    shares = [expected.ettr, expected.straggler, *expected.lost_fractions.values()]
    assert all(0.0 <= share <= 1.0 for share in shares)
    assert abs(sum(shares) - 1.0) < 1e-9
    assert expected.wall_s >= run.work_s
    longer = expected_run(run_for(rate, interval_s=interval * 2.0, persist_s=persist, work_s=1e300))
    assert longer.ettr <= expected.ettr
    if interval > 1000.0 * run.mtbf_s:
        assert expected.ettr < 1e-100
