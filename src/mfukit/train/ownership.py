"""One owner per run directory, and no process that outlives its owner.

* :func:`hold` takes an exclusive ``flock`` on ``<out>/.mfukit-train.lock`` for as long as ``mfukit train``
  (or ``--emit``) works in the directory; the file names the holder's PID. A second launch into a live
  directory is refused (exit 2) with that PID. The kernel drops the lock when the last descriptor closes,
  so a crash or SIGKILL never leaves a stale lock; the launcher hands the descriptor to torchrun, so the
  directory stays owned until torchrun has gone too.
* :func:`parent_death_preexec` makes torchrun get SIGTERM when the launcher dies, even by SIGKILL
  (``prctl(PR_SET_PDEATHSIG)``, Linux), and torchrun then ends its workers; :class:`ParentWatch` is the
  worker's own check, on any platform: it ends the worker when its parent (torchrun) is gone or, on a local
  run, when the launcher is.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import signal
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from mfukit.errors import InputError

LOCK_NAME = ".mfukit-train.lock"
LAUNCHER_PID_ENV = "MFUKIT_LAUNCHER_PID"
"""Set by the launcher for torchrun and its workers: the PID whose death ends the run."""
PR_SET_PDEATHSIG = 1
"""<linux/prctl.h>"""
EXIT_ORPHANED = 125
"""Exit status of a worker that ended itself because its launcher or torchrun was gone."""


@dataclass
class RunDirectoryLock:
    path: Path
    descriptor: int

    def note(self, what: str) -> None:
        """Add a line to the lock file (e.g. torchrun's PID), for whoever is refused next."""
        os.write(self.descriptor, f"{what}\n".encode())


@contextlib.contextmanager
def hold(out: Path) -> Iterator[RunDirectoryLock]:
    """Own ``out`` for the duration of the block; InputError (exit 2) when another process owns it."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / LOCK_NAME
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(descriptor)
        os.close(descriptor)
        raise InputError(
            f"is in use by another `mfukit train` ({holder})",
            source=str(out),
            field="--out",
            hint="wait for that run to end, stop it (kill the PID: the run resumes from its newest "
            "checkpoint when started again), or choose another --out",
        ) from None
    try:
        os.ftruncate(descriptor, 0)
        os.write(descriptor, f"pid {os.getpid()}\n".encode())
        yield RunDirectoryLock(path, descriptor)
    finally:
        os.close(descriptor)  # the lock goes with the last descriptor (torchrun may still hold its copy)


def _holder(descriptor: int) -> str:
    with contextlib.suppress(OSError):
        lines = os.pread(descriptor, 4096, 0).decode(errors="replace").split("\n")
        named = [line.replace("pid ", "PID ", 1) for line in lines if line.strip()]
        if named:
            return ", ".join(named)
    return "PID unknown"


def parent_death_preexec() -> Callable[[], None] | None:
    """A ``preexec_fn`` for the child the launcher starts: SIGTERM to the child when the launcher dies.

    None off Linux (the workers' :class:`ParentWatch` covers it there). libc is looked up here, in the
    parent; the child only makes the one system call, then leaves at once if the launcher is already gone.
    """
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    launcher = os.getpid()

    def set_parent_death_signal() -> None:
        prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != launcher:  # died between the fork and the prctl: nothing would signal us
            os._exit(EXIT_ORPHANED)

    return set_parent_death_signal


class ParentWatch:
    """Polled by the worker's watchdog thread: is the process that owns this worker still there?"""

    def __init__(self) -> None:
        self.parent = os.getppid()
        launcher = os.environ.get(LAUNCHER_PID_ENV, "")
        self.launcher = int(launcher) if launcher.isdigit() else None

    def gone(self) -> str | None:
        """Why this worker is orphaned (its parent torchrun or the launcher ended), or None."""
        if os.getppid() != self.parent:
            return f"its parent (torchrun, PID {self.parent}) ended"
        if self.launcher is not None:
            try:
                os.kill(self.launcher, 0)
            except ProcessLookupError:
                return f"the launcher (`mfukit train`, PID {self.launcher}) ended"
            except PermissionError:  # alive, as another user
                return None
        return None
