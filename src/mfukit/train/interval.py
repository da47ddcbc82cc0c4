"""Checkpoint interval and expected ETTR: a local stand-in for ``mfukit ft`` (being built in parallel).

``mfukit train`` needs two formulas before the fault-tolerance package can be imported: the Daly optimum
for its default checkpoint interval, and the Kokolis et al. ETTR estimate to print next to the ETTR it
measures. They are here, small and cited, and are meant to be replaced by ``mfukit.ft``'s functions when
that package lands (same inputs, same meaning).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from mfukit.core.hardware import Source
from mfukit.core.scenario import read_document
from mfukit.core.schema import Strict, validate_as

SECONDS_PER_DAY = 86_400.0
_DEFAULT_RATE_FILE = Path(__file__).parent / "data" / "default_failure_rate.toml"


class DefaultFailureRate(Strict):
    failure_rate_per_1000_node_days: float
    source: Source


def default_failure_rate() -> DefaultFailureRate:
    """The sourced failure rate used when the scenario gives none (Kokolis et al. 2025, RSC-1)."""
    return validate_as(DefaultFailureRate, read_document(_DEFAULT_RATE_FILE), source=str(_DEFAULT_RATE_FILE))


def job_mtbf_s(failure_rate_per_1000_node_days: float, num_nodes: int) -> float:
    """Mean time between job-interrupting failures of a job on ``num_nodes`` nodes.

    A synchronous job is a series system, so node rates add: MTTF = (N_nodes * r_f)^-1
    (Kokolis et al., HPCA'25, arXiv:2410.21680, with r_f in failures per node-day).
    """
    if failure_rate_per_1000_node_days <= 0:
        return math.inf
    rate_per_node_s = failure_rate_per_1000_node_days / 1000.0 / SECONDS_PER_DAY
    return 1.0 / (rate_per_node_s * max(1, num_nodes))


def daly_interval_s(checkpoint_s: float, mtbf_s: float) -> float:
    """Daly's higher-order optimum compute time between checkpoints.

    J. T. Daly, "A higher order estimate of the optimum checkpoint interval for restart dumps",
    FGCS 22(3):303-312, 2006: tau = sqrt(2 delta M) [1 + (1/3) sqrt(delta / 2M) + (1/9) (delta / 2M)] - delta
    for delta < 2M, else tau = M. It refines Young's first-order sqrt(2 delta M) (CACM 17(9), 1974), which
    overestimates the interval by about delta when saves are long relative to the MTBF.
    """
    if checkpoint_s <= 0:
        raise ValueError("checkpoint time must be positive")
    if math.isinf(mtbf_s):
        return math.inf
    if checkpoint_s >= 2 * mtbf_s:
        return mtbf_s
    ratio = checkpoint_s / (2 * mtbf_s)
    return math.sqrt(2 * checkpoint_s * mtbf_s) * (1 + math.sqrt(ratio) / 3 + ratio / 9) - checkpoint_s


@dataclass(frozen=True)
class EttrInputs:
    """The four quantities of the Kokolis et al. ETTR estimate, all in seconds or per second."""

    failures_per_s: float
    restart_s: float
    interval_s: float
    blocking_s: float


def expected_ettr(inputs: EttrInputs) -> float:
    """E[ETTR] ~ (1 - lambda (u0 + dt/2)) / (1 + w/dt)  (Kokolis et al., HPCA'25, Sec. V).

    lambda = failures per second of the job, u0 = restart overhead (detection, init, load),
    dt = checkpoint interval, w = blocking time of one checkpoint write. Clamped to [0, 1].
    """
    if inputs.interval_s <= 0:
        raise ValueError("checkpoint interval must be positive")
    if math.isinf(inputs.interval_s):  # never checkpointed: a failure loses everything
        return 1.0 if inputs.failures_per_s == 0 else 0.0
    lost = inputs.failures_per_s * (inputs.restart_s + inputs.interval_s / 2)
    value = (1.0 - lost) / (1.0 + inputs.blocking_s / inputs.interval_s)
    return max(0.0, min(1.0, value))
