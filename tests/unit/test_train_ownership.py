"""One owner per run directory (an flock naming its holder) and no child that outlives its launcher."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from mfukit.cli.main import cli
from mfukit.errors import InputError
from mfukit.train import ownership

HOLDER = """
import sys, time
from pathlib import Path
from typing import Any
from mfukit.train import ownership
with ownership.hold(Path(sys.argv[1])) as lock:
    lock.note("torchrun PID 4242")
    print("held", flush=True)
    time.sleep(60)
"""
LAUNCHER = """
import subprocess, sys, time
from mfukit.train.ownership import parent_death_preexec
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], preexec_fn=parent_death_preexec())
print(child.pid, flush=True)
time.sleep(60)
"""


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_a_second_owner_is_refused_with_the_holders_pid(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(InputError) as refused, ownership.hold(tmp_path):
            pass
        assert refused.value.field == "--out"
        assert f"PID {holder.pid}" in refused.value.message and "torchrun PID 4242" in refused.value.message
    finally:
        holder.kill()
        holder.wait()
    with ownership.hold(tmp_path) as lock:  # the kernel dropped the dead holder's lock
        assert (tmp_path / ownership.LOCK_NAME).read_text() == f"pid {os.getpid()}\n"
        lock.note("torchrun PID 1")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_the_child_gets_sigterm_when_its_launcher_is_killed() -> None:
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER], stdout=subprocess.PIPE, text=True)
    assert launcher.stdout is not None
    child = int(launcher.stdout.readline())
    assert alive(child)
    launcher.send_signal(signal.SIGKILL)
    launcher.wait()
    deadline = time.monotonic() + 10
    while alive(child):
        assert time.monotonic() < deadline, "the child outlived its launcher"
        time.sleep(0.05)


def test_parent_watch_names_a_lost_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    monkeypatch.setenv(ownership.LAUNCHER_PID_ENV, str(gone.pid))
    assert f"PID {gone.pid}" in (ownership.ParentWatch().gone() or "")
    monkeypatch.setenv(ownership.LAUNCHER_PID_ENV, str(os.getpid()))
    assert ownership.ParentWatch().gone() is None


TINY = Path(__file__).parents[2] / "examples" / "tiny-cpu.toml"


def test_emit_into_a_live_run_directory_is_refused(tmp_path: Path, mfukit_lock_holder: Any) -> None:
    holder = mfukit_lock_holder(tmp_path / "run")
    emitted = CliRunner().invoke(cli, ["train", str(TINY), "--emit", "slurm", "--out", str(tmp_path / "run")])
    assert emitted.exit_code == 2 and f"PID {holder}" in emitted.stderr
    assert not (tmp_path / "run" / "train.sbatch").exists()


@pytest.fixture
def mfukit_lock_holder():  # type: ignore[no-untyped-def]
    """Start a process that owns a run directory; returns its PID. Ended after the test."""
    started: list[subprocess.Popen[str]] = []

    def hold(out: Path) -> int:
        code = (
            "import sys, time; from pathlib import Path; from mfukit.train import ownership\n"
            "with ownership.hold(Path(sys.argv[1])):\n    print('held', flush=True); time.sleep(60)"
        )
        process = subprocess.Popen([sys.executable, "-c", code, str(out)], stdout=subprocess.PIPE, text=True)
        started.append(process)
        assert process.stdout is not None and process.stdout.readline() == "held\n"
        return process.pid

    yield hold
    for process in started:
        process.kill()
        process.wait()
