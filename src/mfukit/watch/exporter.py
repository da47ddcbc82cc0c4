"""``mfukit watch``'s loop: follow every log, fold its lines into its state, serve the metrics over HTTP.

The HTTP server (``prometheus_client.start_http_server``) answers scrapes from its own thread; the loop
polls the logs every ``poll_interval_s`` and swaps in fresh snapshots under a lock, so a scrape never
waits on parsing. A log whose content matches no kind for ``detect_timeout_s`` stops the watch with an
InputError (exit 2) naming it; a garbage line is counted and warned about once per log.
"""

from __future__ import annotations

import contextlib
import errno
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import Metric

from mfukit.core.parallelism import Parallelism
from mfukit.diagnose.mfu import expected_mfu
from mfukit.diagnose.sources.train_ledger import LEDGER, checkpoint_events
from mfukit.errors import InputError
from mfukit.watch.config import JobSpec, WatchConfig
from mfukit.watch.dcgm import Dcgm
from mfukit.watch.follow import Follower
from mfukit.watch.kinds import KINDS, LineReader, Parsed
from mfukit.watch.metrics import Series, WatchCollector
from mfukit.watch.state import LogState


@dataclass
class Followed:
    path: Path
    labels: tuple[str, str]
    follower: Follower
    reader: LineReader
    state: LogState
    content_since_s: float | None = None
    warned: bool = False
    ledger_size_bytes: int = 0
    ledger_saves: int = 0
    series: Series | None = None


@dataclass
class Watch:
    config: WatchConfig
    job: JobSpec
    warn: Callable[[str], None] = lambda text: None
    extra: Callable[[], Iterable[Metric]] = lambda: ()
    logs: list[Followed] = field(default_factory=list)
    dcgm: Dcgm | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        if self.config.dcgm is not None:
            name = self.config.job_name or self.config.logs[0].stem
            self.dcgm = Dcgm(self.config.dcgm, name, warn=self.warn)
            self.extra = self.dcgm.metrics
        job = self.job
        expected = expected_mfu(job.model, job.training, job.parallelism, job.cluster)
        names = [self.config.job_name or path.stem for path in self.config.logs]
        for path, name in zip(self.config.logs, names, strict=True):
            self.logs.append(
                Followed(
                    path,
                    (name, str(path)),
                    Follower(path),
                    LineReader(self.config.kind),
                    LogState(job, expected, window_s=self.config.window_s),
                )
            )

    def poll(self, now_s: float | None = None) -> None:
        """Read what every log gained, update its state; an InputError for a log that is not a training log."""
        now_s = time.time() if now_s is None else now_s
        if self.dcgm is not None:
            self.dcgm.refresh(now_s)
        for log in self.logs:
            for line in log.follower.poll():
                if log.content_since_s is None and line.text.strip():
                    log.content_since_s = now_s
                parsed = log.reader.feed(line.text, undecodable=line.undecodable)
                log.state.kind = log.reader.kind
                log.state.global_batch_size = log.reader.global_batch_size
                log.state.add(parsed, line.mtime_s)
            if log.reader.kind == "mfukit-jsonl":
                self._ledger(log)
            if log.state.parse_errors and not log.warned:
                log.warned = True
                self.warn(
                    f"{log.path}: {log.state.parse_errors} line(s) could not be read and are skipped "
                    "(counted in mfukit_watch_parse_errors_total; warned once)"
                )
            self._check_kind(log, now_s)
            self._layout_from_log(log)
            log.state.measure()
            series = self._series(log)
            with self.lock:
                log.series = series
        return None

    def _layout_from_log(self, log: Followed) -> None:
        """The expected MFU of the layout the log states, when no scenario gave one (the rest of the layout,
        recompute and sharding, at their defaults: the performance model then falls back to the best layout
        that fits, and says so in ``mfukit_watch_log_info``)."""
        job = self.job
        if job.parallelism is not None or log.reader.layout is None or log.state.layout_from_log:
            return
        log.state.layout_from_log = True
        layout = Parallelism(**log.reader.layout)
        log.state.expected = expected_mfu(job.model, job.training, layout, job.cluster)

    def _ledger(self, log: Followed) -> None:
        """The checkpoint saves of an ``mfukit train`` run, from the ledger beside its metrics.jsonl (read
        as diagnose reads it, again whenever it grows: it holds a few lines per save)."""
        ledger = log.path.parent / LEDGER
        try:
            status = ledger.stat()
        except FileNotFoundError:
            return
        if status.st_size == log.ledger_size_bytes:
            return
        log.ledger_size_bytes = status.st_size
        saves = checkpoint_events(log.path)
        log.state.add(Parsed(events=saves[log.ledger_saves :]), status.st_mtime)
        log.ledger_saves = len(saves)

    def _check_kind(self, log: Followed, now_s: float) -> None:
        if log.reader.kind is not None or log.content_since_s is None:
            return
        if now_s - log.content_since_s >= self.config.detect_timeout_s:
            raise InputError(
                "matches no training-log kind: no line of it is a step line of " + ", ".join(KINDS),
                source=str(log.path),
                hint="point mfukit watch at the job's training log (its stdout), or name the kind with "
                "--kind; a log still in its start-up gets more time with --detect-timeout",
            )

    def _series(self, log: Followed) -> Series:
        state = log.state
        expected = state.expected_value
        thresholds = [value for value in (self.config.mfu_floor,) if value is not None]
        if expected is not None:
            thresholds.append(expected * (1.0 - self.config.mfu_tolerance))
        return Series(
            log.labels,
            state.snapshot(),
            expected,
            max(thresholds) if thresholds else None,
            self.config.goodput_target,
            state.expected.basis if expected is not None else None,
            state.expected.interval if expected is not None else None,
        )

    def series(self) -> list[Series]:
        with self.lock:
            return [log.series for log in self.logs if log.series is not None]

    def registry(self) -> CollectorRegistry:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(WatchCollector(self.series, self.extra))
        return registry

    def close(self) -> None:
        for log in self.logs:
            log.follower.close()


