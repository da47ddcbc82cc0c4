"""SM activity beside MFU: the DCGM fields of a dcgm-exporter endpoint (or a saved scrape) re-exported
with the job's label, so one dashboard shows busy GPUs doing little useful math (activity high, MFU low).

Fields (dcgm-exporter ``etc/default-counters.csv``; reference/logs-and-monitoring.md 7): the DCP ratios
``DCGM_FI_PROF_SM_ACTIVE`` (cycles an SM has a warp assigned; off in the default CSV, on in
``dcp-metrics-included.csv``), ``DCGM_FI_PROF_PIPE_TENSOR_ACTIVE`` and ``DCGM_FI_PROF_GR_ENGINE_ACTIVE``,
and ``DCGM_FI_DEV_GPU_UTIL`` (a percent: a kernel ran during the sample). GPUs are told apart by
``Hostname`` (``hostname`` since dcgm-exporter d5e5f51) and ``gpu``. A field the exporter does not serve
is absent here too.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families

FIELDS: dict[str, tuple[str, float, str]] = {
    "DCGM_FI_PROF_SM_ACTIVE": ("mfukit_gpu_sm_active", 1.0, "Ratio of cycles an SM has at least one warp (DCGM)"),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": ("mfukit_gpu_tensor_active", 1.0, "Ratio of cycles the tensor pipe is active (DCGM)"),
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": ("mfukit_gpu_engine_active", 1.0, "Ratio of time the graphics engine is active (DCGM)"),
    "DCGM_FI_DEV_GPU_UTIL": ("mfukit_gpu_utilization", 0.01, "Fraction of time a kernel ran (DCGM GPU_UTIL / 100)"),
}  # fmt: skip
REFRESH_S = 15.0
"""dcgm-exporter samples every 30 s by default (its -c flag); reading twice as often misses no sample."""
LABELS = ("job", "hostname", "gpu")


@dataclass
class Dcgm:
    where: str
    job: str
    warn: Callable[[str], None] = lambda text: None
    refresh_s: float = REFRESH_S
    samples: dict[str, list[tuple[tuple[str, str, str], float]]] = field(default_factory=dict)
    read_at_s: float | None = None
    failing: bool = False

    def refresh(self, now_s: float | None = None) -> None:
        now_s = time.time() if now_s is None else now_s
        if self.read_at_s is not None and now_s - self.read_at_s < self.refresh_s:
            return
        self.read_at_s = now_s
        try:
            text = self._read()
            self.samples = parse(text, self.job)
        except (OSError, ValueError) as error:
            self.samples = {}  # no evidence now: absent, not the last value
            if not self.failing:
                self.warn(f"DCGM source {self.where}: {error} (its metrics are left out until it answers)")
            self.failing = True
            return
        self.failing = False

    def _read(self) -> str:
        if self.where.startswith(("http://", "https://")):
            with urllib.request.urlopen(self.where, timeout=5) as response:
                return str(response.read().decode("utf-8", errors="replace"))
        return Path(self.where).read_text(errors="replace")

    def metrics(self) -> Iterator[Metric]:
        for dcgm_name, (name, _, text) in FIELDS.items():
            family = GaugeMetricFamily(name, text, labels=LABELS)
            for labels, value in self.samples.get(dcgm_name, []):
                family.add_metric(labels, value)
            yield family


def parse(text: str, job: str) -> dict[str, list[tuple[tuple[str, str, str], float]]]:
    """The DCGM fields of one scrape, per (job, hostname, gpu), scaled to ratios."""
    found: dict[str, list[tuple[tuple[str, str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        if family.name not in FIELDS:
            continue
        scale = FIELDS[family.name][1]
        for sample in family.samples:
            host = sample.labels.get("hostname") or sample.labels.get("Hostname") or ""
            key = (job, host, sample.labels.get("gpu", ""))
            found.setdefault(family.name, []).append((key, sample.value * scale))
    return found
