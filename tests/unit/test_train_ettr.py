"""The ETTR ``mfukit ft``'s model expects of a run, from the run's own goodput ledger (train/ettr.py)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from mfukit.core.scenario import FtSection
from mfukit.ft.failures import job_failures, load_failure_model
from mfukit.ft.ledger import STOPPED, Goodput, Recovery, account
from mfukit.train.ettr import expected_ettr, predicted_ettr
from mfukit.train.prepare import TrainRequest, prepare

MICRO = Path(__file__).parents[1] / "data" / "train" / "micro.toml"


def ledger(*, restarts: int, recovery_s: float, saves: int = 10, persist_s: float = 0.0) -> Goodput:
    """1,000 s of productive steps, 10 saves blocking 2 s each, ``restarts`` of ``recovery_s`` each."""
    return Goodput(
        wall_s=0.0,
        productive_s=1000.0,
        rework_s=50.0 * restarts,
        checkpoint_blocking_s=2.0 * saves,
        recovery_s=recovery_s * restarts,
        startup_s=0.0,
        other_s=0.0,
        restarts=restarts,
        recoveries=[Recovery(n + 1, "kill@step=7", 0.0, 5, recovery_s) for n in range(restarts)],
        checkpoints_committed=saves,
        saves=saves,
        persist_s=persist_s * saves,
        commit_s=(2.0 + persist_s) * saves,
    )


def test_without_failures_the_prediction_is_the_save_overhead_alone() -> None:
    goodput = ledger(restarts=0, recovery_s=0.0)
    predicted = predicted_ettr(goodput, FtSection(), num_gpus=2, num_nodes=1)
    assert predicted == pytest.approx(100.0 / 102.0, rel=1e-12)  # tau / (tau + delta)
    assert predicted == pytest.approx(goodput.ettr_steady_state, rel=1e-12)


def test_with_failures_it_is_dalys_exact_model() -> None:
    """Poisson failures at the rate the run saw, M = training phase / restarts; no persist:
    ETTR = tau / (M e^{R/M} (e^{(tau + delta)/M} - 1)) (Daly 2006, eq. 19 over tau)."""
    goodput = ledger(restarts=3, recovery_s=20.0)
    m = goodput.training_phase_s / 3
    tau, delta, restart = 100.0, 2.0, 20.0
    daly = tau / (m * math.exp(restart / m) * math.expm1((tau + delta) / m))
    assert predicted_ettr(goodput, FtSection(), num_gpus=2, num_nodes=1) == pytest.approx(daly, rel=1e-12)


def test_expected_under_the_failure_model_uses_ft_defaults_without_a_restart() -> None:
    goodput = ledger(restarts=0, recovery_s=0.0, persist_s=5.0)
    assumptions: list[str] = []
    tiny = job_failures(load_failure_model("llama3", source="test"), num_gpus=2, num_nodes=1)
    huge = job_failures(load_failure_model("llama3", source="test"), num_gpus=16384, num_nodes=2048)
    small_job = expected_ettr(goodput, FtSection(), tiny, assumptions)
    large_job = expected_ettr(goodput, FtSection(), huge, [])
    assert small_job is not None and large_job is not None
    assert large_job < small_job < 100.0 / 102.0  # more GPUs fail more often; even one GPU sometimes fails
    assert any("detection = 100 s" in a and "as long as one save" in a for a in assumptions)


def test_no_save_no_prediction() -> None:
    goodput = account([{"t": 0.0, "kind": "launch", "attempt": -1}], [])
    assert predicted_ettr(goodput, FtSection(), num_gpus=2, num_nodes=1) is None
    prepared = prepare(TrainRequest(scenario_path=MICRO), cuda=False)
    assert expected_ettr(goodput, FtSection(), prepared.failures, []) is None


def test_a_graceful_stop_is_no_failure() -> None:
    """A requeue after USR1 (checkpointed, relaunched) costs its recovery but is not a failure to predict."""
    goodput = ledger(restarts=1, recovery_s=20.0)
    goodput.recoveries = [Recovery(1, STOPPED, 0.0, 5, 20.0)]
    assert goodput.failures == 0
    predicted = predicted_ettr(goodput, FtSection(), num_gpus=2, num_nodes=1)
    assert predicted == pytest.approx(100.0 / 102.0, rel=1e-12)
