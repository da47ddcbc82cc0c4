"""The Daly interval and the Kokolis ETTR estimate against their papers (tests/golden/train_interval.toml)."""

from __future__ import annotations

import math
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mfukit.train.interval import (
    EttrInputs,
    daly_interval_s,
    default_failure_rate,
    expected_ettr,
    job_mtbf_s,
)

GOLDEN = tomllib.loads((Path(__file__).parents[1] / "golden" / "train_interval.toml").read_text())


@pytest.mark.parametrize("row", GOLDEN["daly"], ids=lambda r: r["case"])
def test_daly_matches_the_paper(row: dict[str, Any]) -> None:
    minutes = daly_interval_s(row["checkpoint_s"], row["mtbf_s"]) / 60
    assert minutes == pytest.approx(row["expected_min"], abs=row["tolerance_min"])


@pytest.mark.parametrize("row", GOLDEN["ettr"], ids=lambda r: r["case"])
def test_expected_ettr_matches_the_paper(row: dict[str, Any]) -> None:
    mtbf_s = job_mtbf_s(row["failure_rate_per_1000_node_days"], row["num_nodes"])
    inputs = EttrInputs(
        failures_per_s=1 / mtbf_s,
        restart_s=row["restart_min"] * 60,
        interval_s=row["interval_min"] * 60,
        blocking_s=row["blocking_min"] * 60,
    )
    assert expected_ettr(inputs) == pytest.approx(row["expected"], abs=row["tolerance"])


@pytest.mark.parametrize("row", GOLDEN["mtbf"], ids=lambda r: r["case"])
def test_job_mtbf_matches_the_paper(row: dict[str, Any]) -> None:
    hours = job_mtbf_s(row["failure_rate_per_1000_node_days"], row["num_nodes"]) / 3600
    assert hours == pytest.approx(row["expected_h"], abs=row["tolerance_h"])


def test_daly_edges() -> None:
    assert daly_interval_s(1000.0, 400.0) == 400.0  # delta >= 2M: checkpoint every MTBF
    assert math.isinf(daly_interval_s(1.0, math.inf))
    assert math.isinf(job_mtbf_s(0.0, 10))
    with pytest.raises(ValueError):
        daly_interval_s(0.0, 100.0)


@given(st.floats(1.0, 3600.0), st.floats(3600.0, 1e8))
def test_daly_sits_below_young_and_grows_with_the_mtbf(delta_s: float, mtbf_s: float) -> None:
    tau = daly_interval_s(delta_s, mtbf_s)
    assert 0 < tau < math.sqrt(2 * delta_s * mtbf_s)  # Young (1974) ignores the time the save itself takes
    assert daly_interval_s(delta_s, 2 * mtbf_s) > tau


def test_default_failure_rate_is_sourced() -> None:
    default = default_failure_rate()
    assert default.failure_rate_per_1000_node_days == 6.50
    assert "2410.21680" in default.source.url
