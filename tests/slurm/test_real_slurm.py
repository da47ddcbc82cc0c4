"""Against the real dev Slurm (marker ``slurm``; CI sets MFUKIT_REQUIRE_SLURM=1, so none skip there).

One replay of the 40-job mixed trace (:func:`mfukit.sched.slurm.replay.mixed_trace`) feeds every
check: the simulator's ``slurm`` policy decides as Slurm did at every pass and, replayed open loop on
the controller's clock, starts every job in the same pass, in the same order, on the same nodes
(see :mod:`mfukit.sched.slurm.validate` for why the controller's clock); both sacct formats parse to
the same jobs; and ``mfukit sched analyze`` reads the captured accounting.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from mfukit.cli.main import cli
from mfukit.sched.slurm import replay
from mfukit.sched.slurm.conf import ClusterOptions
from mfukit.sched.slurm.validate import Agreement, Replay, check_replay, differences, load_replay
from mfukit.sched.traces import read_trace

pytestmark = pytest.mark.slurm
NUM_NODES, GPUS_PER_NODE = replay.MIXED_TRACE_NODES, replay.MIXED_TRACE_GPUS_PER_NODE


@pytest.fixture(scope="module")
def replayed(dev_slurm, tmp_path_factory: pytest.TempPathFactory) -> Path:  # type: ignore[no-untyped-def]
    """Run the trace once; return the replay directory (trace.json, sacct.txt/.json, slurmctld.log)."""
    assert dev_slurm.nodes == [f"gpu{i:02d}" for i in range(1, NUM_NODES + 1)]
    return replay.run(dev_slurm, replay.mixed_trace(), tmp_path_factory.mktemp("replay"), timeout_s=240)


def _evidence(replayed: Path, loaded: Replay, agreement: Agreement) -> str:
    """What CI prints when Slurm and the simulator part (the replay directory does not outlive the
    run): the differences, then the log from a few lines before each of the first two passes that
    disagree to the next pass."""
    log = (replayed / "slurmctld.log").read_text(encoding="utf-8").splitlines()
    passes = loaded.log.passes  # in the log's order
    wrong = {c.at_s for c in agreement.passes if not c.agrees}
    excerpt = []
    for number in [n for n, p in enumerate(passes) if p.at_s in wrong][:2]:
        begin = passes[number].line
        following = passes[number + 1].line if number + 1 < len(passes) else len(log) + 1
        excerpt += ["...", *log[max(0, begin - 6) : min(following - 1, begin + 60)]]
    return "\n".join([f"replay: {replayed}", *differences(agreement, most=3), *excerpt])


def test_simulator_replays_as_slurm_did(replayed: Path) -> None:
    options = ClusterOptions()
    loaded = load_replay(replayed)
    assert all(job.state == "COMPLETED" for job in loaded.real)
    agreement = check_replay(loaded, options)
    where = f"(replay: {replayed})"
    assert agreement.agrees, _evidence(replayed, loaded, agreement)
    # the contract: the start order matches and every start agrees within the scheduling
    # interval (sched_interval=2 s, bf_interval=1 s here) -- on the controller's clock, exactly
    assert agreement.order_matches, where
    assert agreement.max_start_difference_s == 0.0, where
    # the trace exercises what it is meant to: many passes, both schedulers, backfill
    assert len(agreement.passes) >= 20 and len(agreement.starts) == 40
    assert {c.kind for c in agreement.passes if c.real_started} == {"main", "backfill"}
    assert any(job.backfilled for job in loaded.real)


def test_sacct_json_and_parsable_agree(replayed: Path) -> None:
    parsable, as_json = replayed / "sacct.txt", replayed / "sacct.json"
    kwargs = {"gpus_per_node": GPUS_PER_NODE, "cluster_gpus": NUM_NODES * GPUS_PER_NODE}
    a = read_trace(parsable, **kwargs)
    b = read_trace(as_json, **kwargs)
    fields = lambda j: (j.name, j.submit_s, j.start_s, j.end_s, j.num_gpus, j.limit_s, j.node_names)  # noqa: E731
    assert sorted(map(fields, a.jobs)) == sorted(map(fields, b.jobs))


def test_analyze_reads_captured_sacct(replayed: Path, tmp_path: Path) -> None:
    jobs = replay.mixed_trace()
    for path in (replayed / "sacct.txt", replayed / "sacct.json"):
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
