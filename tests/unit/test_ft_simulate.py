"""The Monte-Carlo against the analytic model where both apply, and its own contracts."""

from __future__ import annotations

import numpy as np
import pytest

from mfukit.errors import InputError
from mfukit.ft.failures import JobFailures, job_failures, load_failure_model
from mfukit.ft.interval import expected_run
from mfukit.ft.restart import RestartParts
from mfukit.ft.run import RunModel
from mfukit.ft.simulate import simulate

DAY = 86400.0


def failures(preset: str = "llama3", num_gpus: int = 16384, **kwargs: object) -> JobFailures:
    spec = load_failure_model(preset, source="test")
    return job_failures(spec, num_gpus=num_gpus, num_nodes=num_gpus // 8, **kwargs)  # type: ignore[arg-type]


def llama_run(**changes: object) -> RunModel:
    parts = RestartParts(
        detection_s=100.0,
        replacement_s=300.0,
        init_s=300.0,
        load_s=30.0,
        fast_forward_s=0.0,
        hot_spares=int(changes.pop("hot_spares", 0)),  # type: ignore[call-overload]
        repair_s=changes.pop("repair_s", None),  # type: ignore[arg-type]
    )
    settings: dict[str, object] = {
        "work_s": 20 * DAY,
        "interval_s": 1200.0,
        "blocking_s": 0.005,
        "persist_s": 57.0,
        "save_s": 57.0,
        "failures": failures(),
        "restart": parts,
    }
    settings.update(changes)
    return RunModel(**settings)  # type: ignore[arg-type]


CASES = {
    "llama3 async, maintenance": llama_run(),
    "llama3 sync hourly": llama_run(interval_s=3600.0, blocking_s=57.0, persist_s=0.0),
    "hot spares, 1-day repair": llama_run(hot_spares=8, repair_s=DAY),
    "hot spares that never return": llama_run(hot_spares=16),
    "meta rsc-1 16k, 5-min saves": llama_run(
        failures=failures("meta-rsc1", 16000), interval_s=3600.0, blocking_s=300.0, persist_s=0.0
    ),
}


@pytest.mark.parametrize("run", CASES.values(), ids=CASES.keys())
def test_simulation_agrees_with_the_analytic_model(run: RunModel) -> None:
    expected = expected_run(run)
    sim = simulate(run, replicas=400, seed=3)
    assert float(sim.ettr.mean()) == pytest.approx(expected.ettr, abs=0.02)
    wall = float(sim.wall_s.mean())
    assert float(sim.interruptions.mean()) == pytest.approx(
        expected.interruptions_per_s * expected.wall_s, rel=0.05
    )
    simulated_rework = float(sim.lost_s["rework"].mean()) / wall
    assert simulated_rework == pytest.approx(expected.rework, abs=0.01)
    restart = sum(float(sim.lost_s[k].mean()) for k in ("detection", "replacement", "relaunch")) / wall
    assert restart == pytest.approx(expected.detection + expected.replacement + expected.relaunch, abs=0.01)


def test_spares_shorten_the_run() -> None:
    without = simulate(llama_run(), replicas=200, seed=1)
    spares = simulate(llama_run(hot_spares=8, repair_s=DAY), replicas=200, seed=1)
    assert spares.lost_s["replacement"].mean() < 0.2 * without.lost_s["replacement"].mean()


def test_same_seed_same_result() -> None:
    run = llama_run()
    first, second = simulate(run, replicas=50, seed=42), simulate(run, replicas=50, seed=42)
    assert np.array_equal(first.ettr, second.ettr) and np.array_equal(
        first.interruptions, second.interruptions
    )
    assert first.timeline == second.timeline
    assert not np.array_equal(first.ettr, simulate(run, replicas=50, seed=43).ettr)


def test_timeline_and_accounting_close() -> None:
    run = llama_run()
    sim = simulate(run, replicas=20, seed=5)
    times = [event.time_s for event in sim.timeline]
    assert times == sorted(times) and sim.timeline[-1].kind == "finish"
    assert sim.timeline[-1].time_s == pytest.approx(sim.wall_s[0])
    failures_seen = sum(1 for event in sim.timeline if event.kind.startswith("failure"))
    assert failures_seen == sim.interruptions[0]
    # every second of wall clock is work or one of the causes
    lost = sum(values for values in sim.lost_s.values())
    assert np.allclose(run.work_s + lost - run.work_s * run.straggler_loss_frac, sim.wall_s, rtol=1e-9)


def test_weibull_keeps_the_mean_rate() -> None:
    run = llama_run(weibull_shape=0.7)
    sim = simulate(run, replicas=200, seed=2)
    exponential = simulate(llama_run(), replicas=200, seed=2)
    assert 0.0 < sim.ettr.mean() <= 1.0
    assert sim.interruptions.mean() == pytest.approx(exponential.interruptions.mean(), rel=0.15)


def test_no_progress_is_refused() -> None:
    with pytest.raises(InputError, match="MTBF"):
        simulate(llama_run(interval_s=30 * DAY), replicas=10, seed=0)


def test_progress_reports_every_replica() -> None:
    seen: list[tuple[int, int]] = []
    simulate(llama_run(), replicas=30, seed=0, progress=lambda done, total: seen.append((done, total)))
    assert seen[-1] == (30, 30)
