"""The Prometheus metrics of the followed logs: a ``prometheus_client`` collector read at every scrape.

Names follow Prometheus' conventions (base units, ``_total`` counters, ratios 0..1). Every series carries
``job`` (the training job) and ``log`` (the file followed, which is what ``mfukit diagnose`` is then run
on). A value with no evidence is left out, never exported as 0.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from mfukit.watch.state import Snapshot

LABELS = ("job", "log")


@dataclass(frozen=True)
class Series:
    """One followed log as the collector sees it."""

    labels: tuple[str, str]
    snapshot: Snapshot
    expected_mfu: float | None
    alert_threshold: float | None
    goodput_target: float | None
    expected_basis: str | None = None
    expected_interval: tuple[float, float] | None = None  # the performance model's 80 % interval


@dataclass(frozen=True)
class GaugeSpec:
    name: str
    help: str
    value: Callable[[Series, float], float | None]


def _since(series: Series, now_s: float) -> float | None:
    last = series.snapshot.last_step_time_s
    return max(0.0, now_s - last) if last is not None else None


GAUGES: tuple[GaugeSpec, ...] = (
    GaugeSpec("mfukit_mfu", "Model FLOP utilization (0..1) over the trailing window, as mfukit diagnose computes it",
              lambda s, _: s.snapshot.mfu),
    GaugeSpec("mfukit_hfu", "Hardware FLOP utilization (0..1): MFU with the activation recompute counted",
              lambda s, _: s.snapshot.hfu),
    GaugeSpec("mfukit_expected_mfu", "MFU the performance model (mfukit estimate) predicts for the job's layout",
              lambda s, _: s.expected_mfu),
    GaugeSpec("mfukit_expected_mfu_low", "Lower bound of the expected MFU's 80 % interval (mfukit estimate's mfu_interval)",
              lambda s, _: s.expected_interval[0] if s.expected_interval else None),
    GaugeSpec("mfukit_expected_mfu_high", "Upper bound of the expected MFU's 80 % interval",
              lambda s, _: s.expected_interval[1] if s.expected_interval else None),
    GaugeSpec("mfukit_mfu_alert_threshold",
              "MFU below which the MFU alert fires: the floor, or the expected MFU less the tolerance",
              lambda s, _: s.alert_threshold),
    GaugeSpec("mfukit_tokens_per_second", "Training tokens per second of the whole job (trailing window)",
              lambda s, _: s.snapshot.tokens_per_s),
    GaugeSpec("mfukit_tokens_per_second_per_gpu", "Training tokens per second per GPU (trailing window)",
              lambda s, _: s.snapshot.tokens_per_s_per_gpu),
    GaugeSpec("mfukit_step_time_seconds", "Time of one optimizer step, mean over the latest log interval",
              lambda s, _: s.snapshot.step_time_s),
    GaugeSpec("mfukit_log_interval_steps", "Optimizer steps between two logged steps",
              lambda s, _: None if s.snapshot.log_interval_steps is None else float(s.snapshot.log_interval_steps)),
    GaugeSpec("mfukit_last_step", "The furthest optimizer step logged",
              lambda s, _: None if s.snapshot.last_step is None else float(s.snapshot.last_step)),
    GaugeSpec("mfukit_seconds_since_last_step", "Seconds since the log last showed a step",
              _since),
    GaugeSpec("mfukit_goodput", "Productive step time over wall time since the first logged step (0..1)",
              lambda s, _: s.snapshot.goodput),
    GaugeSpec("mfukit_goodput_target", "Goodput below which the goodput alert fires (0..1)",
              lambda s, _: s.goodput_target),
)  # fmt: skip

COUNTERS: tuple[tuple[str, str, Callable[[Snapshot], float | None]], ...] = (
    ("mfukit_restarts", "Restarts seen in the log (the step number went back, or a new attempt began)",
     lambda s: None if s.restarts is None else float(s.restarts)),
    ("mfukit_checkpoint_stall_seconds", "Seconds training stood still for checkpoint saves the log shows",
     lambda s: s.checkpoint_stall_s),
    ("mfukit_watch_parse_errors", "Lines of the log that could not be read (garbage, torn writes, bad bytes)",
     lambda s: float(s.parse_errors)),
)  # fmt: skip


class WatchCollector(Collector):
    def __init__(self, series: Callable[[], Iterable[Series]], extra: Callable[[], Iterable[Metric]]) -> None:
        self.series = series
        self.extra = extra

    def collect(self) -> Iterator[Metric]:
        now_s = time.time()
        all_series = list(self.series())
        for spec in GAUGES:
            family = GaugeMetricFamily(spec.name, spec.help, labels=LABELS)
            for series in all_series:
                value = spec.value(series, now_s)
                if value is not None:
                    family.add_metric(series.labels, value)
            yield family
        for name, text, read in COUNTERS:
            counter = CounterMetricFamily(name, text, labels=LABELS)
            for series in all_series:
                total = read(series.snapshot)
                if total is not None:
                    counter.add_metric(series.labels, total)
            yield counter
        histogram = HistogramMetricFamily(
            "mfukit_step_seconds", "Step time, one observation per logged interval", labels=LABELS
        )
        for series in all_series:
            observed = series.snapshot.histogram
            if observed is not None:
                histogram.add_metric(series.labels, observed.cumulative(), observed.sum_s)
        yield histogram
        info = InfoMetricFamily("mfukit_watch_log", "The kind of each followed log, where its MFU and its expected MFU come from",
                                labels=LABELS)  # fmt: skip
        for series in all_series:
            if series.snapshot.kind is not None:
                details = {"kind": series.snapshot.kind, "mfu_source": series.snapshot.mfu_source}
                if series.expected_basis is not None:
                    details["expected_basis"] = series.expected_basis
                info.add_metric(series.labels, details)
        yield info
        yield from self.extra()
