"""The goodput ledger: where the wall time of a run went."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mfukit.ft.ledger import EventLog, account, read_records


def step(number: int, attempt: int, start: float, duration: float = 1.0) -> dict[str, Any]:
    return {
        "step": number,
        "attempt": attempt,
        "t_start": start,
        "t_end": start + duration,
        "step_time_s": duration,
    }


def killed_run() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """8 steps of 1 s; checkpoint at 4; killed before step 7; resumed from 4; checkpoint at 8."""
    events = [
        {"t": 0.0, "kind": "launch", "attempt": -1},
        {"t": 10.0, "kind": "attempt_start", "attempt": 0},
        {"t": 14.2, "kind": "checkpoint", "attempt": 0, "step": 4, "blocking_s": 0.5},
        {"t": 14.4, "kind": "commit", "attempt": 0, "step": 4},
        {"t": 16.6, "kind": "fault", "attempt": 0, "fault": "kill@step=7:rank=1"},
        {"t": 26.0, "kind": "attempt_start", "attempt": 1},
        {"t": 30.7, "kind": "checkpoint", "attempt": 1, "step": 8, "blocking_s": 0.4},
        {"t": 31.0, "kind": "commit", "attempt": 1, "step": 8},
        {"t": 32.0, "kind": "run_end", "attempt": -1},
    ]
    steps = [step(n, 0, 9.0 + n) for n in range(1, 5)] + [step(5, 0, 14.5), step(6, 0, 15.5)]
    steps += [step(n, 1, 21.6 + n) for n in range(5, 9)]
    return events, steps


def test_buckets_of_a_killed_run() -> None:
    events, steps = killed_run()
    goodput = account(events, steps)
    assert goodput.wall_s == pytest.approx(32.0)
    assert goodput.productive_s == pytest.approx(8.0)  # steps 1..8 once each
    assert goodput.rework_s == pytest.approx(2.0)  # steps 5 and 6 ran twice
    assert goodput.steps_reworked == 2
    assert goodput.checkpoint_blocking_s == pytest.approx(0.9)
    assert goodput.startup_s == pytest.approx(10.0)
    assert goodput.restarts == 1
    (recovery,) = goodput.recoveries
    assert recovery.failure == "kill@step=7:rank=1"
    assert recovery.resumed_step == 5
    assert recovery.recovery_s == pytest.approx(26.6 - 16.6)
    assert goodput.other_s == pytest.approx(32.0 - 8.0 - 2.0 - 0.9 - 10.0 - 10.0)
    assert goodput.ettr == pytest.approx(8.0 / 32.0)
    assert goodput.ettr_steady_state == pytest.approx(8.0 / (8.0 + 2.0 + 0.9 + 10.0))
    assert goodput.checkpoints_committed == 2


def test_failure_time_falls_back_to_the_last_step_without_a_fault_event() -> None:
    events, steps = killed_run()
    events = [e for e in events if e["kind"] != "fault"]
    (recovery,) = account(events, steps).recoveries
    assert recovery.failure.startswith("unknown")
    assert recovery.recovery_s == pytest.approx(26.6 - 16.5)  # step 6 ended at 16.5, after the last save


def test_only_the_latest_launch_counts() -> None:
    events, steps = killed_run()
    later = [{"t": 100.0, "kind": "launch", "attempt": -1}, {"t": 110.0, "kind": "run_end", "attempt": -1}]
    goodput = account(events + later, [*steps, step(9, 0, 105.0)])
    assert goodput.wall_s == pytest.approx(10.0)
    assert goodput.productive_s == pytest.approx(1.0)
    assert goodput.restarts == 0


def test_event_log_appends_lines_and_reader_skips_a_torn_one(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    EventLog(path, attempt=2).record("commit", step=4)
    EventLog(path, attempt=3).record("fault", fault="kill@step=5")
    with path.open("a") as handle:
        handle.write('{"t": 1.0, "kind": "che')  # a write cut by SIGKILL
    records, bad = read_records(path)
    assert [(r["kind"], r["attempt"]) for r in records] == [("commit", 2), ("fault", 3)]
    assert bad == 1
    assert read_records(tmp_path / "missing.jsonl") == ([], 0)


@st.composite
def runs(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Random multi-attempt runs: each attempt resumes at some earlier step and runs forward."""
    t = draw(st.floats(0.1, 20.0))
    events: list[dict[str, Any]] = [{"t": 0.0, "kind": "launch", "attempt": -1}]
    steps: list[dict[str, Any]] = []
    done = 0
    for attempt in range(draw(st.integers(1, 4))):
        start = draw(st.integers(0, done)) if attempt else 0
        for number in range(start + 1, start + 1 + draw(st.integers(1, 6))):
            duration = draw(st.floats(0.01, 3.0))
            steps.append(step(number, attempt, t, duration))
            t += duration
            if draw(st.booleans()):  # a save, logged when it stops blocking (as the workers do)
                blocking = draw(st.floats(0.0, 1.0))
                t += blocking
                events.append({"t": t, "kind": "checkpoint", "attempt": attempt, "blocking_s": blocking})
            done = max(done, number)
        t += draw(st.floats(0.0, 10.0))
    events.append({"t": t + 0.5, "kind": "run_end", "attempt": -1})
    return events, steps


@given(runs())
@settings(max_examples=200, deadline=None)
def test_buckets_add_up_to_the_wall_time(run: tuple[list[dict[str, Any]], list[dict[str, Any]]]) -> None:
    events, steps = run
    goodput = account(events, steps)
    total = sum(goodput.buckets().values())
    assert total == pytest.approx(goodput.wall_s, rel=1e-9, abs=1e-9)
    assert 0.0 <= goodput.ettr <= goodput.ettr_steady_state <= 1.0
    assert goodput.restarts == len({s["attempt"] for s in steps}) - 1
    assert len(goodput.recoveries) == goodput.restarts


def test_async_persist_is_the_commit_time_beyond_the_blocking() -> None:
    events, steps = killed_run()
    for event in events:
        if event["kind"] == "commit":  # async: durable 3 s after the save started
            event["save_s"] = 3.0
    goodput = account(events, steps)
    assert goodput.saves == 2 and goodput.interval_s == pytest.approx(4.0)
    assert goodput.blocking_per_save_s == pytest.approx(0.45)
    assert goodput.persist_per_save_s == pytest.approx(((3.0 - 0.5) + (3.0 - 0.4)) / 2)
    assert goodput.commit_per_save_s == pytest.approx(3.0)
    assert goodput.recovery_per_restart_s == pytest.approx(10.0)
