"""Per-rank and job-wide temporal breakdown from the traced steps (what ``result.time_breakdown`` holds).

Fractions are of the traced step time: compute + exposed communication + exposed memcpy + idle = 1;
idle splits into host wait + kernel wait; communication overlapped with compute is reported beside.
"""

from __future__ import annotations

from dataclasses import dataclass

from mfukit.diagnose.records import RankTrace

FIELDS = (
    "compute_s",
    "comm_s",
    "comm_exposed_s",
    "memcpy_exposed_s",
    "idle_s",
    "host_wait_s",
    "kernel_wait_s",
    "launch_gap_s",
    "dataloader_s",
    "dataloader_exposed_s",
    "checkpoint_exposed_s",
    "gc_exposed_s",
)


@dataclass(frozen=True)
class RankSummary:
    rank: int
    file: str
    num_steps: int
    step_s: float
    """Median step time."""
    fractions: dict[str, float]
    """Each FIELDS entry (without ``_s``) as a share of the total traced step time."""
    medians_s: dict[str, float]
    """Each FIELDS entry's median over steps, seconds."""


def ranked_traces(traces: list[RankTrace]) -> list[tuple[int, RankTrace]]:
    """Traces with steps, each with a rank: its own, or its position when the trace has none."""
    usable = [t for t in traces if t.steps]
    taken = {t.rank for t in usable if t.rank is not None}
    spare = (n for n in range(10**9) if n not in taken)
    return sorted(
        (((t.rank if t.rank is not None else next(spare)), t) for t in usable), key=lambda pair: pair[0]
    )


def summarize(rank: int, trace: RankTrace) -> RankSummary:
    steps = [s for s in trace.steps if s.duration_s > 0]
    total = sum(s.duration_s for s in steps) or 1.0
    fractions = {name.removesuffix("_s"): sum(getattr(s, name) for s in steps) / total for name in FIELDS}
    return RankSummary(
        rank=rank,
        file=trace.file,
        num_steps=len(steps),
        step_s=trace.median("duration_s"),
        fractions=fractions,
        medians_s={name: trace.median(name) for name in FIELDS},
    )


def summaries(traces: list[RankTrace]) -> list[RankSummary]:
    return [summarize(rank, trace) for rank, trace in ranked_traces(traces)]


def median(values: list[float]) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else 0.5 * (ordered[middle - 1] + ordered[middle])


def job_fraction(ranks: list[RankSummary], key: str) -> float:
    """The median over ranks of one breakdown fraction: what a typical rank loses."""
    return median([r.fractions[key] for r in ranks])


def time_breakdown(ranks: list[RankSummary]) -> dict[str, object]:
    if not ranks:
        return {}
    keys = (
        "compute",
        "comm_exposed",
        "memcpy_exposed",
        "idle",
        "host_wait",
        "kernel_wait",
        "comm",
        "dataloader_exposed",
    )
    overall = {f"{key}_fraction": job_fraction(ranks, key) for key in keys}
    overall["comm_overlapped_fraction"] = max(
        0.0, overall["comm_fraction"] - overall["comm_exposed_fraction"]
    )
    overall["step_time_s"] = median([r.step_s for r in ranks])
    return {
        "basis": "median over ranks of each rank's share of its traced step time",
        "overall": overall,
        "per_rank": [
            {
                "rank": r.rank,
                "file": r.file,
                "steps": r.num_steps,
                "step_time_s": r.step_s,
                **{f"{key}_fraction": r.fractions[key] for key in keys},
            }
            for r in ranks
        ],
    }
