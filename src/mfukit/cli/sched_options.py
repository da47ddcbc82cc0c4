"""The flags of ``mfukit sched simulate``, grouped into the typed settings of :mod:`mfukit.sched`."""

from __future__ import annotations

import click

from mfukit import units
from mfukit.cli.options import option_group
from mfukit.errors import InputError
from mfukit.sched.engine import Drain
from mfukit.sched.policies import BackfillSettings, PriorityWeights
from mfukit.sched.simulation import Switches, SyntheticTrace, TraceOptions
from mfukit.sched.traces import FORMATS


def duration(value: str | None, flag: str) -> float | None:
    return None if value is None else units.parse_duration_s(value, field=flag)


def drains(specs: tuple[str, ...], num_nodes: int) -> tuple[Drain, ...]:
    """``--drain NODES@START+DURATION`` specs, checked against the cluster's ``num_nodes``."""
    parsed = []
    for spec in specs:
        parts = spec.split("@")
        if len(parts) != 2 or "+" not in parts[1]:
            raise InputError(
                "is not NODES@START+DURATION", field="--drain", value=spec, expected="e.g. 0-15@2h+4h"
            )
        low, _, high = parts[0].partition("-")
        try:
            first, last = int(low), int(high or low)
        except ValueError:
            raise InputError("node range must be numbers", field="--drain", value=spec) from None
        if not 0 <= first <= last < num_nodes:
            raise InputError(f"node range must be within 0..{num_nodes - 1}", field="--drain", value=spec)
        start, _, length = parts[1].partition("+")
        parsed.append(
            Drain(
                tuple(range(first, last + 1)),
                units.parse_duration_s(start, field="--drain"),
                units.parse_duration_s(length, field="--drain"),
            )
        )
    return tuple(parsed)


def switches(spec: str | None) -> Switches | None:
    """``--switches N@WAIT`` (WAIT omitted: wait for ever)."""
    if spec is None:
        return None
    count, _, wait = spec.partition("@")
    if not count.isdigit() or int(count) < 1:
        raise InputError("is not N or N@WAIT", field="--switches", value=spec, expected='e.g. "1@10min"')
    return Switches(int(count), units.parse_duration_s(wait, field="--switches") if wait else float("inf"))


def _trace_options(trace_format: str, skip_bad_rows: bool, limit_factor: float) -> TraceOptions:
    return TraceOptions(trace_format, skip_bad_rows, limit_factor)


def _synthetic(num_jobs: int, load: float, median_run: str) -> SyntheticTrace:
    return SyntheticTrace(num_jobs, load, median_run)


def _backfill(
    sched_interval: str | None,
    bf_interval: str | None,
    bf_resolution: str | None,
    bf_window: str | None,
    bf_max_job_test: int | None,
) -> BackfillSettings:
    slurm = BackfillSettings()  # a flag not given (or 0) keeps Slurm's default
    return BackfillSettings(
        duration(sched_interval, "--sched-interval") or slurm.sched_interval_s,
        duration(bf_interval, "--bf-interval") or slurm.bf_interval_s,
        duration(bf_resolution, "--bf-resolution") or slurm.bf_resolution_s,
        duration(bf_window, "--bf-window") or slurm.bf_window_s,
        bf_max_job_test or slurm.bf_max_job_test,
    )


def _weights(
    weight_age: int, weight_fairshare: int, weight_job_size: int, weight_partition: int, weight_qos: int
) -> PriorityWeights:
    return PriorityWeights(weight_age, weight_fairshare, weight_job_size, weight_partition, weight_qos)


trace_options = option_group(
    "trace_options",
    _trace_options,
    click.option("--trace-format", type=click.Choice(FORMATS), default="auto", show_default=True),
    click.option(
        "--skip-bad-rows", is_flag=True, help="Skip unreadable trace rows with a warning instead of stopping."
    ),
    click.option(
        "--limit-factor",
        type=click.FloatRange(1.0),
        default=1.0,
        show_default=True,
        help="Time limit = run time x this, for trace rows without a limit.",
    ),
)

synthetic_options = option_group(
    "synthetic",
    _synthetic,
    click.option(
        "--jobs",
        "num_jobs",
        type=click.IntRange(1),
        default=10000,
        show_default=True,
        help="TRACE=synthetic: number of jobs.",
    ),
    click.option(
        "--load",
        type=click.FloatRange(0.01, 10),
        default=0.9,
        show_default=True,
        help="TRACE=synthetic: offered GPU load.",
    ),
    click.option(
        "--median-run", default="30min", show_default=True, help="TRACE=synthetic: median run time."
    ),
)

backfill_options = option_group(
    "backfill",
    _backfill,
    click.option(
        "--sched-interval", default=None, help="slurm policy: full main-scheduler pass (default 60s)."
    ),
    click.option("--bf-interval", default=None, help="slurm policy: backfill interval (default 30s)."),
    click.option(
        "--bf-resolution", default=None, help="slurm policy: backfill time resolution (default 60s)."
    ),
    click.option("--bf-window", default=None, help="slurm policy: backfill window (default 1440min)."),
    click.option(
        "--bf-max-job-test",
        type=click.IntRange(1),
        default=None,
        help="slurm policy: jobs tested per cycle (500).",
    ),
)

weight_options = option_group(
    "weights",
    _weights,
    click.option("--weight-age", type=click.IntRange(0), default=0, help="PriorityWeightAge."),
    click.option("--weight-fairshare", type=click.IntRange(0), default=0, help="PriorityWeightFairshare."),
    click.option("--weight-job-size", type=click.IntRange(0), default=0, help="PriorityWeightJobSize."),
    click.option("--weight-partition", type=click.IntRange(0), default=0, help="PriorityWeightPartition."),
    click.option("--weight-qos", type=click.IntRange(0), default=0, help="PriorityWeightQOS."),
)
