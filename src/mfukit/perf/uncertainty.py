"""How sure a prediction is: intervals from the leave-one-source-out residuals of comparable measured runs.

Every measured run in the calibration data was predicted by constants fitted without its source
(:mod:`mfukit.perf.loso`); ``data/loso_residuals.csv`` keeps ln(measured / predicted) of each with the run's
regime: GPU family, software stack, sharding (full weights on every rank, or sharded weights), scale band and
precision. A prediction's band is the 10th-90th percentile of the residuals of the runs that share its
regime, each source weighted equally (a sweep of a thousand rows counts as one source). Where fewer than
:data:`MIN_ROWS` runs of :data:`MIN_SOURCES` sources share the whole regime, the scale band is dropped, then
the precision, the sharding, the stack; what was dropped is said. A prediction whose regime no measured run
shares (another GPU family or stack, or beyond the largest measured scale of its family and stack) is
*extrapolated*: its band comes from the runs whose own held-out prediction was an extrapolation (how wrong
the model was when it last stepped outside what it had seen), its interval is never narrower than that of
the nearest measured runs, and it says so.

The band is then stretched (in ln space, about its centre), each half by the factor that leaves at most half
of 1 - :data:`TARGET_COVERAGE` of the held-out runs of the *other* source families, of the same kind (matched
or extrapolated), beyond that end of their own bands, sources weighted equally
(split-conformal calibration, Vovk et al. 2005; Angelopoulos & Bates 2021, section 2): residuals of one
source share a bias, so pooling runs gives bands too narrow for a new source, and this factor measures by
how much. Each run's own band (built without its family) and whether it was an extrapolation are computed
once, when the table is written. ``benchmarks/accuracy.py`` measures the coverage leave-one-source-out: a
source's rows are judged by bands whose factor was fitted without that source.

An interval's high end never passes the layout's *kernel ceiling*
(:attr:`~mfukit.perf.step_time.StepEstimate.kernel_ceiling`): the speed of the step if nothing but its GEMMs and
attention took time. Residual bands are wide where a few sources were badly under-predicted, and an MFU
interval reaching 100 % says nothing; no measured run is faster than its own kernels (99 % of the calibration
runs lie under the ceiling of their in-sample prediction), so the band stops there. Each run's held-out ceiling
is kept in the table, and the stretch factor and the coverage are measured with it.
"""

from __future__ import annotations

import csv
import io
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
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
    "extrapolated",
    "band_low",
    "band_high",
    "ceiling",
)
MIN_ROWS = 12
MIN_SOURCES = 2
LOW_QUANTILE, HIGH_QUANTILE = 0.10, 0.90  # an 80 % interval
TARGET_COVERAGE = 0.80
SCALES = np.round(np.arange(0.5, 8.0001, 0.05), 2)  # the band scale factors tried, smallest first
# the kernel ceiling is itself a prediction: it is stretched by the smallest of these factors that leaves at
# most CEILING_MISS of the held-out runs (sources weighted equally) above it
CEILING_MARGINS = np.round(np.arange(1.0, 3.0001, 0.05), 2)
CEILING_MISS = 0.02
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
    """Full weights on every rank (DDP, ZeRO-1/2, Megatron's distributed optimizer) or sharded weights (ZeRO-3,
    FSDP): the two regimes of data parallelism's traffic. A sharded optimizer moves what DDP moves (its
    reduce-scatter of the gradients and all-gather of the updated weights are the two halves of an all-reduce,
    Rabenseifner 2004), once per step; sharded weights are gathered again for every micro-batch's forward and
    backward, under the compute of one layer."""
    return "sharded weights" if layout.shards_parameters else "full weights"


def sharding_class_of(name: str) -> str:
    """:func:`sharding_class` of a planner sharding name (``perf.model_states.Sharding``)."""
    return "sharded weights" if name in ("zero-3", "fsdp-full", "fsdp-hybrid") else "full weights"


