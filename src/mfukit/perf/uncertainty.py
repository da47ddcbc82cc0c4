"""How sure a prediction is: intervals from the leave-one-source-out residuals of comparable measured runs.

Every measured run in the calibration data was predicted by constants fitted without its source
(:mod:`mfukit.perf.loso`); ``data/loso_residuals.csv`` keeps ln(measured / predicted) of each with the run's
regime: GPU family, software stack, sharding (replicated, sharded optimizer, sharded weights), scale band and
precision. A prediction's 80 % interval is the 10th-90th percentile of the residuals of the runs that share
its regime, each source weighted equally (a sweep of a thousand rows counts as one source). Where fewer than
:data:`MIN_ROWS` runs of :data:`MIN_SOURCES` sources share the whole regime, the scale band is dropped, then
the precision, the sharding, the stack; what was dropped is said. A prediction whose regime no measured run
shares (another GPU family or stack, or beyond the largest measured scale of its family and stack) is
*extrapolated*: its interval is widened by :data:`EXTRAPOLATION_WIDENING` and it says so.

No peer tool prints intervals; ``benchmarks/accuracy.py`` measures their coverage (the share of held-out
runs inside their 80 % interval, the interval built without their own source).
"""

from __future__ import annotations

import csv
import io
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

from mfukit.core.files import write_text_atomic
from mfukit.core.parallelism import Parallelism
from mfukit.errors import InputError
from mfukit.perf.calibration_data import measured_mfu, source_family
from mfukit.perf.efficiency import efficiency_file, hardware_profile_of
from mfukit.perf.measured_runs import Case

RESIDUALS_FILE = Path(__file__).parent / "data" / "loso_residuals.csv"
COLUMNS = (
    "source",
    "row_id",
    "family",
    "stack",
    "sharding",
    "num_gpus",
    "precision",
    "measured_mfu",
    "log_error",
)
MIN_ROWS = 12
MIN_SOURCES = 2
LOW_QUANTILE, HIGH_QUANTILE = 0.10, 0.90  # an 80 % interval
EXTRAPOLATION_WIDENING = 1.5
# the keys a regime is matched on, most specific first; each level drops one
LEVELS: tuple[tuple[str, ...], ...] = (
    ("family", "stack", "sharding", "band", "precision"),
    ("family", "stack", "sharding", "precision"),
    ("family", "stack", "sharding"),
    ("family", "stack"),
    ("family",),
    (),
)
BANDS = ((8, "one node"), (64, "9-64 GPUs"), (512, "65-512 GPUs"), (4096, "513-4,096 GPUs"))


