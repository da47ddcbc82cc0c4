"""The sbatch script `mfukit train --emit slurm` writes, run on the dev Slurm (issue 6 §3): 2 nodes, srun +
torchrun with c10d rendezvous on the first node's NodeAddr, gloo on CPU. Mid-run the batch shell gets USR1
(what ``--signal=B:USR1@<lead>`` sends before the time limit, or a preemption): the workers checkpoint and stop,
and the script requeues the job.

Slurm holds a requeued batch job for ``cred_expire + 1`` s (120 s by default; ``batch_requeue_fini`` in
slurmctld's job_mgr.c) while the old job credential is revoked (a job started sooner is killed: "Job
credential revoked"). Rather than wait two minutes, the test cancels the requeued job once Slurm shows it
pending with Restarts=1 and submits the same script again: the run that the requeue would have started,
which resumes from the checkpoint the stop wrote and finishes.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from mfukit.cli.main import cli
from mfukit.ft.ledger import STOPPED, account, read_records
from mfukit.train.commit import CheckpointStore

pytestmark = [pytest.mark.slurm, pytest.mark.torch]

MICRO = Path(__file__).parents[1] / "data" / "train" / "micro.toml"
STEPS = 12
LIMIT_S = 90.0


def job_state(cluster: Any, job_id: str) -> dict[str, str]:
    fields = cluster.run("scontrol", "show", "job", "-o", job_id).split()
    return dict(field.split("=", 1) for field in fields if "=" in field)


def wait_for(what: str, check: Any, deadline: float) -> None:
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_emitted_sbatch_trains_on_two_nodes_and_resumes_after_a_requeue(
    dev_slurm: Any, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    emitted = CliRunner().invoke(
        cli,
        ["train", str(MICRO), "--emit", "slurm", "--nnodes", "2", "--nproc-per-node", "1",
         "--steps", str(STEPS), "--time-limit", "10", "--out", str(out), "--format", "json"],
    )  # fmt: skip
    assert emitted.exit_code == 0, emitted.output
    script = json.loads(emitted.stdout)["result"]["path"]
    assert "#SBATCH --signal=B:USR1@150" in Path(script).read_text()  # a quarter of the 10-min limit
    deadline = time.monotonic() + LIMIT_S
    job_id = dev_slurm.run("sbatch", "--parsable", script).strip()
    metrics = out / "metrics.jsonl"
    wait_for("step 2", lambda: len(read_records(metrics)[0]) >= 2, deadline)
    dev_slurm.run("scancel", "--batch", "--signal=USR1", job_id)
    wait_for("the requeue", lambda: job_state(dev_slurm, job_id).get("Restarts") == "1", deadline)
    wait_for(
        "a pending requeued job", lambda: job_state(dev_slurm, job_id)["JobState"] == "PENDING", deadline
    )
    dev_slurm.run("scancel", job_id)
    again = dev_slurm.run("sbatch", "--parsable", script).strip()
    wait_for(
        "the end", lambda: job_state(dev_slurm, again)["JobState"] not in ("PENDING", "RUNNING"), deadline
    )
    log = (out / "logs" / f"slurm-{again}.out").read_text()
    state = job_state(dev_slurm, again)
    assert (state["JobState"], state["NumNodes"]) == ("COMPLETED", "2"), log[-3000:]

    result = json.loads((out / "result.json").read_text())
    assert (result["status"], result["step"], result["world_size"]) == ("complete", STEPS, 2)
    events, torn = read_records(out / "ledger.jsonl")
    steps, _ = read_records(metrics)
    assert torn == 0
    starts = [e for e in events if e["kind"] == "attempt_start"]
    stopped = [e for e in events if e["kind"] == "attempt_end" and e["status"] == "stopped"]
    # one rank on each of the two nodes, in both runs of the job
    assert [sorted(s["nodes"]) for s in starts] == [["gpu01", "gpu02"]] * 2
    (stop,) = stopped
    assert 2 <= stop["step"] < STEPS and starts[1]["resumed_step"] == stop["step"]
    assert [s["attempt"] for s in starts] == [0, 1]  # the relaunch is the next attempt
    # every step's metrics carry both ranks' compute times; none ran twice (the stop saved first)
    assert sorted(s["step"] for s in steps) == list(range(1, STEPS + 1))
    assert all(len(s["rank_compute_s"]) == 2 for s in steps)
    committed, leftover = CheckpointStore(out / "checkpoints", keep=3).scan()
    assert committed[-1].meta.step == STEPS and leftover == []
    # DCP names a rank's files __<rank>_<writer thread>.distcp: both ranks wrote their shard
    shards = sorted(p.name for p in committed[-1].path.glob("*.distcp"))
    assert sorted({name.split("_")[2] for name in shards}) == ["0", "1"], shards
    goodput = account(events, steps)
    (recovery,) = goodput.recoveries
    assert (goodput.restarts, goodput.failures, recovery.failure) == (1, 0, STOPPED)
    assert goodput.steps_reworked == 0
