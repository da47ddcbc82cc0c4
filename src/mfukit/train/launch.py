"""Run a module under torchrun (TorchElastic) as a child process, stream its output, never wait forever.

``torchrun --nnodes MIN:MAX --nproc-per-node N --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:PORT
--max-restarts K -m MODULE ARGS`` (torch/distributed/run.py): c10d rendezvous on localhost, elastic
restarts of the whole worker group on any worker failure. Output goes line by line to the caller (the CLI
sends it to stderr) and to a log file. A wall-clock limit, when given, ends the whole process group.

torchrun runs in its own session (so a timeout can end every worker with one ``killpg``), which also
means the terminal's Ctrl-C never reaches it. On Linux it gets SIGTERM when this process dies, even by
SIGKILL (:func:`mfukit.train.ownership.parent_death_preexec`), and then ends its workers; the workers
check for a lost launcher themselves too (:class:`mfukit.train.ownership.ParentWatch`). While it runs, SIGINT and SIGTERM to this process are
therefore forwarded: the whole group gets SIGTERM, then SIGKILL after a grace period, and :func:`run`
returns with the signal in :attr:`Finished.signal` once nothing of the group is left.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from mfukit.train.ownership import LAUNCHER_PID_ENV, parent_death_preexec

SIGNALS_TO_FORWARD = "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1"
"""torchrun's defaults plus SIGUSR1, which Slurm's ``--signal`` sends before a time limit or preemption."""
RESTART_SAFE_ENV = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
"""A fresh store per rendezvous round. By default the workers reuse the rendezvous TCPStore across
restarts without a per-round prefix, so a restarted gloo/NCCL group can read the dead worker's address
and fail with "Connection refused" (seen here with torch 2.13; pytorch#167288 reports it for NCCL)."""
GRACE_S = 10.0
_POLL_S = 0.1
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
"""Signals to this process that stop the run: Ctrl-C in the terminal, ``kill`` or a scheduler's stop."""
_NOISE = ("OMP_NUM_THREADS environment variable", "*****")


@dataclass(frozen=True)
class Torchrun:
    module: str
    args: Sequence[str]
    nproc_per_node: int
    nnodes: str = "1"
    max_restarts: int = 0
    run_id: str = "mfukit"
    rdzv_endpoint: str | None = None
    extra_env: Mapping[str, str] = field(default_factory=dict)

    def argv(self, python: str = sys.executable) -> list[str]:
        endpoint = self.rdzv_endpoint or f"127.0.0.1:{free_port()}"
        return [
            python,
            "-m",
            "torch.distributed.run",
            f"--nnodes={self.nnodes}",
            f"--nproc-per-node={self.nproc_per_node}",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint={endpoint}",
            f"--rdzv-id={self.run_id}",
            f"--max-restarts={self.max_restarts}",
            "--monitor-interval=0.1",
            f"--signals-to-handle={SIGNALS_TO_FORWARD}",
            "-m",
            self.module,
            *self.args,
        ]


def free_port() -> int:
    """A TCP port on localhost that nothing listens on right now."""
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass(frozen=True)
class Finished:
    returncode: int
    timed_out: bool
    wall_s: float
    tail: list[str]
    signal: int | None = None
    """SIGINT or SIGTERM when one to this process stopped the run (the process group was ended)"""

    @property
    def signal_name(self) -> str | None:
        return signal.Signals(self.signal).name if self.signal is not None else None


def run(
    job: Torchrun,
    *,
    log_path: Path,
    echo: Callable[[str], None],
    timeout_s: float | None = None,
    keep_fds: Sequence[int] = (),
    on_start: Callable[[int], None] | None = None,
) -> Finished:
    """Run ``job`` to completion (or until ``timeout_s``), echoing and logging every output line.

    ``keep_fds`` stay open in torchrun (the run directory's lock: torchrun holds it as long as it lives);
    ``on_start`` is told torchrun's PID."""
    environment = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        **RESTART_SAFE_ENV,
        LAUNCHER_PID_ENV: str(os.getpid()),
        **job.extra_env,
    }
    log_path.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    tail: list[str] = []
    received: list[int] = []
    with log_path.open("a", encoding="utf-8") as log, _forwarding(received):
        process = subprocess.Popen(
            job.argv(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=environment,
            text=True,
            bufsize=1,
            start_new_session=True,  # its own process group, so a timeout ends every worker too
            pass_fds=tuple(keep_fds),
            preexec_fn=parent_death_preexec(),  # only a prctl: safe before the output thread starts
        )
        if on_start is not None:
            on_start(process.pid)

        def pump() -> None:
            assert process.stdout is not None
            for line in process.stdout:
                text = line.rstrip("\n")
                log.write(line)
                log.flush()
                tail.append(text)
                del tail[:-40]
                if not any(noise in text for noise in _NOISE):
                    echo(text)

        reader = threading.Thread(target=pump, name="torchrun-output", daemon=True)
        reader.start()
        timed_out = _wait(process, received, None if timeout_s is None else started + timeout_s)
        if timed_out or received:
            _end_group(process, received)
        reader.join(timeout=GRACE_S)
    stopped_by = received[0] if received else None
    return Finished(process.returncode, timed_out, time.monotonic() - started, tail, stopped_by)


def _wait(process: subprocess.Popen[str], received: list[int], deadline: float | None) -> bool:
    """Wait for ``process`` to end, a stop signal, or the deadline; True when the deadline passed."""
    while not received:
        remaining = _POLL_S if deadline is None else min(_POLL_S, deadline - time.monotonic())
        if remaining <= 0:
            return True
        try:
            process.wait(timeout=remaining)
            return False
        except subprocess.TimeoutExpired:
            continue
    return False


@contextlib.contextmanager
def _forwarding(received: list[int]) -> Iterator[None]:
    """Record SIGINT/SIGTERM in ``received`` instead of dying (or raising KeyboardInterrupt) while torchrun
    starts, runs and is ended; the previous handlers come back afterwards. Only the main thread can set handlers: elsewhere
    (a library caller's thread) nothing is installed and the signals keep their previous meaning."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}

    def handle(signum: int, frame: FrameType | None) -> None:
        received.append(signum)

    for sig in STOP_SIGNALS:
        signal.signal(sig, handle)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _end_group(process: subprocess.Popen[str], received: list[int]) -> None:
    """SIGTERM torchrun's process group, then SIGKILL whatever of it and of its descendants is left after a
    grace period (or at once when a second stop signal arrives: Ctrl-C pressed again).

    torchrun starts every worker in a session of its own (``start_new_session`` in torch's
    ``SubprocessHandler``), so a ``killpg`` of torchrun's group never reaches them: torchrun passes SIGTERM
    on, but if it is killed first its workers are orphans. The descendants are therefore listed (from
    ``/proc``) before the stop and while it runs, and each is ended by its own process group."""
    family = _descendants(process.pid)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S
    signals_before = len(received)
    while time.monotonic() < deadline and len(received) == signals_before:
        family |= _descendants(process.pid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=_POLL_S)
        if process.returncode is not None and not _group_alive(process.pid) and not _alive(family):
            return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    for member in _alive(family):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(os.getpgid(member[0]), signal.SIGKILL)
    process.wait()


_Process = tuple[int, str]
"""A pid and its start time (field 22 of ``/proc/PID/stat``), so a reused pid is never taken for it."""


def _stat(pid: int) -> tuple[int, str, str] | None:
    """Parent pid, start time and state letter of ``pid`` (``/proc/PID/stat``), None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # after "pid (comm) "; comm may hold spaces
    return int(fields[1]), fields[19], fields[0]


def _descendants(root: int) -> set[_Process]:
    """Every live descendant of ``root`` (children, their children, ...) with its start time."""
    parents: dict[int, list[_Process]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := _stat(int(entry.name))) is not None:
            parents.setdefault(stat[0], []).append((int(entry.name), stat[1]))
    found: set[_Process] = set()
    frontier = [root]
    while frontier:
        for child in parents.get(frontier.pop(), []):
            if child not in found:
                found.add(child)
                frontier.append(child[0])
    return found


def _alive(processes: set[_Process]) -> set[_Process]:
    """Those of ``processes`` still running (a zombie counts as gone: it only waits for its parent)."""
    live: set[_Process] = set()
    for pid, started in processes:
        stat = _stat(pid)
        if stat is not None and stat[1] == started and stat[2] != "Z":
            live.add((pid, started))
    return live


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a member now runs as another user: still there
        return True
    return True
