"""GPU check: the MFU of a ~1B Llama-shaped preset in bf16 on one H100/H200-class GPU, in under 10 minutes.

Three parts, each a real `mfukit` command on this machine:

1. ``bench matmul --dtype bf16``: the GEMM ceiling of this GPU (context for the MFU);
2. ``bench step``: one device's training step of the preset (no torchrun): its MFU;
3. ``train``: the preset through the whole harness on one rank (torchrun, DCP async checkpoints, goodput
   ledger): the MFU and ETTR the harness measures, with one checkpoint kept to spare the disk.

Writes ``{"date", "gpu", "parts": {...}, "ok"}`` as JSON to $MFUKIT_GPU_RESULT (default ./gpu-mfu.json)
and exits 1 if a part failed. Environment:

* MFUKIT_GPU_RESULT  where to write the JSON
* MFUKIT_GPU_PRESET  the scenario (default examples/llama-1b_h100x1.toml); dry run on CPU:
  ``MFUKIT_GPU_PRESET=tests/data/train/micro.toml python tests/gpu/mfu_check.py``
* MFUKIT_GPU_STEPS   timed steps of ``bench step`` (default 10) and training steps (default 20)
* MFUKIT_GPU_PARTS   comma-separated subset of matmul,step,train (default all three)
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PART_LIMIT_S = {"matmul": 120, "step": 180, "train": 270}  # 570 s in all: under the 10-minute budget
GPU_NAMES = {"H200": "h200-sxm", "H100": "h100-sxm", "A100": "a100-80gb-sxm"}


def mfukit() -> list[str]:
    script = Path(sys.executable).with_name("mfukit")
    return (
        [str(script)]
        if script.exists()
        else [sys.executable, "-c", "from mfukit.cli.main import main; main()"]
    )


def device() -> tuple[str, str | None]:
    """The device name and its catalog accelerator (by the name nvidia-smi and torch report)."""
    import torch

    if not torch.cuda.is_available():
        return "cpu", None
    name = torch.cuda.get_device_name(0)
    return name, next((entry for key, entry in GPU_NAMES.items() if key in name), None)


def run_part(name: str, args: list[str]) -> dict[str, Any]:
    started = time.monotonic()
    try:
        done = subprocess.run(
            [*mfukit(), *args, "--format", "json"],
            capture_output=True,
            text=True,
            timeout=PART_LIMIT_S[name],
            cwd=ROOT,
        )
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"over {PART_LIMIT_S[name]} s", "wall_s": time.monotonic() - started}
    part: dict[str, Any] = {
        "ok": done.returncode == 0,
        "exit_code": done.returncode,
        "wall_s": time.monotonic() - started,
    }
    try:
        part["result"] = json.loads(done.stdout)["result"]
    except (json.JSONDecodeError, KeyError):
        part["ok"] = False
    if not part["ok"]:
        part["stderr_tail"] = done.stderr[-4000:]
    return part


def main() -> int:
    preset = os.environ.get("MFUKIT_GPU_PRESET", "examples/llama-1b_h100x1.toml")
    steps = int(os.environ.get("MFUKIT_GPU_STEPS", "0")) or None
    parts = os.environ.get("MFUKIT_GPU_PARTS", "matmul,step,train").split(",")
    result_path = Path(os.environ.get("MFUKIT_GPU_RESULT", "gpu-mfu.json")).resolve()
    name, accelerator = device()
    cuda = name != "cpu"
    gpu = ["--gpu", accelerator] if accelerator else []
    report: dict[str, Any] = {
        "date": datetime.date.today().isoformat(),
        "gpu": name,
        "accelerator": accelerator,
        "preset": preset,
        "parts": {},
    }
    if "matmul" in parts:
        dtype = (
            ["--dtype", "bf16", "--sizes", "4096,8192"] if cuda else ["--dtype", "fp32", "--sizes", "256,512"]
        )
        report["parts"]["matmul"] = run_part("matmul", ["bench", "matmul", *dtype, *gpu])
    if "step" in parts:
        report["parts"]["step"] = run_part(
            "step", ["bench", "step", preset, "--steps", str(steps or 10), *gpu]
        )
    if "train" in parts:
        scratch = Path(tempfile.mkdtemp(prefix="mfukit-gpu-check-"))
        try:
            args = [
                "train",
                preset,
                "--out",
                str(scratch / "run"),
                "--steps",
                str(steps or 20),
                "--keep",
                "1",
            ]
            report["parts"]["train"] = run_part("train", [*args, "--checkpoint-interval", "10steps", *gpu])
        finally:
            shutil.rmtree(scratch, ignore_errors=True)  # a 1B run's checkpoints are ~15 GB each
    report["ok"] = all(part["ok"] for part in report["parts"].values())
    summary = {key: part.get("result", {}).get("mfu") for key, part in report["parts"].items()}
    report["mfu"] = summary
    result_path.write_text(json.dumps(report, indent=2), encoding="utf-8")
    print(json.dumps({"gpu": name, "ok": report["ok"], "mfu": summary, "result": str(result_path)}))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