def family_of(accelerator: str) -> str:
    """The GPU family an accelerator belongs to: its own hardware profile, even one that borrows another's
    constants. A run on a borrowing family (MI300X on Hopper's constants, H200 on H100's) tests the lender's
    constants on other silicon: its residuals are not the lender's, and a prediction there is an
    extrapolation until enough runs of that family were measured."""
    profile = hardware_profile_of(accelerator)
    return "unprofiled" if profile is None else profile.name


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
    # set by :func:`annotated` when the table is written: whether the run's own held-out prediction was an
    # extrapolation, and its own band (ln factors, before :func:`scaled`) from the other source families' runs
    extrapolated: bool = False
    band_low: float = math.nan
    band_high: float = math.nan
    # ln of the held-out prediction's kernel ceiling (StepEstimate.kernel_ceiling): its interval's highest end
    ceiling: float = math.inf


def residual_of(case: Case, log_error: float, ceiling: float = math.inf) -> Residual:
    """A run's residual; ``ceiling``: its held-out prediction's kernel ceiling (a factor, at least 1)."""
    return Residual(
        case.source, case.row_id, case_regime(case), log_error, measured_mfu(case), ceiling=math.log(ceiling)
    )


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
    # the calibrated factors the band's lower and upper halves were stretched by (ln space)
    scales: tuple[float, float] = (1.0, 1.0)
    ceiling_margin: float = 1.0  # the factor the kernel ceiling is stretched by (:func:`ceiling_margin`)

    def capped(self, ceiling: float) -> Interval:
        """This interval with its high end at most ``ceiling`` (the layout's
        :attr:`~mfukit.perf.step_time.StepEstimate.kernel_ceiling`) times the calibrated margin times the
        estimate."""
        return replace(self, high_factor=max(1.0, min(self.high_factor, ceiling * self.ceiling_margin)))

    def around(self, value: float) -> tuple[float, float]:
        return value * self.low_factor, value * self.high_factor

    def around_mfu(self, mfu: float) -> tuple[float, float]:
        """:meth:`around` for an MFU, whose high end no GPU passes: at most 1."""
        low, high = self.around(mfu)
        return low, min(high, 1.0)

    def basis(self) -> str:
        keys = ", ".join(self.matched_on) if self.matched_on else "every run"
        below, above = self.scales
        text = (
            f"{self.rows} held-out runs of {self.sources} sources sharing {keys}, "
            f"spread x{below:.2f} below and x{above:.2f} above"
        )
        return f"{text}; extrapolated: {self.reason}" if self.extrapolated else text


class _Table:
    """A residual table as arrays, for matching a regime without one Python loop per run."""

    def __init__(self, residuals: Sequence[Residual]) -> None:
        self.residuals = tuple(residuals)
        self.sources = np.asarray([r.source for r in residuals], dtype=object)
        self.families = np.asarray([source_family(r.source) for r in residuals], dtype=object)
        self.log_error = np.asarray([r.log_error for r in residuals], dtype=np.float64)
        self.extrapolated = np.asarray([r.extrapolated for r in residuals], dtype=bool)
        self.ceiling = np.asarray([r.ceiling for r in residuals], dtype=np.float64)
        self.band = np.asarray([(r.band_low, r.band_high) for r in residuals], dtype=np.float64).reshape(
            -1, 2
        )
        self.num_gpus = np.asarray([r.regime.num_gpus for r in residuals], dtype=np.int64)
        self.mfu = np.asarray([r.measured_mfu for r in residuals], dtype=np.float64)
        self.keys = {
            names: np.asarray([r.regime.key(names) for r in residuals], dtype=object).reshape(
                len(residuals), -1
            )
            for names in (*LEVELS[:-1], ("family", "stack", "precision"))
        }

    def where(self, regime: Regime, names: tuple[str, ...], pool: np.ndarray) -> np.ndarray:
        if not names:
            return pool
        same: np.ndarray = np.all(self.keys[names] == np.asarray(regime.key(names), dtype=object), axis=1)
        both: np.ndarray = pool & same
        return both

    def source_count(self, mask: np.ndarray) -> int:
        return len(set(self.sources[mask].tolist()))