def listen(host: str, port: int, registry: CollectorRegistry) -> tuple[Any, threading.Thread]:
    """Serve ``registry`` on host:port; a port already taken is an InputError (exit 2) saying how to fix it."""
    try:
        return start_http_server(port, addr=host, registry=registry)
    except OSError as error:
        if error.errno == errno.EADDRINUSE:
            raise InputError(
                "port already in use",
                source="command line",
                field="--listen",
                value=f"{host}:{port}",
                hint=f"pass a free port (--listen {host}:{port + 1}), or stop what holds it "
                f"(`ss -ltnp 'sport = :{port}'` names the process)",
            ) from None
        raise InputError(
            f"cannot listen there ({error.strerror})",
            source="command line",
            field="--listen",
            value=f"{host}:{port}",
            hint="give an address of this host, e.g. --listen 127.0.0.1:9464 or 0.0.0.0:9464",
        ) from None


@contextlib.contextmanager
def serving(watch: Watch) -> Iterator[int]:
    """The metrics served (the port bound is yielded) while the block runs; stopped and closed after."""
    server, thread = listen(watch.config.host, watch.config.port, watch.registry())
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
        watch.close()


def run(watch: Watch, stop: threading.Event, *, ready: Callable[[int], None] = lambda port: None) -> None:
    """Serve the metrics and follow the logs until ``stop`` is set; ``ready`` gets the port bound."""
    with serving(watch) as port:
        ready(port)
        watch.poll()
        while not stop.wait(watch.config.poll_interval_s):
            watch.poll()


@contextlib.contextmanager
def in_background(watch: Watch) -> Iterator[int]:
    """Serve and follow from threads of this process while the block runs (``mfukit train
    --metrics-listen``): a port already taken raises here, before the block starts."""
    with serving(watch) as port:
        stop = threading.Event()

        def loop() -> None:
            watch.poll()
            while not stop.wait(watch.config.poll_interval_s):
                watch.poll()

        follower = threading.Thread(target=loop, name="mfukit-watch", daemon=True)
        follower.start()
        try:
            yield port
        finally:
            stop.set()
            follower.join()
            watch.poll()
