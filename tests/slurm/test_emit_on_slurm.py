"""The emitted sbatch script as the dev Slurm's sbatch reads it (issue 15): a run directory with blanks,
quotes, ``#``, ``%`` and ``$(...)`` reaches ``--output`` exactly, and the job's log lands in it."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from mfukit.cli.main import cli

pytestmark = pytest.mark.slurm

EXAMPLE = Path(__file__).parents[2] / "examples" / "tiny-cpu.toml"
HOSTILE = 'my run "#1" $(touch pwned) 50% it\'s'


def emit(out: Path) -> str:
    emitted = CliRunner().invoke(
        cli,
        ["train", str(EXAMPLE), "--emit", "slurm", "--out", str(out), "--nnodes", "2", "--nproc-per-node", "1",
         "--time-limit", "10", "--partition", "batch", "--format", "json"],
    )  # fmt: skip
    assert emitted.exit_code == 0, emitted.output
    return str(json.loads(emitted.stdout)["result"]["path"])


def defined_options(cluster: Any, script: str) -> dict[str, str]:
    """The options sbatch took from the script: its ``-v`` table of "defined options" (without submitting)."""
    done = subprocess.run(
        ["sbatch", "--test-only", "-v", script], env=cluster.env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    options: dict[str, str] = {}
    for line in done.stderr.splitlines():
        key, colon, value = line.removeprefix("sbatch: ").partition(" : ")
        if colon:
            options[key.strip()] = value
    return options


def test_sbatch_reads_the_intended_options(dev_slurm: Any, tmp_path: Path) -> None:
    out = tmp_path / HOSTILE
    options = defined_options(dev_slurm, emit(out))
    assert options["output"] == f"{str(out).replace('%', '%%')}/logs/slurm-%j.out"
    assert (options["partition"], options["nodes"], options["time"]) == ("batch", "2", "00:10:00")
    assert options["job-name"] == "mfukit-tiny-cpu"
    assert options["signal"] == "B:USR1@150"
    assert not list(tmp_path.rglob("pwned"))


def test_the_job_log_lands_in_the_run_directory(dev_slurm: Any, tmp_path: Path) -> None:
    out = dev_slurm.workdir / "jobs" / f"{tmp_path.name} {HOSTILE}"
    script = Path(emit(out))
    header = script.read_text().split("\n\n", 1)[0]  # the #SBATCH lines, then a job that only says hello
    probe = out / "probe.sbatch"
    probe.write_text(f"{header}\necho hello from the probe\n")
    job_id = dev_slurm.run("sbatch", "--parsable", str(probe)).strip().split(";")[0]
    log = out / "logs" / f"slurm-{job_id}.out"
    deadline = time.monotonic() + 60
    while not (log.exists() and "hello from the probe" in log.read_text()):
        assert time.monotonic() < deadline, f"no {log}: {sorted(p.name for p in (out / 'logs').iterdir())}"
        time.sleep(0.2)
    assert not list(out.rglob("pwned"))