def annotated(residuals: Sequence[Residual]) -> list[Residual]:
    """Each run's own held-out band and whether it was an extrapolation, judged as a prediction in its regime
    would be with the run's source family left out (the flags first: an extrapolated band rests on them)."""
    table = _Table(residuals)
    flags: dict[tuple[str, Regime], bool] = {}
    for r, family in _each(table):
        if (family, r.regime) not in flags:
            flags[(family, r.regime)] = _extrapolation_of(table, r.regime, table.families != family)[2] != ""
    flagged = _Table(
        [replace(r, extrapolated=flags[key]) for r, key in zip(residuals, _keys(table), strict=True)]
    )
    bands: dict[tuple[str, Regime], tuple[float, float]] = {}
    for r, family in _each(flagged):
        if (family, r.regime) not in bands:
            bands[(family, r.regime)] = _band(flagged, r.regime, flagged.families != family)[:2]
    return [
        replace(r, band_low=bands[key][0], band_high=bands[key][1])
        for r, key in zip(flagged.residuals, _keys(flagged), strict=True)
    ]


def _each(table: _Table) -> list[tuple[Residual, str]]:
    return [(r, str(family)) for r, family in zip(table.residuals, table.families.tolist(), strict=True)]


def _keys(table: _Table) -> list[tuple[str, Regime]]:
    return [(family, r.regime) for r, family in _each(table)]


