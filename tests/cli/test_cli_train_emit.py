"""`mfukit train --emit slurm|k8s`: the emitted job, parsed and (for sbatch) executed against stub Slurm commands."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from mfukit.train.config import TrainConfig

EXAMPLE = str(Path(__file__).parents[2] / "examples" / "tiny-cpu.toml")
HCA = "=mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11"


def emit(mfukit: Any, out: Path, kind: str, *extra: str) -> Any:
    run = mfukit(
        "train", EXAMPLE, "--emit", kind, "--out", str(out), "--system", "dgx-h100",
        "--nproc-per-node", "8", "--global-batch-size", "64", "--format", "json", *extra,
    )  # fmt: skip
    assert run.exit_code == 0, run.stderr
    return run.json()


def directives(script: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for line in script.splitlines():
        if line.startswith("#SBATCH "):
            key, _, value = line.removeprefix("#SBATCH ").partition("=")
            found[key] = value
    return found


def test_sbatch_directives_and_torchrun_line(mfukit: Any, tmp_path: Path) -> None:
    envelope = emit(
        mfukit, tmp_path / "run", "slurm", "--nnodes", "2", "--max-restarts", "5", "--time-limit", "4:00:00"
    )
    assert envelope["schema"] == "train.emit/1"
    script = Path(envelope["result"]["path"]).read_text()
    assert script == envelope["result"]["text"]
    found = directives(script)
    assert found["--nodes"] == "2"
    assert found["--ntasks-per-node"] == "1"
    assert found["--gpus-per-node"] == "8"
    assert found["--time"] == "4:00:00"
    assert "--requeue" in found
    assert found["--signal"] == "B:USR1@300"
    assert "srun --kill-on-bad-exit=1" in script
    assert "--nnodes=2" in script and "--nproc-per-node=8" in script and "--max-restarts=5" in script
    assert '--rdzv-endpoint="$MASTER_ADDR:$MASTER_PORT"' in script
    assert f"-m mfukit.train.worker {tmp_path / 'run' / 'config.json'}" in script
    assert f"export NCCL_IB_HCA={HCA}" in script
    assert envelope["result"]["nccl_env"] == {"NCCL_IB_HCA": HCA}
    config = TrainConfig.read(Path(envelope["result"]["config_path"]))
    assert config.device == "auto" and config.precision == "fp32"
    assert config.peak_flops_per_s == pytest.approx(67e12)  # catalog h100-sxm fp32 for an fp32 scenario
    assert Path(config.data_path).exists()  # generated at submit time on the shared run directory
    subprocess.run(["bash", "-n", envelope["result"]["path"]], check=True)


STUBS = {
    "scontrol": """#!/bin/bash
echo "scontrol $*" >> "$STUB_LOG"
case "$1 $2" in
  "show hostnames") echo gpu01; echo gpu02 ;;
  "show node") echo "NodeName=$3 Arch=x86_64 NodeAddr=10.9.8.7 NodeHostName=$3" ;;
esac
""",
    "srun": """#!/bin/bash
