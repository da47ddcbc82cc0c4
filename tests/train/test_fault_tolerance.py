"""Real multi-process runs on CPU (gloo, torchrun): kill, crash during save, hang, straggler, preemption, resharding.

Each fixture is one `mfukit train` launch of the micro model (12 steps, checkpoints every 4); the tests
read what the run left: result, metrics.jsonl, ledger.jsonl, checkpoints.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from mfukit.ft.failures import job_failures, load_failure_model
from mfukit.ft.interval import recommended_interval_s
from mfukit.ft.ledger import read_records
from mfukit.train.commit import CheckpointStore
from mfukit.train.prepare import TrainRequest
from mfukit.train.run import TrainOutcome, run_training

pytestmark = [pytest.mark.torch, pytest.mark.slow]

MICRO = Path(__file__).parents[1] / "data" / "train" / "micro.toml"
RUN_LIMIT_S = 300.0


def train(
    out: Path, *inject: str, overrides: dict[str, Any] | None = None, scenario: Path = MICRO, **options: Any
) -> TrainOutcome:
    request = TrainRequest(
        scenario_path=scenario,
        overrides=overrides or {},
        out=out,
        inject=inject,
        device="cpu",
        peak_flops="10 GFLOPS",
        **options,
    )
    return run_training(request, echo=lambda line: None, timeout_s=RUN_LIMIT_S)


def events(outcome: TrainOutcome, kind: str) -> list[dict[str, Any]]:
    records, _ = read_records(Path(outcome.result["ledger_path"]))
    return [r for r in records if r["kind"] == kind]


def steps(outcome: TrainOutcome) -> list[dict[str, Any]]:
    return read_records(Path(outcome.result["metrics_path"]))[0]


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> TrainOutcome:
    """Uninterrupted, with asynchronous saves (the drill saves synchronously: the same numbers)."""
    return train(tmp_path_factory.mktemp("baseline"), overrides={"ft.checkpoint_mode": "async"})


@pytest.fixture(scope="module")
def drill(tmp_path_factory: pytest.TempPathFactory) -> TrainOutcome:
    """Three failures in one run (one launch is cheaper than three): rank 1 killed before step 7, rank 0
    crashing in the commit of step 8, rank 0 hanging before step 10; rank 1 four times slower throughout."""
    return train(
        tmp_path_factory.mktemp("drill"),
        "kill@step=7:rank=1",
        "crash-during-save@step=8",
        "hang@step=10:rank=0",
        "slow-rank@rank=1:factor=4",
        hang_timeout="3s",
    )


def test_uninterrupted_async_run_commits_every_checkpoint(baseline: TrainOutcome) -> None:
    result = baseline.result
    assert baseline.exit_code == 0, baseline.warnings
    assert (result["status"], result["steps"], result["restarts"]) == ("complete", 12, 0)
    assert result["checkpoints"] == [4, 8, 12]
    assert result["checkpoints_committed"] == 3
    assert [e["mode"] for e in events(baseline, "checkpoint")] == ["async"] * 3
    assert result["recovery_s"] == []
    goodput = result["goodput"]
    assert 0 < result["ettr_measured"] == pytest.approx(goodput["productive_s"] / goodput["wall_s"])
    assert sum(v for k, v in goodput.items() if k != "wall_s") == pytest.approx(goodput["wall_s"])
    assert result["params_sha256"] and len(result["params_sha256"]) == 64
    assert 0 < result["mfu"] < 1
    # no failure: ft's model reduces to interval / (interval + blocking), which is what the ledger measured
    assert result["ettr_predicted"] == pytest.approx(result["ettr_steady_state"], rel=1e-9)
    assert 0 < result["ettr_expected"] <= result["ettr_predicted"]


def test_every_failure_resumed_and_the_run_ends_bit_identical(
    drill: TrainOutcome, baseline: TrainOutcome
) -> None:
    result = drill.result
    assert drill.exit_code == 0, drill.warnings
    assert (result["status"], result["steps"], result["restarts"]) == ("complete", 12, 3)
    assert result["params_sha256"] == baseline.result["params_sha256"]
    assert result["final_loss"] == baseline.result["final_loss"]
    assert [r["failure"] for r in result["recoveries"]] == [
        "kill@step=7:rank=1",
        "crash-during-save@step=8",
        "hang@step=10:rank=0",
    ]
    assert result["recovery_s"] == [r["recovery_s"] for r in result["recoveries"]]
    assert all(0 < seconds < 120 for seconds in result["recovery_s"])
    assert result["goodput"]["rework_s"] > 0
    # three interruptions in a run of seconds: ft's model, fed the run's own failures, predicts a lower ETTR
    assert 0 < result["ettr_predicted"] < baseline.result["ettr_predicted"]
    assert [e["resumed_step"] for e in events(drill, "attempt_start")] == [0, 4, 4, 8]


def test_killed_rank_resumes_from_the_newest_checkpoint(drill: TrainOutcome) -> None:
    kill = drill.result["recoveries"][0]
    assert kill["resumed_step"] == 5  # from the checkpoint at step 4; steps 5 and 6 are redone


def test_slow_rank_shows_in_the_metrics(drill: TrainOutcome) -> None:
    records = steps(drill)
    slowest = [r["slowest_rank"] for r in records]
    assert slowest.count(1) >= 0.8 * len(slowest)
    assert statistics.median(r["straggler_ratio"] for r in records) > 2.0  # injected factor 4
    assert drill.result["slowest_rank"] == 1
    assert drill.result["straggler_ratio_max"] > 2.0


def test_crash_during_save_resumes_from_the_previous_good_checkpoint(drill: TrainOutcome) -> None:
    crash = drill.result["recoveries"][1]
    assert crash["resumed_step"] == 5  # step 8 never committed: resumed from 4 again
    torn = events(drill, "torn_checkpoint")
    assert [t["path"] for t in torn] == [".staging-step-00000008"]
    committed, leftover = CheckpointStore(Path(drill.result["out_dir"]) / "checkpoints", keep=3).scan()
    assert [c.meta.step for c in committed] == [4, 8, 12] and leftover == []


def test_hang_is_caught_by_the_timeout(drill: TrainOutcome) -> None:
    hang = drill.result["recoveries"][2]
    assert hang["resumed_step"] == 9  # from the checkpoint at step 8
    assert 3.0 <= hang["recovery_s"] < 3.0 + 120  # at least the 3 s hang timeout, never forever
    hangs = events(drill, "hang")
    assert hangs and all(h["silent_s"] >= 3.0 for h in hangs)


def _signal_agent(out: Path, sig: signal.Signals) -> int:
    """Send ``sig`` to the torchrun agent of the run in ``out``, as srun forwards Slurm's ``--signal`` to its
    tasks (one agent per node); the agent passes it on to its workers."""
    config = str(out / "config.json").encode()
    sent = 0
    for proc in Path("/proc").iterdir():
        try:
            command = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"torch.distributed.run" in command and config in command:
            os.kill(int(proc.name), sig)
            sent += 1
    return sent


def test_preempted_four_rank_run_resumes_on_two(tmp_path: Path) -> None:
    """USR1 (Slurm's warning before a time limit or preemption): the 4 ranks agree on a step, save, stop;
    the job comes back on 2 ranks and DCP reshards the FSDP checkpoint, verified by hash. No interval is
    set, so the Daly default applies: a first save at step 1 measures the blocking time."""
    overrides = {"parallelism.fsdp": "full", "training.global_batch_size": 8}
    out = tmp_path / "reshard"
    daly = tmp_path / "micro-daly.toml"
    daly.write_text(MICRO.read_text().replace('checkpoint_interval = "4steps"\n', ""))
    options: dict[str, Any] = {"overrides": overrides, "verify_resume": True, "steps": 16, "scenario": daly}
    preempted: list[TrainOutcome] = []
    # slow-rank keeps the 16 steps long enough to be interrupted (it changes no numbers)
    runner = threading.Thread(
        target=lambda: preempted.append(train(out, "slow-rank@rank=0:factor=20", nproc_per_node=4, **options))
    )
    runner.start()
    deadline = time.monotonic() + RUN_LIMIT_S
    while len(read_records(out / "metrics.jsonl")[0]) < 3:
        assert time.monotonic() < deadline and runner.is_alive(), "the 4-rank run never reached step 3"
        time.sleep(0.1)
    assert _signal_agent(out, signal.SIGUSR1) == 1
    runner.join(timeout=RUN_LIMIT_S)
    (first,) = preempted
    stopped_at = first.result["steps"]
    assert first.result["status"] == "stopped" and first.exit_code == 1
    assert 3 <= stopped_at < 16
    assert first.result["checkpoints"] == [1, stopped_at]  # Daly's measuring save, then the stop's
    (interval,) = events(first, "interval")
    llama3 = job_failures(load_failure_model("llama3", source="test"), num_gpus=4, num_nodes=1)
    assert interval["mtbf_s"] == pytest.approx(llama3.mtbf_s)  # ft's default failure model, 4 ranks
    assert interval["interval_s"] == pytest.approx(
        recommended_interval_s(
            interval["checkpoint_s"], interval["persist_s"], interval["mtbf_s"], interval["step_time_s"]
        )
    )
    assert interval["interval_s"] > 60  # far longer than this run: no save but the measuring one and the stop
    meta = out / "checkpoints" / f"step-{stopped_at:08d}" / "mfukit-checkpoint.json"
    saved = json.loads(meta.read_text())
    assert saved["world_size"] == 4 and saved["params_sha256"]

    resumed = train(out, nproc_per_node=2, **options)
    assert resumed.exit_code == 0, resumed.warnings
    result = resumed.result
    assert (result["status"], result["steps"], result["world_size"]) == ("complete", 16, 2)
    (start,) = events(resumed, "attempt_start")[-1:]
    assert (start["resumed_step"], start["resumed_world_size"], start["world_size"]) == (stopped_at, 4, 2)
    (verified,) = events(resumed, "resume_verified")
    assert verified["match"] and verified["sha256"] == saved["params_sha256"]
