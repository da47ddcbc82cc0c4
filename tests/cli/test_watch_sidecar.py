"""The watch beside `mfukit train`: the sidecar in the emitted sbatch script / JobSet, and --metrics-listen."""

from __future__ import annotations

import json
import shlex
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from mfukit.train.run import _metrics_served

EXAMPLE = str(Path(__file__).parents[2] / "examples" / "tiny-cpu.toml")


def emit(mfukit: Any, out: Path, kind: str, *extra: str) -> Any:
    run = mfukit(
        "train", EXAMPLE, "--emit", kind, "--out", str(out), "--system", "dgx-h100", "--nproc-per-node", "8",
        "--global-batch-size", "64", "--format", "json", *extra,
    )  # fmt: skip
    assert run.exit_code == 0, run.stderr
    return run.json()


def test_sbatch_runs_the_watch_beside_training(mfukit: Any, tmp_path: Path) -> None:
    out = tmp_path / "run dir"  # a space: every user string is quoted
    script = emit(mfukit, out, "slurm", "--watch-sidecar", "0.0.0.0:9464")["result"]["text"]
    (line,) = [text for text in script.splitlines() if text.startswith("mfukit watch ")]
    args = shlex.split(line.removesuffix(" &"))
    assert args[2] == str(out / "metrics.jsonl")
    assert args[3:] == ["--kind", "mfukit-jsonl", "--job", args[6], "--listen", "0.0.0.0:9464"]
    assert script.index(line) < script.index("srun --kill-on-bad-exit=1")
    assert "trap 'kill \"$watch_pid\" 2>/dev/null || true' EXIT" in script
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
    plain = emit(mfukit, tmp_path / "plain", "slurm")["result"]["text"]
    assert "mfukit watch" not in plain


def test_jobset_has_a_watch_job_that_success_ignores(mfukit: Any, tmp_path: Path) -> None:
    text = emit(mfukit, tmp_path / "run", "k8s", "--image", "reg/mfukit:1", "--watch-sidecar", "0.0.0.0:9464")
    _, jobset = yaml.safe_load_all(text["result"]["text"])
    jobs = jobset["spec"]["replicatedJobs"]
    assert [job["name"] for job in jobs] == ["workers", "watch"]
    assert jobset["spec"]["successPolicy"] == {"operator": "All", "targetReplicatedJobs": ["workers"]}
    (container,) = jobs[1]["template"]["spec"]["template"]["spec"]["containers"]
    assert container["command"][:2] == ["mfukit", "watch"]
    assert container["command"][2].endswith("/metrics.jsonl")
    assert container["ports"] == [{"containerPort": 9464, "name": "metrics"}]


def test_sidecar_flag_needs_emit_and_an_address(mfukit: Any, tmp_path: Path) -> None:
    run = mfukit("train", EXAMPLE, "--out", str(tmp_path / "r"), "--watch-sidecar", "0.0.0.0:9464")
    assert run.exit_code == 2 and "--emit" in run.stderr
    run = mfukit(
        "train", EXAMPLE, "--emit", "slurm", "--out", str(tmp_path / "r"), "--watch-sidecar", "9464x"
    )
    assert run.exit_code == 2 and "--watch-sidecar" in run.stderr


def test_metrics_listen_serves_the_run_while_it_trains(tmp_path: Path) -> None:
    said: list[str] = []
    metrics = tmp_path / "metrics.jsonl"
    with _metrics_served("127.0.0.1:0", tmp_path, "tiny", said.append) as port:
        with metrics.open("a") as stream:  # rank 0 writes its steps while the run is served
            for step in (1, 2, 3):
                stream.write(json.dumps({"step": step, "attempt": 0, "t_start": 99.0 + step, "t_end": 100.0 + step,
                                         "step_time_s": 1.0, "tokens_per_s": 500.0, "mfu": 0.02}) + "\n")  # fmt: skip
        body = _scrape(int(port), "mfukit_last_step")
    assert 'mfukit_last_step{job="tiny"' in body and body.rstrip().endswith(" 3.0")
    assert said[0].startswith("[train] metrics on http://127.0.0.1:")


def _scrape(port: int, name: str) -> str:
    for _ in range(50):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            lines = [line for line in response.read().decode().splitlines() if line.startswith(name + "{")]
        if lines and lines[-1].endswith(" 3.0"):
            return "\n".join(lines)
        time.sleep(0.1)
    return ""