trap 'echo "srun got USR1" >> "$STUB_LOG"; exit 0' USR1
echo "srun $*" >> "$STUB_LOG"
echo "MASTER_ADDR=$MASTER_ADDR MASTER_PORT=$MASTER_PORT NCCL_IB_HCA=$NCCL_IB_HCA" >> "$STUB_LOG"
sleep 30 &
wait
""",
}


def test_sbatch_script_runs_and_requeues_on_usr1(mfukit: Any, tmp_path: Path) -> None:
    envelope = emit(mfukit, tmp_path / "run", "slurm", "--nnodes", "2")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in STUBS.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    log = tmp_path / "stub.log"
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "STUB_LOG": str(log),
        "SLURM_JOB_NODELIST": "gpu[01-02]",
        "SLURM_JOB_ID": "42",
        "SLURM_JOB_NUM_NODES": "2",
    }
    job = subprocess.Popen(["bash", envelope["result"]["path"]], env=env)
    deadline = time.monotonic() + 20
    while "MASTER_ADDR" not in (log.read_text() if log.exists() else ""):
        assert time.monotonic() < deadline, "the script never reached srun"
        time.sleep(0.05)
    job.send_signal(signal.SIGUSR1)  # what --signal=B:USR1@300 does before the time limit
    assert job.wait(timeout=20) == 0
    lines = log.read_text().splitlines()
    assert "MASTER_ADDR=10.9.8.7 MASTER_PORT=20042 NCCL_IB_HCA=" + HCA in lines
    assert any(
        line.startswith("srun --kill-on-bad-exit=1 --cpu-bind=none torchrun --nnodes=2") for line in lines
    )
    assert "srun got USR1" in lines
    assert lines[-1] == "scontrol requeue 42"


def test_k8s_jobset_and_configmap(mfukit: Any, tmp_path: Path) -> None:
    envelope = emit(
        mfukit, tmp_path / "run", "k8s", "--nnodes", "1:2", "--image", "registry.example/mfukit:1"
    )
    config_map, jobset = yaml.safe_load_all(Path(envelope["result"]["path"]).read_text())
    name = jobset["metadata"]["name"]
    assert name == "mfukit-tiny-cpu"
    config = TrainConfig.model_validate_json(config_map["data"]["config.json"])
    assert config.out_dir == "/runs/tiny-cpu" and config.synthetic_tokens is not None
    assert jobset["apiVersion"] == "jobset.x-k8s.io/v1alpha2"
    assert jobset["spec"]["failurePolicy"]["maxRestarts"] == 3
    assert jobset["spec"]["network"]["enableDNSHostnames"] is True
    (workers,) = jobset["spec"]["replicatedJobs"]
    job = workers["template"]["spec"]
    assert job["parallelism"] == job["completions"] == 2 and job["completionMode"] == "Indexed"
    pod = job["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == "registry.example/mfukit:1"
    assert container["command"][:3] == ["torchrun", "--nnodes=1:2", "--nproc-per-node=8"]
    assert f"--rdzv-endpoint={name}-workers-0-0.{name}:29400" in container["command"]
    assert container["command"][-3:] == ["-m", "mfukit.train.worker", "/etc/mfukit/config.json"]
    assert {"name": "NCCL_IB_HCA", "value": HCA} in container["env"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 8
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["config"]["configMap"]["name"] == config_map["metadata"]["name"]
    assert volumes["runs"]["persistentVolumeClaim"]["claimName"] == "mfukit-runs"


def test_k8s_needs_an_image(mfukit: Any, tmp_path: Path) -> None:
    run = mfukit("train", EXAMPLE, "--emit", "k8s", "--out", str(tmp_path))
    assert run.exit_code == 2
    assert "--image" in run.stderr


def test_a_system_without_nccl_variables_is_a_warning(mfukit: Any, tmp_path: Path) -> None:
    run = mfukit("train", EXAMPLE, "--emit", "slurm", "--out", str(tmp_path), "--format", "json")
    assert run.exit_code == 0, run.stderr
    warnings = " ".join(run.json()["warnings"])
    assert "no NCCL variables" in warnings and "no MFU" in warnings
    assert json.loads((tmp_path / "config.json").read_text())["peak_flops_per_s"] is None


def test_slurm_time_limits_and_the_usr1_lead() -> None:
    """sbatch(1)'s --time formats; USR1 comes 300 s before the limit, a quarter of a limit under 20 min (a
    5-min limit with a 300-s lead would stop and requeue the job as soon as it starts, forever)."""
    from mfukit.errors import InputError
    from mfukit.train.emit import signal_lead_s, slurm_time_s

    cases = {"90": 5400, "30:15": 1815, "4:00:00": 14400, "2-00:00:00": 172800, "1-2": 93600, "1-2:30": 95400}
    assert {text: slurm_time_s(text) for text in cases} == cases
    assert slurm_time_s("UNLIMITED") is None and signal_lead_s("UNLIMITED") == 300
    assert (signal_lead_s("4:00:00"), signal_lead_s("20"), signal_lead_s("10"), signal_lead_s("3")) == (
        300,
        300,
        150,
        60,
    )
    for bad in ("soon", "1:2:3:4", "2"):
        with pytest.raises(InputError) as caught:
            signal_lead_s(bad)
        assert caught.value.field == "--time-limit"
