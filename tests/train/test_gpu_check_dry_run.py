"""The GPU check script runs end to end on CPU with a tiny preset (what the lead dry-runs before a GPU run)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.torch, pytest.mark.slow]

ROOT = Path(__file__).parents[2]


def test_dry_run_on_cpu(tmp_path: Path) -> None:
    result = tmp_path / "gpu-mfu.json"
    env = {
        **os.environ,
        "MFUKIT_GPU_PRESET": "tests/data/train/micro.toml",
        "MFUKIT_GPU_RESULT": str(result),
        "MFUKIT_GPU_STEPS": "2",
        # the matmul part is tests/cli/test_cli_bench.py's, the train part tests/train/test_fault_tolerance.py's
        "MFUKIT_GPU_PARTS": "step",
        "CUDA_VISIBLE_DEVICES": "",
    }
    done = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "gpu" / "mfu_check.py")], env=env, timeout=300, check=False
    )
    report = json.loads(result.read_text())
    assert done.returncode == 0, report
    assert report["gpu"] == "cpu" and report["ok"]
    step = report["parts"]["step"]["result"]
    assert step["mfu"] == report["mfu"]["step"] and 0 < step["mfu"] < 1
