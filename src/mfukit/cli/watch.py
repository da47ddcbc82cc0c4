"""``mfukit watch LOG...``: serve the MFU, expected MFU and goodput of running jobs as Prometheus metrics."""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from types import FrameType
from typing import Any

import click

from mfukit import units
from mfukit.cli.common import scenario_options
from mfukit.watch.config import DEFAULT_PORT, JobSpec, WatchConfig, parse_listen
from mfukit.watch.kinds import KINDS


def _fraction(value: str | None, flag: str) -> float | None:
    return units.parse_fraction(value, field=flag) if value is not None else None


@click.command(
    help=f"""Follow training logs as they grow and serve their MFU as Prometheus metrics.

LOG is a training log of Megatron-LM/NeMo, torchtitan, DeepSpeed, HF Trainer or Lightning, or the
metrics.jsonl of `mfukit train`; it may not exist yet, and it may be rotated or truncated. Give the model,
batch, cluster and layout (--scenario or flags) for MFU, HFU and the expected MFU as `mfukit diagnose`
computes them; without them only what the log reports itself is exported. Serves
http://HOST:PORT/metrics (default 127.0.0.1:{DEFAULT_PORT}) until stopped; exit 2 when a log matches no
kind or the port is taken. Alert rules: deploy/prometheus/mfukit.rules.yml; dashboard:
deploy/grafana/mfukit.json; docs/monitoring.md."""
)
@click.argument("logs", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--scenario", "scenario_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Scenario file with [model], [training], [parallelism] and [cluster] of the job.")  # fmt: skip
@scenario_options(
    "model", "gpu", "gpus", "system", "nodes", "seq_len", "global_batch_size", "global_batch_tokens",
    "micro_batch_size", "precision", "attention_flops", "tp", "pp", "dp", "recompute", "recompute_layers",
)  # fmt: skip
@click.option("--listen", default=f"127.0.0.1:{DEFAULT_PORT}", show_default=True,
              help="HOST:PORT to serve /metrics on (0.0.0.0:PORT for a sidecar scraped from outside).")  # fmt: skip
@click.option("--job", "job_name", default=None, help="The job label [each log's file name without suffix].")
@click.option("--kind", type=click.Choice(KINDS), default=None, help="The log kind [detected per log].")
@click.option(
    "--window", default="5min", show_default=True, help="Trailing window MFU and tokens/s are over."
)
@click.option("--poll", default="1s", show_default=True, help="How often the logs are read.")
@click.option("--detect-timeout", default="15min", show_default=True,
              help="A log with content but no step line of any kind for this long stops the watch (exit 2).")  # fmt: skip
@click.option("--mfu-floor", default=None, help='MFU the alert fires below whatever is expected, e.g. "35%".')
@click.option("--mfu-tolerance", default="10%", show_default=True,
              help="Shortfall below the expected MFU that the alert fires on.")  # fmt: skip
@click.option("--goodput-target", default=None, help='Goodput the alert fires below, e.g. "90%".')
@click.option("--dcgm", default=None,
              help="A dcgm-exporter endpoint (http://HOST:9400/metrics) or a saved scrape: its SM activity is "
              "exported beside MFU, with the job label.")  # fmt: skip
def watch(
    logs: tuple[Path, ...],
    scenario_path: Path | None,
    overrides: dict[str, Any],
    listen: str,
    job_name: str | None,
    kind: str | None,
    window: str,
    poll: str,
    detect_timeout: str,
    mfu_floor: str | None,
    mfu_tolerance: str,
    goodput_target: str | None,
    dcgm: str | None,
) -> int:
    from mfukit.diagnose.given import job
    from mfukit.watch.exporter import Watch, run

    host, port = parse_listen(listen)
    known = job(scenario_path, overrides)
    config = WatchConfig(
        logs=logs,
        host=host,
        port=port,
        job_name=job_name,
        kind=kind,
        window_s=units.parse_duration_s(window, field="--window"),
        poll_interval_s=units.parse_duration_s(poll, field="--poll"),
        detect_timeout_s=units.parse_duration_s(detect_timeout, field="--detect-timeout"),
        mfu_floor=_fraction(mfu_floor, "--mfu-floor"),
        mfu_tolerance=units.parse_fraction(mfu_tolerance, field="--mfu-tolerance"),
        goodput_target=_fraction(goodput_target, "--goodput-target"),
        dcgm=dcgm,
    )
    spec = JobSpec(known.model, known.training, known.parallelism, known.cluster)
    stop = threading.Event()

    def on_term(signum: int, frame: FrameType | None) -> None:
        stop.set()

    follower = Watch(config, spec, warn=lambda text: click.echo(f"warning: {text}", err=True))
    expected = follower.logs[0].state.expected_value

    def ready(bound_port: int) -> None:
        shown_expected = f"; expected MFU {units.format_percent(expected)}" if expected is not None else ""
        click.echo(
            f"mfukit watch: {len(logs)} log(s) on http://{host}:{bound_port}/metrics{shown_expected}",
            err=True,
        )

    previous = signal.signal(signal.SIGTERM, on_term)  # a sidecar is stopped with SIGTERM: exit 0
    try:
        run(follower, stop, ready=ready)
    finally:
        signal.signal(signal.SIGTERM, previous)
    return 0
