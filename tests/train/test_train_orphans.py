"""SIGKILL of `mfukit train` leaves no torchrun and no worker behind, and while a run is live its directory
has one owner: a second launch into it exits 2 naming the owner's PID (issue 15, Deliver 4)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from run_support import processes_of

from mfukit.cli.main import cli
from mfukit.errors import InputError
from mfukit.ft.ledger import read_records
from mfukit.train import ownership

pytestmark = [pytest.mark.torch, pytest.mark.slow]

TINY = Path(__file__).parents[2] / "examples" / "tiny-cpu.toml"
START_LIMIT_S = 120.0
ORPHAN_LIMIT_S = 15.0


def test_sigkill_of_the_launcher_leaves_no_torchrun_or_worker(tmp_path: Path) -> None:
    out = tmp_path / "run"
    options = ["--out", str(out), "--device", "cpu", "--peak-flops", "10 GFLOPS", "--format", "json"]
    launcher = subprocess.Popen(
        [sys.executable, "-c", "from mfukit.cli.main import main; main()", "train", str(TINY), *options,
         "--inject", "hang@step=3:rank=0"],  # alive until killed (the hang timeout is minutes)
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    survivors: dict[int, str] = {}
    try:
        deadline = time.monotonic() + START_LIMIT_S
        while not read_records(out / "metrics.jsonl")[0]:
            assert launcher.poll() is None, launcher.communicate()[1]
            assert time.monotonic() < deadline, "the run never finished its first step"
            time.sleep(0.2)
        assert len(processes_of(out)) == 3  # torchrun and two workers

        second = CliRunner().invoke(cli, ["train", str(TINY), *options])
        assert second.exit_code == 2, second.output
        assert f"PID {launcher.pid}" in second.stderr and "--out" in second.stderr

        launcher.send_signal(signal.SIGKILL)
        launcher.wait()
        deadline = time.monotonic() + ORPHAN_LIMIT_S
        while processes_of(out) and time.monotonic() < deadline:
            time.sleep(0.2)
        survivors = processes_of(out)
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
        for pid in processes_of(out):  # what the watchdogs missed: end it here, then fail below
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert survivors == {}, f"outlived a SIGKILLed launcher: {survivors}"
    # torchrun's copy of the lock goes with the last process that holds it: the kernel releases a flock once
    # that process is reaped, which on a loaded host can trail its disappearance from the process list
    deadline = time.monotonic() + ORPHAN_LIMIT_S
    while True:
        try:
            with ownership.hold(out):
                break
        except InputError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