def write_residuals(path: Path, residuals: Sequence[Residual]) -> None:
    """The residual table: one row per measured run with its regime, ln(measured / predicted), whether its
    prediction extrapolated and its own band (:func:`annotated`); a run a fold predicted nothing for (no finite
    residual) is left out. Written whole or not at all."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(COLUMNS)
    for r in annotated([r for r in residuals if math.isfinite(r.log_error)]):
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
                int(r.extrapolated),
                f"{r.band_low:.5f}",
                f"{r.band_high:.5f}",
                f"{r.ceiling:.5f}",
            ]
        )
    write_text_atomic(path, buffer.getvalue())
    load_residuals.cache_clear()
    cached_interval.cache_clear()
    _table_of.cache_clear()
    _kind_scale.cache_clear()
    _ceiling_margin.cache_clear()


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
                        row["extrapolated"] == "1",
                        float(row["band_low"]),
                        float(row["band_high"]),
                        float(row.get("ceiling") or "inf"),  # a table written before ceilings: none
                    )
                )
    except (KeyError, ValueError, OSError, TypeError) as error:
        raise InputError(
            f"the residual table {where} cannot be read: {error}",
            source=str(where),
            hint="write it again: python -m mfukit.perf.calibrate",
        ) from None
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


def _source_weights(sources: np.ndarray) -> np.ndarray:
    """1 / (the source's row count) for each row: every source weighs the same in total."""
    names, inverse, counts = np.unique(sources.astype(str), return_inverse=True, return_counts=True)
    del names
    return 1.0 / counts[inverse]


@cache
def _table_of(residuals: tuple[Residual, ...]) -> _Table:
    return _Table(residuals)


@cache
def cached_interval(regime: Regime) -> Interval:
    """:func:`interval_for` of the installed residual table, once per regime (the planner asks per layout)."""
    return interval_for(regime)


def interval_for(
    regime: Regime, *, exclude_source: str | None = None, residuals: Sequence[Residual] | None = None
) -> Interval:
    """The 80 % interval of a prediction in ``regime`` (``exclude_source``: built without the runs of that
    source and its siblings, its scale fitted without them, as coverage is measured)."""
    table = _table_of(tuple(load_residuals() if residuals is None else residuals))
    held_out = None if exclude_source is None else source_family(exclude_source)
    pool = table.families != held_out
    if not pool.any():
        return Interval(0.5, 1.5, 0, 0, (), True, "no residual table (run python -m mfukit.perf.calibrate)")
    band_low, band_high, names, members, reason, nearest = _band(table, regime, pool)
    scales = _kind_scale(table, held_out, bool(reason))
    margin = _ceiling_margin(table, held_out)
    low, high = (float(end) for end in scaled(np.asarray([[band_low, band_high]]), *scales)[0])
    if reason:
        # never narrower than the interval of the nearest measured runs (the broader regime matched): an
        # extrapolation is at least as uncertain as the runs it steps away from
        near = scaled(np.asarray([_quantile_band(table, nearest)]), *_kind_scale(table, held_out, False))
        low, high = min(low, float(near[0, 0])), max(high, float(near[0, 1]))
    peers = table.where(regime, ("family", "stack", "precision"), pool)
    return Interval(
        highest_measured_mfu=float(table.mfu[peers].max()) if peers.any() else None,
        low_factor=math.exp(low),
        high_factor=math.exp(high),
        rows=int(members.sum()),
        sources=table.source_count(members),
        matched_on=names,
        extrapolated=bool(reason),
        reason=reason,
        scales=scales,
        ceiling_margin=margin,
    )


def scaled(band: np.ndarray, below: float, above: float | None = None) -> np.ndarray:
    """Bands (rows of ln low, ln high) with their lower half stretched ``below`` times and their upper half
    ``above`` times (``below`` when not given) about their centres, then widened to hold the estimate itself
    (0): intervals in ln factors."""
    centre = band.mean(axis=1)
    half = 0.5 * (band[:, 1] - band[:, 0])
    upper = below if above is None else above
    return np.stack([np.minimum(centre - below * half, 0.0), np.maximum(centre + upper * half, 0.0)], axis=1)


@cache
def _kind_scale(table: _Table, held_out: str | None, extrapolated: bool) -> tuple[float, float]:
    """:func:`band_scale` of the runs of one kind outside the ``held_out`` family, once per table (coverage
    and validation ask for every run)."""
    return band_scale(table, (table.families != held_out) & (table.extrapolated == extrapolated))


@cache
def _ceiling_margin(table: _Table, held_out: str | None) -> float:
    """:func:`ceiling_margin` of the runs outside the ``held_out`` family, once per table."""
    return ceiling_margin(table, table.families != held_out)


def ceiling_margin(table: _Table, pool: np.ndarray) -> float:
    """The smallest of :data:`CEILING_MARGINS` that leaves at most :data:`CEILING_MISS` of the ``pool`` runs
    (sources weighted equally) measured above their held-out prediction's kernel ceiling times it (1.0 where
    no run has a ceiling). A fold that misjudged a source's kernels (its attention at long sequences, its
    GEMMs) misjudges the ceiling too: this is how far held-out runs have passed it."""
    usable = pool & np.isfinite(table.ceiling)
    if not usable.any():
        return 1.0
    excess = table.log_error[usable] - table.ceiling[usable]
    weights = _source_weights(table.sources[usable])
    weights = weights / weights.sum()
    margin = next(
        (m for m in CEILING_MARGINS.tolist() if float(weights @ (excess > math.log(m))) <= CEILING_MISS),
        float(CEILING_MARGINS[-1]),
    )
    return float(margin)


def band_scale(table: _Table, pool: np.ndarray) -> tuple[float, float]:
    """The smallest of :data:`SCALES` for each half of the ``pool`` runs' own :func:`scaled` bands that leaves
    at most half of 1 - :data:`TARGET_COVERAGE` of them (sources weighted equally) below the band, and the
    same share above it, its high end at most each run's kernel ceiling ((1.0, 1.0) where no run has a band:
    a table of runs alone). The halves are calibrated apart (as conformalized quantile regression does,
    Romano et al. 2019): a run above its ceiling can never be inside, and one factor for both halves would
    stretch the lower end for its sake. :func:`interval_for` passes the runs of the prediction's kind,
    extrapolated or matched: an extrapolated band already rests on the errors of extrapolations, and one
    factor for both kinds would stretch it for the matched runs' sake."""
    usable = pool & np.isfinite(table.band).all(axis=1)
    if not usable.any():
        return 1.0, 1.0
    errors = table.log_error[usable]
    ceilings = table.ceiling[usable] + math.log(ceiling_margin(table, pool))
    weights = _source_weights(table.sources[usable])
    weights = weights / weights.sum()
    miss = (1.0 - TARGET_COVERAGE) / 2
    centre = table.band[usable].mean(axis=1)
    half = 0.5 * (table.band[usable, 1] - table.band[usable, 0])

    def smallest(outside: Callable[[float], np.ndarray]) -> float:
        return next((s for s in SCALES.tolist() if float(weights @ outside(s)) <= miss), float(SCALES[-1]))

    below = smallest(lambda s: errors < np.minimum(centre - s * half, 0.0))
    above = smallest(lambda s: errors > np.minimum(np.maximum(centre + s * half, 0.0), ceilings))
    return float(below), float(above)


def _band(
    table: _Table, regime: Regime, pool: np.ndarray
) -> tuple[float, float, tuple[str, ...], np.ndarray, str, np.ndarray]:
    """The unscaled band (10th and 90th percentiles of ln(measured / predicted)) of a prediction in ``regime``
    from the ``pool`` runs: the names matched, the runs it rests on, why it extrapolates ('' if not), and the
    nearest measured runs (the broadest regime matched; the same runs unless it extrapolates)."""
    names, nearest, reason = _extrapolation_of(table, regime, pool)
    members = nearest
    if reason:
        extrapolations = pool & table.extrapolated
        if table.source_count(extrapolations) >= MIN_SOURCES:
            names, members = ("runs whose own prediction extrapolated",), extrapolations
    low, high = _quantile_band(table, members)
    return low, high, names, members, reason, nearest


def _quantile_band(table: _Table, members: np.ndarray) -> tuple[float, float]:
    """The 10th and 90th percentiles of the ``members`` runs' residuals, each source weighted equally."""
    weights = _source_weights(table.sources[members])
    return _weighted_quantiles(table.log_error[members], weights, (LOW_QUANTILE, HIGH_QUANTILE))


def _extrapolation_of(
    table: _Table, regime: Regime, pool: np.ndarray
) -> tuple[tuple[str, ...], np.ndarray, str]:
    """The most specific level at which enough runs of enough sources share the regime, those runs, and why
    the regime lies outside the measured runs ('' when it does not)."""
    level, members = len(LEVELS) - 1, pool
    names: tuple[str, ...] = ()
    for index, candidate in enumerate(LEVELS):
        found = table.where(regime, candidate, pool)
        if found.sum() >= MIN_ROWS and table.source_count(found) >= MIN_SOURCES:
            level, names, members = index, candidate, found
            break
    return names, members, _reason(table, regime, pool, level)


def _reason(table: _Table, regime: Regime, pool: np.ndarray, level: int) -> str:
    family = table.where(regime, ("family",), pool)
    same = table.where(regime, ("family", "stack"), pool)
    if not family.any():
        return f"no measured run on the {regime.family} GPU family"
    if not same.any():
        return f"no measured run of {regime.stack} on {regime.family}"
    if not table.where(regime, ("family", "stack", "sharding"), pool).any():
        return f"no measured run of {regime.stack} with {regime.sharding} on {regime.family}"
    largest = int(table.num_gpus[same].max())
    if regime.num_gpus > largest:
        return f"{regime.num_gpus:,} GPUs is beyond the largest measured {regime.stack} run on {regime.family} ({largest:,})"
    if level < 3:
        return ""
    # the narrowest level with any run, and what it lacks (MIN_ROWS runs of MIN_SOURCES sources)
    for keys in LEVELS:
        closest = table.where(regime, keys, pool)
        if closest.any():
            break
    rows, sources = int(closest.sum()), table.source_count(closest)
    return (
        f"few runs share this regime: {rows:,} run{'s' if rows != 1 else ''} of {sources} "
        f"source{'s' if sources != 1 else ''} match its {', '.join(keys)} ({MIN_ROWS} runs of {MIN_SOURCES} "
        "sources needed)"
    )
