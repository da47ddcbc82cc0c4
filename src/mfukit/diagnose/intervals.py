"""Interval algebra on sorted numpy arrays: union, measure inside windows, gaps.

A set of intervals is a pair of float arrays (starts, ends), sorted and disjoint after :func:`union`.
Measures inside many windows at once use the cumulative-measure function F(t) = |S ∩ (-inf, t]|, so
|S ∩ [a, b]| = F(b) - F(a) for every window in one vectorised call.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

Array = NDArray[np.float64]


def union(starts: Array, ends: Array) -> tuple[Array, Array]:
    """Merge possibly overlapping intervals into a sorted, disjoint set."""
    if starts.size == 0:
        return starts.astype(np.float64), ends.astype(np.float64)
    order = np.argsort(starts, kind="stable")
    s = starts[order]
    e = np.maximum.accumulate(ends[order])
    # a new run starts where an interval begins after every earlier one has ended
    new_run = np.empty(s.size, dtype=bool)
    new_run[0] = True
    new_run[1:] = s[1:] > e[:-1]
    last_of_run = np.empty(s.size, dtype=bool)
    last_of_run[:-1] = new_run[1:]
    last_of_run[-1] = True
    return s[new_run].astype(np.float64), e[last_of_run].astype(np.float64)


def cumulative(starts: Array, ends: Array, points: Array) -> Array:
    """F(t) for each t in ``points``: the measure of the disjoint set (starts, ends) up to t."""
    if starts.size == 0:
        return np.zeros(points.size, dtype=np.float64)
    lengths = ends - starts
    before = np.concatenate(([0.0], np.cumsum(lengths)))
    index = np.searchsorted(starts, points, side="right")  # intervals starting at or before t
    total = before[index]
    last = index - 1
    valid = last >= 0
    overshoot = np.zeros(points.size, dtype=np.float64)
    overshoot[valid] = np.maximum(0.0, ends[last[valid]] - points[valid])
    return np.asarray(total - overshoot, dtype=np.float64)


def measure_in(starts: Array, ends: Array, window_starts: Array, window_ends: Array) -> Array:
    """|S ∩ [a, b]| for every window [a, b] (S disjoint and sorted). The difference of two cumulative
    sums can round a few ulps below zero; a measure never is, so it is clipped there."""
    return np.maximum(cumulative(starts, ends, window_ends) - cumulative(starts, ends, window_starts), 0.0)


def gaps(starts: Array, ends: Array, lo: float, hi: float) -> tuple[Array, Array]:
    """The complement of the disjoint set inside [lo, hi]."""
    if starts.size == 0:
        return np.array([lo]), np.array([hi])
    gap_starts = np.concatenate(([lo], ends))
    gap_ends = np.concatenate((starts, [hi]))
    gap_starts = np.clip(gap_starts, lo, hi)
    gap_ends = np.clip(gap_ends, lo, hi)
    keep = gap_ends > gap_starts
    return gap_starts[keep], gap_ends[keep]


def intersect_in_windows(
    a_starts: Array, a_ends: Array, b_starts: Array, b_ends: Array, window_starts: Array, window_ends: Array
) -> Array:
    """|A ∩ B ∩ [a, b]| for every window [a, b] (A and B disjoint and sorted), in one pass: the pieces of A
    inside each window (found by binary search, A being sorted) are measured against B with one
    cumulative-measure call, then summed per window."""
    if a_starts.size == 0 or b_starts.size == 0 or window_starts.size == 0:
        return np.zeros(window_starts.size, dtype=np.float64)
    first = np.searchsorted(a_ends, window_starts, side="right")
    last = np.searchsorted(a_starts, window_ends, side="left")
    counts = np.maximum(0, last - first)
    window = np.repeat(np.arange(window_starts.size), counts)
    offset = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
    index = np.repeat(first, counts) + offset
    piece_starts = np.maximum(a_starts[index], window_starts[window])
    piece_ends = np.maximum(piece_starts, np.minimum(a_ends[index], window_ends[window]))
    measured = measure_in(b_starts, b_ends, piece_starts, piece_ends)
    return np.bincount(window, weights=measured, minlength=window_starts.size).astype(np.float64)
