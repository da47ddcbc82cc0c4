"""Per-step metrics of a run, one JSON line per step in ``metrics.jsonl`` (written by rank 0).

``tokens_per_s`` is the whole job's: the global batch's tokens over the step time (per device it is that
over the world size). ``mfukit diagnose`` reads the file with the same meaning (``training_log``,
``mfukit-jsonl``), as it reads ``tokens_per_s`` in every log; ``data_time_s`` (the slowest rank's wait for
its batch) feeds its data-loader rule.

MFU = model FLOPs per token (``perf.flops``: 3 x forward matmul FLOPs, the attention convention named) x
tokens per second per device / the device's dense peak (the catalog's, or one measured with
``mfukit bench matmul``). Stragglers show in ``rank_compute_s``: each rank's forward time this step (under
DDP the forward holds no collective, so it is the rank's own speed), with the slowest rank and its ratio
to the median of the others.
"""

from __future__ import annotations

import json
import statistics
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from mfukit import units
from mfukit.core.files import append_line
from mfukit.perf.flops import utilization


@dataclass(frozen=True)
class StepMetrics:
    step: int
    attempt: int
    t_start: float
    t_end: float
    step_time_s: float
    data_time_s: float
    """the slowest rank's wait for its batch (sampling, reading, copying to the device), within step_time_s"""
    loss: float
    lr: float
    tokens: int
    tokens_per_s: float
    mfu: float | None
    memory_bytes: int
    rank_compute_s: list[float]
    slowest_rank: int
    straggler_ratio: float

    def line(self) -> str:
        return json.dumps(asdict(self))


def straggler(rank_compute_s: list[float]) -> tuple[int, float]:
    """The slowest rank and its compute time over the median of the other ranks (1.0 = no straggler).

    The others' median, not everyone's: with two ranks a median that includes the straggler is the mean,
    which caps the ratio at 2 however slow the straggler is.
    """
    slowest = max(range(len(rank_compute_s)), key=lambda r: rank_compute_s[r])
    others = [value for rank, value in enumerate(rank_compute_s) if rank != slowest]
    if not others:
        return slowest, 1.0
    median = statistics.median(others)
    return slowest, (rank_compute_s[slowest] / median if median > 0 else 1.0)


def step_mfu(
    flops_per_token: float, tokens_per_s: float, world_size: int, peak_flops_per_s: float | None
) -> float | None:
    if peak_flops_per_s is None:
        return None
    return utilization(flops_per_token, tokens_per_s / world_size, peak_flops_per_s)


class MetricsLog:
    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, metrics: StepMetrics) -> None:
        append_line(self.path, metrics.line())


def progress_line(metrics: StepMetrics, total_steps: int) -> str:
    mfu = f"MFU {units.format_percent(metrics.mfu)}" if metrics.mfu is not None else "MFU —"
    return (
        f"[train] step {metrics.step}/{total_steps}  loss {metrics.loss:.4f}  "
        f"{metrics.step_time_s * 1000:.0f} ms/step  {units.format_count(metrics.tokens_per_s)} tok/s  {mfu}  "
        f"straggler {metrics.straggler_ratio:.2f}x (rank {metrics.slowest_rank})"
    )


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
