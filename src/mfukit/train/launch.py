"""Run a module under torchrun (TorchElastic) as a child process, stream its output, never wait forever.

``torchrun --nnodes MIN:MAX --nproc-per-node N --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:PORT
--max-restarts K -m MODULE ARGS`` (torch/distributed/run.py): c10d rendezvous on localhost, elastic
restarts of the whole worker group on any worker failure. Output goes line by line to the caller (the CLI
sends it to stderr) and to a log file. A wall-clock limit, when given, ends the whole process group.
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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

SIGNALS_TO_FORWARD = "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1"
"""torchrun's defaults plus SIGUSR1, which Slurm's ``--signal`` sends before a time limit or preemption."""
RESTART_SAFE_ENV = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
"""A fresh store per rendezvous round. By default the workers reuse the rendezvous TCPStore across
restarts without a per-round prefix, so a restarted gloo/NCCL group can read the dead worker's address
and fail with "Connection refused" (seen here with torch 2.13; pytorch#167288 reports it for NCCL)."""
_GRACE_S = 10.0
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


def run(
    job: Torchrun,
    *,
    log_path: Path,
    echo: Callable[[str], None],
    timeout_s: float | None = None,
) -> Finished:
    """Run ``job`` to completion (or until ``timeout_s``), echoing and logging every output line."""
    environment = {**os.environ, "PYTHONUNBUFFERED": "1", **RESTART_SAFE_ENV, **job.extra_env}
    log_path.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    tail: list[str] = []
    with log_path.open("a", encoding="utf-8") as log:
        process = subprocess.Popen(
            job.argv(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=environment,
            text=True,
            bufsize=1,
            start_new_session=True,  # its own process group, so a timeout ends every worker too
        )

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
        timed_out = False
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _end_group(process)
        reader.join(timeout=_GRACE_S)
    return Finished(process.returncode, timed_out, time.monotonic() - started, tail)


def _end_group(process: subprocess.Popen[str]) -> None:
    """SIGTERM the whole process group, then SIGKILL what is still there after a grace period."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        try:
            process.wait(timeout=_GRACE_S)
            return
        except subprocess.TimeoutExpired:
            continue
