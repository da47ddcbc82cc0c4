"""Real traces diagnosed against the numbers their authors published (tests/golden/diagnose.toml)."""

from __future__ import annotations

import tomllib
from functools import cache
from pathlib import Path

import pytest

from mfukit.diagnose.breakdown import median
from mfukit.diagnose.engine import diagnose
from mfukit.diagnose.records import RankTrace
from mfukit.diagnose.rules.pipeline import step_times
from mfukit.diagnose.sources import kineto, pipeline_timeline

DATA = Path(__file__).parents[1] / "data" / "diagnose"
CASES = tomllib.loads((Path(__file__).parent / "diagnose.toml").read_text())["case"]


@cache
def parsed(path: Path) -> RankTrace:
    return kineto.parse(path)[0]


def measure(fixture: str, quantity: str) -> float:
    path = DATA / fixture
    if quantity == "stage_slowdown":
        timeline = pipeline_timeline.parse(path)[0]
        per_stage: dict[int, list[float]] = {}
        for phase in timeline.phases:
            per_stage.setdefault(phase.stage, []).append(phase.compute_s)
        actual, balanced = step_times(
            [median(v) for _, v in sorted(per_stage.items())], timeline.num_microbatches
        )
        return actual / balanced
    trace = parsed(path)
    if quantity == "dataloader_fraction":
        return sum(s.dataloader_s for s in trace.steps) / sum(s.duration_s for s in trace.steps)
    if quantity == "median_step_s":
        return trace.median("duration_s")
    raise KeyError(quantity)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_golden(case: dict[str, object]) -> None:
    value = measure(str(case["fixture"]), str(case["quantity"]))
    assert value == pytest.approx(case["expected"], abs=case["tolerance"]), case["source"]


def test_straggler_job_names_the_last_stage() -> None:
    found = diagnose([DATA / "straggler" / "timeline-ST.json.gz"])
    imbalance = next(f for f in found.findings if f.id == "stage_imbalance")
    assert imbalance.details["slowest_stage"] == 3
    assert "last" in imbalance.summary
    assert any("decoder-last-pipeline-num-layers" in step for step in imbalance.fix)
