"""The ``slurm`` policy against replays captured from the dev Slurm (``tests/data/sched/replays``,
written by ``mfukit sched dev-cluster replay``): no Slurm needed. Each replay is the 40-job mixed
trace; its slurmctld log holds every pass, start, plan and node release to the millisecond."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from mfukit.sched.policies import slurm_backfill
from mfukit.sched.slurm import validate
from mfukit.sched.slurm.conf import ClusterOptions
from mfukit.sched.slurm.ctldlog import LoggedPass
from mfukit.sched.slurm.validate import (
    Agreement,
    Replay,
    check_replay,
    controller_seconds,
    differences,
    load_replay,
)

REPLAYS = sorted((Path(__file__).parents[1] / "data" / "sched" / "replays").iterdir())


@pytest.fixture(scope="module", params=REPLAYS, ids=lambda path: path.name)
def replay(request: pytest.FixtureRequest) -> Replay:
    return load_replay(request.param)


def test_every_pass_and_every_start_agree(replay: Replay) -> None:
    agreement = check_replay(replay, ClusterOptions())
    assert [c for c in agreement.passes if not c.agrees] == []
    assert [c for c in agreement.starts if not c.agrees] == []
    assert len(agreement.starts) == 40 and agreement.order_matches
    assert agreement.max_start_difference_s == 0.0
    # the planned starts compared are many: every waiting job at every backfill cycle
    assert sum(len(c.real_planned) for c in agreement.passes) > 500


def _features(agreement: Agreement, replay: Replay) -> dict[str, int]:
    planned = [(c, job_id, plan) for c in agreement.passes for job_id, plan in c.real_planned.items()]
    return {
        "backfill starts": sum(len(c.real_started) for c in agreement.passes if c.kind == "backfill"),
        "main-pass starts": sum(len(c.real_started) for c in agreement.passes if c.kind == "main"),
        # a plan one second after the pass: the chosen nodes were still COMPLETING
        "completing delays": sum(plan[0] == int(c.at_s) + 1 for c, _, plan in planned),
        "plans": len(planned),
    }


def test_the_replays_exercise_both_schedulers_and_completing_nodes() -> None:
    totals: dict[str, int] = {}
    for directory in REPLAYS:
        replay = load_replay(directory)
        for name, count in _features(check_replay(replay, ClusterOptions()), replay).items():
            totals[name] = totals.get(name, 0) + count
    assert totals["backfill starts"] >= 20 and totals["main-pass starts"] >= 5
    assert totals["completing delays"] >= 1


def test_the_replays_tell_the_will_run_groups_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    """Planning each job at the first running job's end that frees room (1 s groups instead of
    Slurm's 30 s windows) must disagree with what Slurm logged: the fixtures can fail."""
    monkeypatch.setattr(slurm_backfill, "WILL_RUN_WINDOW_S", 1)
    agreement = check_replay(load_replay(REPLAYS[0]), ClusterOptions())
    assert agreement.passes_agreeing < len(agreement.passes)


def test_the_replays_tell_completing_nodes_apart() -> None:
    """Without the COMPLETING window some decisions differ from Slurm's."""
    disagreements = 0
    for directory in REPLAYS:
        replay = load_replay(directory)
        replay.log.released_s.clear()
        agreement = check_replay(replay, ClusterOptions())
        disagreements += len(agreement.passes) - agreement.passes_agreeing
    assert disagreements >= 1


def _with_idle_main_pass(directory: Path, after_eligible_s: float) -> tuple[Replay, float]:
    """The replay with one more main pass, ``after_eligible_s`` after the first wave's eligible
    second, that started nothing (as slurmctld logs a pass whose clock still read the second before)."""
    replay = load_replay(directory)
    eligible_s = min(job.submit_s for job in replay.real)
    at_s = eligible_s + after_eligible_s
    replay.log.passes = sorted([*replay.log.passes, LoggedPass(at_s, "main")], key=lambda p: p.at_s)
    return replay, at_s


def test_a_pass_within_a_clock_tick_of_a_second_may_read_the_second_before(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """time(2) trails the log's stamp by up to a kernel tick: a main pass stamped 2 ms after the
    jobs' --begin second that started none of them agrees, checked at the second before; open loop,
    the jobs then start in the next pass, as Slurm started them."""
    replay, at_s = _with_idle_main_pass(REPLAYS[0], 0.002)
    assert controller_seconds(at_s) == (int(at_s), int(at_s) - 1)
    agreement = check_replay(replay, ClusterOptions())
    assert agreement.agrees, differences(agreement)
    # read at the log's second only, the simulator starts the wave 2 ms after its --begin
    monkeypatch.setattr(validate, "controller_seconds", lambda at: (math.floor(at),))
    assert not check_replay(replay, ClusterOptions()).agrees


def test_a_pass_well_inside_its_second_read_that_second() -> None:
    """The same idle pass 200 ms into the second cannot have read the second before: it disagrees."""
    replay, at_s = _with_idle_main_pass(REPLAYS[0], 0.2)
    assert controller_seconds(at_s) == (int(at_s),)
    agreement = check_replay(replay, ClusterOptions())
    [check] = [c for c in agreement.passes if c.at_s == at_s]
    assert not check.agrees and check.real_started == {} and check.simulated_started
    assert not all(c.agrees for c in agreement.starts)
