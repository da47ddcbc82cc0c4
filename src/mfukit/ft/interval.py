"""Optimum checkpoint intervals (Young 1974, Daly 2006) and the expected ETTR of a run.

Notation: delta = blocking time of one save, M = MTBF of the job, R = restart, tau = compute between saves.

* Young (CACM 17(9), 1974): tau = sqrt(2 delta M), first order.
* Daly (FGCS 22(3), 2006), higher order: tau = sqrt(2 delta M) [1 + sqrt(delta/(2M))/3 + (delta/(2M))/9] - delta
  for delta < 2M, else tau = M. R does not enter tau, only the wall-clock time.
* Daly's exact wall-clock model (Poisson failures): T_w = M e^{R/M} (e^{(tau+delta)/M} - 1) T_s / tau.

The rule of thumb "interval = MTBF x step rate" (checkpoint once per MTBF) is wrong: the optimum grows
with the square root of the save cost times the MTBF, and is far shorter than the MTBF when saves are cheap.

:func:`expected_run` generalises Daly's exact model term by term so that each loss has its own line:
the expected number of failures per segment of length T = tau + delta is e^{T/M} - 1; each loses on
average M - T/(e^{T/M} - 1) of the segment (exact for exponential failures), plus the previous segment
when it strikes before the last save was durable (asynchronous saves), and costs detection plus a
restart R_i that a further failure may interrupt (expected M (e^{R_i/M} - 1)). With delta, persist,
detection and maintenance at zero this is exactly Daly's T_w.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mfukit.ft.restart import no_spare_probability
from mfukit.ft.run import RunModel


def young_interval_s(blocking_s: float, mtbf_s: float) -> float:
    """Young (1974): sqrt(2 delta M)."""
    return math.sqrt(2.0 * blocking_s * mtbf_s)


def daly_interval_s(blocking_s: float, mtbf_s: float) -> float:
    """Daly (2006), eq. 37: the higher-order optimum compute time between saves."""
    if blocking_s >= 2.0 * mtbf_s:
        return mtbf_s
    ratio = blocking_s / (2.0 * mtbf_s)
    return math.sqrt(2.0 * blocking_s * mtbf_s) * (1.0 + math.sqrt(ratio) / 3.0 + ratio / 9.0) - blocking_s


def kokolis_ettr(
    num_nodes: int, rate_per_node_s: float, restart_s: float, interval_s: float, blocking_s: float
) -> float:
    """Meta's first-order estimate (Kokolis et al., HPCA 2025):
    E[ETTR] = (1 - N r_f (u0 + dt/2)) / (1 + w/dt), floored at 0 (the first-order numerator goes
    negative once an interval is longer than about two MTBFs; the run then makes no progress)."""
    return max(
        0.0,
        (1.0 - num_nodes * rate_per_node_s * (restart_s + interval_s / 2.0))
        / (1.0 + blocking_s / interval_s),
    )


@dataclass(frozen=True)
class Expected:
    """Expected shares of wall-clock time, per second of wall clock (they sum to 1)."""

    ettr: float
    blocking: float
    rework: float
    detection: float
    replacement: float
    relaunch: float
    maintenance: float
    straggler: float
    interruptions_per_s: float
    """unplanned interruptions, failures during a restart included"""
    planned_per_s: float
    wall_s: float
    """expected wall-clock time to finish the run"""

    @property
    def lost_fractions(self) -> dict[str, float]:
        return {
            "rework": self.rework,
            "restart": self.detection + self.replacement + self.relaunch,
            "checkpoint_blocking": self.blocking,
            "maintenance": self.maintenance,
            "straggler": self.straggler,
        }


def _per_failure(run: RunModel, no_spare: float) -> dict[str, float]:
    """Expected seconds of each kind spent per checkpoint segment (one interval plus its save), divided by
    the expected failures per segment e^{T/M} - 1.

    Every term of a segment is either fixed or proportional to e^{T/M} - 1, so the shares of wall clock are
    the same in this scale; it keeps the arithmetic finite when the interval is many MTBFs long (the
    expected failures per segment then overflow a float while 1 / (e^{T/M} - 1) merely underflows to 0)."""
    m = run.mtbf_s
    segment = run.segment_s
    failures = run.failures
    rate = failures.failure_rate_per_s
    if rate <= 0:
        return {"compute": run.interval_s, "blocking": run.blocking_s, "per_segment": 1.0}
    ratio = segment / m
    per_failure = math.exp(-ratio) / -math.expm1(-ratio)  # 1 / (e^{T/M} - 1) without overflow
    lost = m - segment * per_failure
    if run.persist_s > 0:  # struck before the last save was durable: that segment is lost as well
        lost += segment * -math.expm1(-run.persist_s / m) / -math.expm1(-ratio)
    parts = run.restart
    relaunch = replacement = attempts = 0.0
    for category in failures.unplanned:
        share = failures.rate_per_s(category) / rate
        wait = parts.replacement_s * no_spare if category.needs_replacement else 0.0
        vulnerable = wait + parts.relaunch_s
        tries = math.exp(vulnerable / m)  # a restart is retried when a failure strikes during it
        attempts += share * tries
        restart_total = m * math.expm1(vulnerable / m)
        replacement += share * restart_total * (wait / vulnerable if vulnerable > 0 else 0.0)
        relaunch += share * restart_total * (parts.relaunch_s / vulnerable if vulnerable > 0 else 0.0)
    planned = failures.planned_rate_per_s * (segment * per_failure + lost)
    return {
        "compute": run.interval_s * per_failure,
        "blocking": run.blocking_s * per_failure,
        "rework": lost,
        "detection": attempts * parts.detection_s,
        "replacement": replacement,
        "relaunch": relaunch,
        "maintenance": planned * (run.save_s + parts.relaunch_s),
        "interruptions": attempts,
        "planned": planned,
        "per_segment": per_failure,
    }


_COUNTS = ("interruptions", "planned", "per_segment")
"""Entries of :func:`_per_failure` that are not seconds of wall clock."""


def _wall_s(run: RunModel, terms: dict[str, float]) -> float:
    """The expected wall clock of the whole run; infinite when a segment practically never completes."""
    wall_per_term = sum(v for k, v in terms.items() if k not in _COUNTS)
    segments = run.work_s / run.interval_s
    if terms["per_segment"] == 0.0:
        return math.inf
    return segments * wall_per_term / terms["per_segment"]


def expected_run(run: RunModel) -> Expected:
    """The expected ETTR and where the rest of the wall clock goes, for exponential failures."""
    no_spare = 1.0
    terms: dict[str, float] = {}
    for _ in range(3):  # the spare pool depends on the run's length, which depends on the spares
        terms = _per_failure(run, no_spare)
        no_spare = no_spare_probability(run.restart, run.failures.replacement_rate_per_s, _wall_s(run, terms))
    wall_per_term = sum(v for k, v in terms.items() if k not in _COUNTS)
    share = {key: value / wall_per_term for key, value in terms.items()}
    straggler = share["compute"] * run.straggler_loss_frac
    return Expected(
        ettr=share["compute"] - straggler,
        blocking=share["blocking"],
        rework=share.get("rework", 0.0),
        detection=share.get("detection", 0.0),
        replacement=share.get("replacement", 0.0),
        relaunch=share.get("relaunch", 0.0),
        maintenance=share.get("maintenance", 0.0),
        straggler=straggler,
        interruptions_per_s=share.get("interruptions", 0.0),
        planned_per_s=share.get("planned", 0.0),
        wall_s=_wall_s(run, terms),
    )


def recommended_interval_s(
    blocking_s: float, persist_s: float, mtbf_s: float, step_time_s: float | None
) -> float:
    """Daly's optimum, no shorter than one step (saves happen between steps) nor than the background
    persist of an asynchronous save (a shorter interval only stalls the next save)."""
    floor = max(persist_s, step_time_s or 0.0)
    return max(daly_interval_s(blocking_s, mtbf_s), floor)
