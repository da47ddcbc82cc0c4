"""Golden: the synthetic generator's size mix reproduces Meta's published RSC workload shares."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from mfukit.sched.traces.synthetic import SyntheticSpec, generate

CASES = tomllib.loads((Path(__file__).parent / "sched_size_mix.toml").read_text())["case"]


@pytest.fixture(scope="module")
def shares() -> dict[str, float]:
    jobs = generate(SyntheticSpec(200_000, cluster_gpus=16_384, gpus_per_node=8, seed=11))
    gpus = [j.num_gpus for j in jobs]
    total = sum(gpus)
    return {
        "job_share_below_8_gpus": sum(g < 8 for g in gpus) / len(gpus),
        "gpu_time_share_below_8_gpus": sum(g for g in gpus if g < 8) / total,
        "gpu_time_share_256_plus": sum(g for g in gpus if g >= 256) / total,
    }


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_published_share(case: dict[str, object], shares: dict[str, float]) -> None:
    value = shares[str(case["metric"])]
    published, tolerance = float(case["published"]), float(case["tolerance"])  # type: ignore[arg-type]
    if case["relation"] == "above":
        assert value > published - tolerance
    elif case["relation"] == "below":
        assert value < published + tolerance
    else:
        assert value == pytest.approx(published, abs=tolerance)
