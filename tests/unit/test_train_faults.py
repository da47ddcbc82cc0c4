"""Fault specs (``--inject``) and the once-per-run firing of one-shot faults."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mfukit.errors import InputError, UnknownNameError
from mfukit.train.faults import Fault, FaultInjector, parse, parse_all


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("kill@step=20", Fault("kill", step=20, rank=0)),
        ("kill@step=20:rank=1", Fault("kill", step=20, rank=1)),
        ("hang@step=5:rank=3", Fault("hang", step=5, rank=3)),
        ("crash-during-save@step=10", Fault("crash-during-save", step=10)),
        ("slow-rank@rank=1:factor=3", Fault("slow-rank", rank=1, factor=3.0)),
    ],
)
def test_parse_accepts_the_documented_forms(spec: str, expected: Fault) -> None:
    fault = parse(spec)
    assert fault == expected
    assert parse(str(fault)) == fault  # printing round-trips


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ("kill", "needs step"),
        ("kill@rank=1", "needs step"),
        ("kill@step=0", "counts from 1"),
        ("kill@step=x", "integers"),
        ("slow-rank@rank=1", "needs factor"),
        ("slow-rank@rank=1:factor=0.5", "factor > 1"),
        ("crash-during-save@step=3:rank=1", "takes no rank"),
        ("hang@step", "not key=value"),
    ],
)
def test_parse_rejects_with_the_flag_named(spec: str, why: str) -> None:
    with pytest.raises(InputError) as caught:
        parse(spec)
    assert why in caught.value.message
    assert caught.value.field == "--inject"
    assert "kill@step=20" in (caught.value.expected or "")


def test_unknown_kind_suggests_the_closest() -> None:
    with pytest.raises(UnknownNameError) as caught:
        parse("kil@step=3")
    assert "kill" in caught.value.suggestions


def test_parse_all_checks_steps_and_ranks() -> None:
    with pytest.raises(InputError, match="12 steps"):
        parse_all(["kill@step=13"], steps=12, world_size=2)
    with pytest.raises(InputError, match=r"ranks 0\.\.1"):
        parse_all(["slow-rank@rank=2:factor=2"], steps=12, world_size=2)


def test_one_shot_faults_fire_once_per_run(tmp_path: Path) -> None:
    events: list[dict[str, Any]] = []
    faults = parse_all(["crash-during-save@step=4"], steps=10, world_size=2)
    first = FaultInjector(faults, tmp_path, 0, lambda kind, **f: events.append({"kind": kind, **f}))
    assert first.forces_save(4)
    assert not first.forces_save(5)
    # claim it the way the crashing rank does, then a restarted rank sees it as fired
    assert first._fire(faults[0], step=4)
    assert not first._fire(faults[0], step=4)
    restarted = FaultInjector(faults, tmp_path, 0, lambda kind, **f: None)
    assert not restarted.forces_save(4)
    assert events == [{"kind": "fault", "fault": "crash-during-save@step=4", "rank": 0, "step": 4}]


def test_slow_factor_only_on_its_rank(tmp_path: Path) -> None:
    faults = parse_all(["slow-rank@rank=1:factor=3"], steps=10, world_size=2)
    assert FaultInjector(faults, tmp_path, 1, lambda *a, **k: None).slow_factor() == 3.0
    assert FaultInjector(faults, tmp_path, 0, lambda *a, **k: None).slow_factor() == 1.0
