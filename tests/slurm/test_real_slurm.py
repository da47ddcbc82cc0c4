"""Against the real dev Slurm (marker ``slurm``; CI sets MFUKIT_REQUIRE_SLURM=1, so none skip there).

One replay of the 40-job trace feeds three checks: the simulator's ``slurm`` policy decides as Slurm
did at the instants Slurm started jobs, both sacct formats parse to the same jobs, and
``mfukit sched analyze`` reads the captured accounting.

Agreement is checked per decision (see ``mfukit.sched.slurm.validate``), not by an open-loop replay:
a real controller starts jobs up to a second after a completion (its background loop and backfill
both wake once a second) and sacct keeps whole seconds, so an open-loop replay drifts by about half a
second per generation of jobs (8 s after ~15 generations here) with no scheduling difference at all.
At least 80 % of the instants must agree exactly, and at any other the simulator may start at most
one job Slurm did not and miss at most one it did. The residual misses seen are 1-node jobs whose
limit ends within a minute of a higher-priority job's reservation: there the simulator is slightly
more conservative than Slurm, whose backfill picks a reservation's nodes among those free over the
candidate's *current* window (node_space) rather than over the window at its planned start; that is
not modelled.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from agreement_trace import GPUS_PER_NODE, NUM_NODES, agreement_jobs
from click.testing import CliRunner

from mfukit.cli.main import cli
from mfukit.sched.slurm import replay
from mfukit.sched.slurm.conf import ClusterOptions
from mfukit.sched.slurm.validate import check_decisions
from mfukit.sched.traces import read_trace

pytestmark = pytest.mark.slurm


@pytest.fixture(scope="module")
def replayed(dev_slurm, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """Run the trace once; return (trace, sacct -P file, sacct --json file)."""
    assert dev_slurm.nodes == [f"gpu{i:02d}" for i in range(1, NUM_NODES + 1)]
    jobs = agreement_jobs()
    t0, ids = replay.submit(dev_slurm, jobs)
    replay.wait_done(dev_slurm, list(ids.values()), timeout_s=240)
    out = tmp_path_factory.mktemp("sacct")
    parsable = replay.capture(dev_slurm, t0, out / "sacct.txt")
    as_json = replay.capture(dev_slurm, t0, out / "sacct.json", json_format=True)
    by_slurm_id = {slurm_id: job for job, slurm_id in ((j, ids[j.job_id]) for j in jobs)}
    return jobs, by_slurm_id, parsable, as_json


def test_simulator_decides_as_slurm_did(replayed) -> None:  # type: ignore[no-untyped-def]
    jobs, by_slurm_id, parsable, _ = replayed
    read = read_trace(parsable, gpus_per_node=GPUS_PER_NODE, cluster_gpus=NUM_NODES * GPUS_PER_NODE)
    assert len(read.jobs) == len(jobs)
    for real in read.jobs:
        original = by_slurm_id[real.name]
        real.nice = original.nice  # sacct does not record nice; the trace does
        assert (real.num_nodes, real.partition, real.limit_s) == (
            original.num_nodes,
            original.partition,
            original.limit_s,
        )
        assert real.state == "COMPLETED"
    options = ClusterOptions()
    decisions = check_decisions(read.jobs, options, NUM_NODES, GPUS_PER_NODE, options.sched_interval_s)
    bad = [d for d in decisions if d.missing or d.early]
    # Each real run times differently; measured over three runs: 24/24, 21/23 and 20/23 instants
    # agreed, every miss one or two jobs of one node next to a reservation boundary (module doc).
    where = f"(sacct: {parsable})"
    assert len(bad) <= len(decisions) // 5, f"{len(bad)} of {len(decisions)} decisions differ: {bad} {where}"
    assert all(len(d.missing) <= 1 and len(d.early) <= 1 for d in bad), f"{bad} {where}"
    # the trace exercises what it is meant to: several decision instants, backfill and priority
    assert len(decisions) >= 10
    assert any(j.backfilled for j in read.jobs)
    assert sum(len(d.real) for d in decisions) == len(jobs)


def test_sacct_json_and_parsable_agree(replayed) -> None:  # type: ignore[no-untyped-def]
    _, _, parsable, as_json = replayed
    kwargs = {"gpus_per_node": GPUS_PER_NODE, "cluster_gpus": NUM_NODES * GPUS_PER_NODE}
    a = read_trace(parsable, **kwargs)
    b = read_trace(as_json, **kwargs)
    fields = lambda j: (j.name, j.submit_s, j.start_s, j.end_s, j.num_gpus, j.limit_s, j.node_names)  # noqa: E731
    assert sorted(map(fields, a.jobs)) == sorted(map(fields, b.jobs))


def test_analyze_reads_captured_sacct(replayed, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    jobs, _, parsable, as_json = replayed
    for path in (parsable, as_json):
        result = CliRunner().invoke(
            cli, ["sched", "analyze", str(path), "--format", "json", "--report", str(tmp_path / path.stem)]
        )
        assert result.exit_code in (0, 1), result.output
        envelope = json.loads(result.stdout)
        out = envelope["result"]
        assert out["jobs"] == len(jobs)
        assert out["jobs_completed"] == len(jobs)
        assert out["capacity_gpus"] == NUM_NODES * GPUS_PER_NODE
        busy_gpu_s = sum(j.num_gpus * j.run_s for j in jobs)  # sleep lengths: a floor on allocation
        window = out["window_end_s"] - out["window_start_s"]
        assert busy_gpu_s / (NUM_NODES * GPUS_PER_NODE * window) <= out["utilization"] <= 1.0
        assert out["idle_gap_s_mean"] >= 0
        assert (tmp_path / path.stem / "report.html").is_file()


def test_two_node_srun_and_a_venv_python(dev_slurm) -> None:  # type: ignore[no-untyped-def]
    """What an sbatch script for a 2-node torchrun job relies on: srun across nodes, GPUs per node,
    and this work tree's Python (the venv) runnable on every node."""
    jobs_dir = dev_slurm.workdir / "jobs"
    jobs_dir.mkdir(exist_ok=True)
    python = shutil.which("python", path=str(Path(sys.executable).parent)) or sys.executable
    script = jobs_dir / "two_nodes.sbatch"
    script.write_text(
        "#!/bin/bash\n#SBATCH --nodes=2 --ntasks-per-node=1 --gpus-per-node=4 --time=1\n"
        f"srun {python} -c 'import os, mfukit; "
        'print(os.environ["SLURMD_NODENAME"], os.environ["CUDA_VISIBLE_DEVICES"], mfukit.__version__)\'\n',
        encoding="utf-8",
    )
    job_id = dev_slurm.run(
        "sbatch", "--parsable", f"--chdir={jobs_dir}", f"--output={jobs_dir}/%j.out", str(script)
    )
    job_id = job_id.strip()
    replay.wait_done(dev_slurm, [job_id], timeout_s=60)
    lines = sorted((jobs_dir / f"{job_id}.out").read_text().split("\n"))
    lines = [line for line in lines if line]
    assert [line.split()[:2] for line in lines] == [["gpu01", "0,1,2,3"], ["gpu02", "0,1,2,3"]]
