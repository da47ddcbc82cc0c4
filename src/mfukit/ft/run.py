"""One training run under one checkpoint policy, in seconds: the input of the analytic model and the simulator.

The run alternates segments of ``interval_s`` compute and ``blocking_s`` of checkpoint save that stalls
training. A checkpoint becomes durable ``persist_s`` after its blocking part ends (0 for synchronous
saves, the background write for asynchronous ones); a failure before then loses it, and the job resumes
from the previous durable checkpoint. Planned maintenance stops gracefully: it saves (``save_s``) and
relaunches, losing no work.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from mfukit.ft.failures import JobFailures
from mfukit.ft.restart import RestartParts


@dataclass(frozen=True)
class Policy:
    interval_s: float
    blocking_s: float
    persist_s: float
    hot_spares: int


@dataclass(frozen=True)
class RunModel:
    work_s: float
    """failure-free compute time of the whole run (stretched by stragglers)"""
    interval_s: float
    blocking_s: float
    persist_s: float
    save_s: float
    """a graceful save before planned maintenance (the synchronous write)"""
    failures: JobFailures
    restart: RestartParts
    straggler_loss_frac: float = 0.0
    weibull_shape: float | None = None

    @property
    def segment_s(self) -> float:
        return self.interval_s + self.blocking_s

    @property
    def mtbf_s(self) -> float:
        return self.failures.mtbf_s

    @property
    def productive_s(self) -> float:
        """Useful work in the run: the compute time less what stragglers slowed it by."""
        return self.work_s * (1.0 - self.straggler_loss_frac)

    def with_policy(self, policy: Policy) -> RunModel:
        return replace(
            self,
            interval_s=policy.interval_s,
            blocking_s=policy.blocking_s,
            persist_s=policy.persist_s,
            restart=replace(self.restart, hot_spares=policy.hot_spares),
        )


def effective_save(interval_s: float, blocking_s: float, persist_s: float) -> tuple[float, float]:
    """(blocking, persist) once a save that is still persisting holds up the next one.

    DCP ``async_save`` (and torchtitan) waits for the previous upload before staging the next, so an
    interval shorter than the persist time stretches the blocking part by the difference."""
    if persist_s <= interval_s:
        return blocking_s, persist_s
    return blocking_s + (persist_s - interval_s), interval_s


def segments_to_finish(remaining_s: float, interval_s: float) -> int:
    return max(1, math.ceil(remaining_s / interval_s - 1e-12))
