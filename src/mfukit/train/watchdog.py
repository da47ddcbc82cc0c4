"""Hang detection that never waits forever: a per-rank progress watchdog.

Collectives block without end when a peer hangs (BLOOM saw NCCL hangs that never timed out for hours;
pytorch#111646 survivors stuck until the 30-min timeout). Each rank runs a daemon thread with a deadline
that the training loop pushes forward at every step (``beat``); longer phases (start-up, load, a
synchronous save) grant themselves a longer allowance. When the deadline passes, the thread dumps every
thread's stack to stderr, logs a ``hang`` event and exits the process with :data:`EXIT_HANG`, so torchrun
sees a failed worker, stops the group and restarts it from the newest committed checkpoint. The process
group's own timeout is a second line of defence behind it.

The same thread ends the worker (exit :data:`~mfukit.train.ownership.EXIT_ORPHANED`) when the process that
owns it is gone: its parent torchrun, or the local launcher (:class:`~mfukit.train.ownership.ParentWatch`),
so no worker goes on training into a run directory nobody owns.
"""

from __future__ import annotations

import faulthandler
import os
import sys
import threading
import time
from collections.abc import Callable

from mfukit.train.ownership import EXIT_ORPHANED, ParentWatch

EXIT_HANG = 124
"""Exit status of a rank that the watchdog ended (as timeout(1) uses)."""


class Watchdog:
    def __init__(self, timeout_s: float, on_hang: Callable[[float], None]) -> None:
        self.timeout_s = timeout_s
        self.on_hang = on_hang
        self._deadline = time.monotonic() + timeout_s
        self._last_beat = time.monotonic()
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="mfukit-watchdog", daemon=True)
        self._owner = ParentWatch()

    def start(self, allowance_s: float | None = None) -> None:
        self.beat(allowance_s)
        self._thread.start()

    def beat(self, allowance_s: float | None = None) -> None:
        """Progress: the next beat must come within ``allowance_s`` (default: the hang timeout)."""
        now = time.monotonic()
        with self._lock:
            self._last_beat = now
            self._deadline = now + (self.timeout_s if allowance_s is None else allowance_s)

    def stop(self) -> None:
        self._stopped.set()

    def _watch(self) -> None:
        poll_s = min(1.0, self.timeout_s / 4)
        while not self._stopped.wait(poll_s):
            orphaned = self._owner.gone()
            if orphaned is not None:
                print(f"[mfukit] {orphaned}: this worker stops", file=sys.stderr, flush=True)
                os._exit(EXIT_ORPHANED)
            with self._lock:
                late = time.monotonic() > self._deadline
                silent_s = time.monotonic() - self._last_beat
            if late:
                print(
                    f"[mfukit] hang: no progress for {silent_s:.1f} s; stacks follow",
                    file=sys.stderr,
                    flush=True,
                )
                faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
                try:
                    self.on_hang(silent_s)
                finally:
                    os._exit(EXIT_HANG)