@dataclass(frozen=True)
class Regime:
    family: str
    stack: str
    sharding: str
    num_gpus: int
    precision: str

    @property
    def band(self) -> str:
        return scale_band(self.num_gpus)

    def key(self, names: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(str(getattr(self, name)) for name in names)


def scale_band(num_gpus: int) -> str:
    return next((name for limit, name in BANDS if num_gpus <= limit), "over 4,096 GPUs")


def sharding_class(layout: Parallelism) -> str:
    """Replicated states, a sharded optimizer (ZeRO-1/2, Megatron's distributed optimizer) or sharded
    weights (ZeRO-3, FSDP): the three regimes of data parallelism's traffic."""
    if layout.shards_parameters:
        return "sharded weights"
    return "sharded optimizer" if layout.zero in (1, 2) else "replicated"


def sharding_class_of(name: str) -> str:
    """:func:`sharding_class` of a planner sharding name (``perf.memory.Sharding``)."""
    if name in ("zero-3", "fsdp-full", "fsdp-hybrid"):
        return "sharded weights"
    return "replicated" if name == "none" else "sharded optimizer"


def family_of(accelerator: str) -> str:
    """The GPU family whose constants an accelerator runs on (its hardware profile, borrowed resolved)."""
    profile = hardware_profile_of(accelerator)
    if profile is None:
        return "unprofiled"
    return profile.borrows or profile.name


def precision_class(precision: str) -> str:
    return "fp8" if precision == "fp8" else "16-bit"


def stack_owner(stack: str) -> str:
    """The stack whose fitted constants ``stack`` runs on (nemo: megatron-core's), which its runs share."""
    owners = {profile.name: profile.borrows or profile.name for profile in efficiency_file().framework}
    return owners.get(stack, stack)


def regime_of(accelerator: str, stack: str, layout: Parallelism, num_gpus: int, precision: str) -> Regime:
    return regime_named(accelerator, stack, sharding_class(layout), num_gpus, precision)


def regime_named(accelerator: str, stack: str, sharding: str, num_gpus: int, precision: str) -> Regime:
    """The regime of a run or layout from its names (``sharding``: a :func:`sharding_class`)."""
    return Regime(
        family=family_of(accelerator),
        stack=stack_owner(stack),
        sharding=sharding,
        num_gpus=num_gpus,
        precision=precision_class(precision),
    )


def case_regime(case: Case) -> Regime:
    return regime_of(
        case.accelerator.name, case.workload.framework, case.layout, case.num_gpus, case.workload.precision
    )


@dataclass(frozen=True)
class Residual:
    source: str
    row_id: int
    regime: Regime
    log_error: float  # ln(measured / predicted)
    measured_mfu: float = 0.0  # full s^2 attention FLOPs over the peak of the run's precision


def residual_of(case: Case, log_error: float) -> Residual:
    return Residual(case.source, case.row_id, case_regime(case), log_error, measured_mfu(case))


@dataclass(frozen=True)
class Interval:
    """A prediction's 80 % interval as multipliers of the point estimate, and what it rests on."""

    low_factor: float
    high_factor: float
    rows: int
    sources: int
    matched_on: tuple[str, ...]
    extrapolated: bool
    reason: str
    # the highest MFU any measured run of the regime's GPU family, stack and precision reached (None: none)
    highest_measured_mfu: float | None = None

    def around(self, value: float) -> tuple[float, float]:
        return value * self.low_factor, value * self.high_factor

    def around_mfu(self, mfu: float) -> tuple[float, float]:
        """:meth:`around` for an MFU, whose high end no GPU passes: at most 1."""
        low, high = self.around(mfu)
        return low, min(high, 1.0)

    def basis(self) -> str:
        keys = ", ".join(self.matched_on) if self.matched_on else "every run"
        text = f"{self.rows} held-out runs of {self.sources} sources sharing {keys}"
        return f"{text}; extrapolated: {self.reason}" if self.extrapolated else text


def write_residuals(path: Path, residuals: Sequence[Residual]) -> None:
    """The residual table: one row per measured run with its regime and ln(measured / predicted); a run a
    fold predicted nothing for (no finite residual) is left out. Written whole or not at all."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(COLUMNS)
    for r in residuals:
        if not math.isfinite(r.log_error):
            continue
        regime = r.regime
        writer.writerow(
            [
                r.source,
                r.row_id,
                regime.family,
                regime.stack,
                regime.sharding,
                regime.num_gpus,
                regime.precision,
                f"{r.measured_mfu:.4f}",
                f"{r.log_error:.5f}",
            ]
        )
    write_text_atomic(path, buffer.getvalue())
    load_residuals.cache_clear()
    cached_interval.cache_clear()


def residuals_path() -> Path:
    """The residual table in effect: the last ``loso_residuals.csv`` at the top of an ``MFUKIT_CATALOG``
    directory (a site's own, from ``mfukit calibrate``), else the shipped one."""
    overlays = [
        Path(p) / RESIDUALS_FILE.name for p in os.environ.get("MFUKIT_CATALOG", "").split(os.pathsep) if p
    ]
    found = [path for path in overlays if path.is_file()]
    return found[-1] if found else RESIDUALS_FILE


@cache
def load_residuals(path: Path | None = None) -> tuple[Residual, ...]:
    where = path or residuals_path()
    if not where.is_file():
        return ()
    out: list[Residual] = []
    try:
        with where.open(newline="", encoding="utf-8") as handle:
            for row in csv.DictReader(handle):
                regime = Regime(
                    row["family"], row["stack"], row["sharding"], int(row["num_gpus"]), row["precision"]
                )
                out.append(
                    Residual(
                        row["source"],
                        int(row["row_id"]),
                        regime,
                        float(row["log_error"]),
                        float(row["measured_mfu"]),
                    )
                )
    except (KeyError, ValueError, OSError) as error:
        raise InputError(f"the residual table {where} cannot be read: {error}", source=str(where)) from None
    if not all(math.isfinite(r.log_error) for r in out):
        raise InputError(f"the residual table {where} holds a non-finite residual", source=str(where))
    return tuple(out)


def _weighted_quantiles(
    values: np.ndarray, weights: np.ndarray, quantiles: tuple[float, float]
) -> tuple[float, float]:
    order = np.argsort(values)
    cumulative = np.cumsum(weights[order])
    cumulative = (cumulative - 0.5 * weights[order]) / cumulative[-1]
    low, high = (float(np.interp(q, cumulative, values[order])) for q in quantiles)
    return low, high


@cache
def cached_interval(regime: Regime) -> Interval:
    """:func:`interval_for` of the installed residual table, once per regime (the planner asks per layout)."""
    return interval_for(regime)


def interval_for(
    regime: Regime, *, exclude_source: str | None = None, residuals: Sequence[Residual] | None = None
) -> Interval:
    """The 80 % interval of a prediction in ``regime`` (``exclude_source``: built without the runs of that
    source and its siblings, as coverage is measured)."""
    held_out = None if exclude_source is None else source_family(exclude_source)
    pool = [
        r
        for r in (load_residuals() if residuals is None else residuals)
        if source_family(r.source) != held_out
    ]
    if not pool:
        return Interval(0.5, 1.5, 0, 0, (), True, "no residual table (run python -m mfukit.perf.calibrate)")
    level, names, members = _matching(regime, pool)
    sources = {r.source for r in members}
    sizes = {source: sum(r.source == source for r in members) for source in sources}
    values = np.asarray([r.log_error for r in members])
    weights = np.asarray([1.0 / sizes[r.source] for r in members])
    low, high = _weighted_quantiles(values, weights, (LOW_QUANTILE, HIGH_QUANTILE))
    reason = _extrapolation(regime, pool, level)
    if reason:
        centre = 0.5 * (low + high)
        low, high = (
            centre + EXTRAPOLATION_WIDENING * (low - centre),
            centre + EXTRAPOLATION_WIDENING * (high - centre),
        )
    peers = [
        r.measured_mfu
        for r in pool
        if (r.regime.family, r.regime.stack, r.regime.precision)
        == (regime.family, regime.stack, regime.precision)
    ]
    return Interval(
        highest_measured_mfu=max(peers) if peers else None,
        low_factor=math.exp(min(low, 0.0)),
        high_factor=math.exp(max(high, 0.0)),
        rows=len(members),
        sources=len(sources),
        matched_on=names,
        extrapolated=bool(reason),
        reason=reason,
    )


def _matching(regime: Regime, pool: Sequence[Residual]) -> tuple[int, tuple[str, ...], list[Residual]]:
    """The most specific level at which enough runs of enough sources share the regime, and those runs."""
    for level, names in enumerate(LEVELS):
        wanted = regime.key(names)
        members = [r for r in pool if r.regime.key(names) == wanted]
        if len(members) >= MIN_ROWS and len({r.source for r in members}) >= MIN_SOURCES:
            return level, names, members
    return len(LEVELS) - 1, (), list(pool)


def _extrapolation(regime: Regime, pool: Sequence[Residual], level: int) -> str:
    """Why a regime lies outside the measured runs ('' when it does not)."""
    same = [r for r in pool if r.regime.family == regime.family and r.regime.stack == regime.stack]
    if not any(r.regime.family == regime.family for r in pool):
        return f"no measured run on the {regime.family} GPU family"
    if not same:
        return f"no measured run of {regime.stack} on {regime.family}"
    if not any(r.regime.sharding == regime.sharding for r in same):
        return f"no measured run of {regime.stack} with {regime.sharding} on {regime.family}"
    largest = max(r.regime.num_gpus for r in same)
    if regime.num_gpus > largest:
        return f"{regime.num_gpus:,} GPUs is beyond the largest measured {regime.stack} run on {regime.family} ({largest:,})"
    return (
        ""
        if level < 3
        else f"few runs share this regime (matched on {', '.join(LEVELS[level]) or 'nothing'})"
    )
