"""Stopping `mfukit train` (Ctrl-C or kill) ends torchrun and its workers and leaves a consistent run directory.

torchrun runs in its own session, so neither the terminal's SIGINT nor a SIGTERM to mfukit reaches it on
its own: without forwarding, the agent survives its parent and keeps restarting workers.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from run_support import processes_of

from mfukit.ft.ledger import read_records

pytestmark = [pytest.mark.torch, pytest.mark.slow]

TINY = Path(__file__).parents[2] / "examples" / "tiny-cpu.toml"
START_LIMIT_S = 120.0
STOP_LIMIT_S = 60.0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_to_mfukit_ends_torchrun_and_its_workers(tmp_path: Path, sig: signal.Signals) -> None:
    out = tmp_path / "run"
    command = [sys.executable, "-c", "from mfukit.cli.main import main; main()", "train", str(TINY)]
    options = ["--out", str(out), "--device", "cpu", "--peak-flops", "10 GFLOPS", "--format", "json"]
    # rank 0 hangs before step 3 (the default hang timeout is minutes): the run is alive when signalled
    process = subprocess.Popen(
        [*command, *options, "--inject", "hang@step=3:rank=0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + START_LIMIT_S
        while not read_records(out / "metrics.jsonl")[0]:
            assert process.poll() is None, process.communicate()[1]
            assert time.monotonic() < deadline, "the run never finished its first step"
            time.sleep(0.2)
        running = processes_of(out).values()
        assert sum("torch.distributed.run" in c for c in running) == 1
        assert sum("-m mfukit.train.worker" in c and "torch.distributed.run" not in c for c in running) == 2

        process.send_signal(sig)
        stdout, stderr = process.communicate(timeout=STOP_LIMIT_S)
        survivors = processes_of(out)  # read before the clean-up below removes any
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for pid in processes_of(out):  # what a failed stop left: end it here, then fail below
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    assert survivors == {}, "torchrun or a worker outlived mfukit"
    assert process.returncode == 128 + sig, stderr  # 143 for SIGTERM, 130 for SIGINT
    envelope = json.loads(stdout)
    assert envelope["result"]["status"] == "stopped"
    assert any(f"stopped by {sig.name}" in w for w in envelope["warnings"])
    events, torn = read_records(out / "ledger.jsonl")
    assert torn == 0
    (stop,) = [e for e in events if e["kind"] == "stop"]
    assert stop["signal"] == sig.name
    assert events[-1]["kind"] == "run_end" and events[-1]["stopped_by"] == sig.name
    assert json.loads((out / "goodput.json").read_text())["status"] == "stopped"
    assert not list(out.rglob("*.tmp"))
