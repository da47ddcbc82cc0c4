"""What ``mfukit watch`` is told: the logs, where to serve, the job they belong to and its thresholds."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from mfukit.core.cluster import Cluster
from mfukit.core.model import ModelSpec
from mfukit.core.parallelism import Parallelism
from mfukit.core.scenario import TrainingSection
from mfukit.errors import InputError

DEFAULT_PORT = 9464
"""The port ``mfukit watch`` serves on unless told (prometheus_client's examples use 8000; 9464 is free of
the well-known exporters: node 9100, dcgm-exporter 9400, Prometheus 9090)."""


def parse_listen(text: str, flag: str = "--listen") -> tuple[str, int]:
    """``HOST:PORT``, ``:PORT`` (loopback) or ``PORT`` (loopback) as (host, port); port 0 is any free one."""
    host, _, port_text = text.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    if not port_text.isdigit() or not 0 <= int(port_text) < 65536:
        raise InputError(
            "not HOST:PORT",
            source="command line",
            field=flag,
            value=text,
            expected="an address and a port 0..65535 (0: any free port)",
            hint=f"e.g. --listen 127.0.0.1:{DEFAULT_PORT} (loopback) or --listen 0.0.0.0:{DEFAULT_PORT} (all interfaces)",
        )
    return host, int(port_text)


class JobSpec(NamedTuple):
    """What is known of the job besides its log (each part may be absent): the same four parts
    ``mfukit diagnose`` takes, so both compute one MFU."""

    model: ModelSpec | None = None
    training: TrainingSection | None = None
    parallelism: Parallelism | None = None
    cluster: Cluster | None = None


@dataclass(frozen=True)
class WatchConfig:
    logs: tuple[Path, ...]
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    job_name: str | None = None
    """The ``job`` label; each log's file stem when not given."""
    kind: str | None = None
    """The log kind for every log; detected per log when None."""
    window_s: float = 300.0
    """MFU and throughput are over the steps logged in this trailing window (by the log's own clock)."""
    poll_interval_s: float = 1.0
    detect_timeout_s: float = 900.0
    """A log with content but no recognisable line for this long is not a training log (exit 2)."""
    mfu_floor: float | None = None
    mfu_tolerance: float = 0.1
    """Relative shortfall below the expected MFU that the MFU alert fires on."""
    goodput_target: float | None = None
    dcgm: str | None = None
    """A dcgm-exporter endpoint (http://host:9400/metrics) or a scrape file, for SM activity beside MFU."""
