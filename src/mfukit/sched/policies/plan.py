"""A plan of future free GPUs per node, for backfill with reservations (conservative and Slurm).

The plan is a list of time slots ``[t_i, t_{i+1})``; each slot holds, for every ``g`` in 1..G, the set
of nodes with at least ``g`` free GPUs as an integer bitmask, so "which nodes stay free enough for
the whole window" is an AND of a few big integers and "how many" a popcount, as Slurm's backfill
uses node bitmaps. Running jobs hand their GPUs back at their expected ends (start + time limit);
reservations take GPUs out of the slots they cover. Nodes that are down or draining never appear.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Sequence

from mfukit.sched.job import Job
from mfukit.sched.nodes import Nodes


def _bits(mask: int) -> list[int]:
    """The set bits of ``mask``, lowest first."""
    return [index for index, bit in enumerate(reversed(bin(mask))) if bit == "1"]


def consecutive_best_fit(
    candidates: int, need: int, free: Sequence[int] | None = None
) -> tuple[int, ...] | None:
    """Slurm's node choice among ``candidates`` (select/cons_tres ``_eval_nodes``, 22.05).

    The candidates split into runs of consecutive node indices. Until ``need`` nodes are taken, the
    next run is the first that is *sufficient* (holds every node still needed) with the least
    resources, or, while none is sufficient, the one with the most; a run's resources are the sum of
    ``free`` over its nodes (Slurm sums the CPUs each node can give the job; the simulator tracks
    GPUs, which rank nodes alike when CPUs follow GPUs; uniform when ``free`` is None). From the
    chosen run the lowest nodes are taken, or, for the last node, the one with the least free.
    None when there are too few candidates.
    """
    nodes = _bits(candidates)
    if len(nodes) < need:
        return None
    runs: list[list[int]] = []
    for node in nodes:
        if runs and runs[-1][-1] == node - 1:
            runs[-1].append(node)
        else:
            runs.append([node])
    size = [len(run) if free is None else sum(free[node] for node in run) for run in runs]
    picked: list[int] = []
    left = need
    while left > 0:
        best, best_sufficient = -1, False
        for index, run in enumerate(runs):
            if not run:
                continue
            sufficient = len(run) >= left
            if (
                best < 0
                or (sufficient and not best_sufficient)
                or (sufficient and size[index] < size[best])
                or (not sufficient and size[index] > size[best])
            ):
                best, best_sufficient = index, sufficient
        run = runs[best]
        # the last node: Slurm's single-node best fit within the run
        taken = run[:left] if left > 1 else [run[0] if free is None else min(run, key=free.__getitem__)]
        picked.extend(taken)
        left -= len(taken)
        runs[best] = []
    return tuple(sorted(picked))


def pick_nodes(
    nodes: Nodes, candidates: int, need: int, max_switches: int = 0, free: Sequence[int] | None = None
) -> tuple[int, ...] | None:
    """``need`` nodes among ``candidates``: Slurm's consecutive best fit, or, for a ``--switches``
    request on a tree of leaf switches, the nodes of one leaf if any holds them all (the tightest),
    else of the fullest leaves (at most ``max_switches``)."""
    if max_switches <= 0 or nodes.num_leaves <= 1:
        return consecutive_best_fit(candidates, need, free)
    per_leaf: list[list[int]] = [[] for _ in range(nodes.num_leaves)]
    for node in _bits(candidates):
        per_leaf[nodes.leaf[node]].append(node)
    return nodes.pick_within_leaves(per_leaf, need, max_switches)


def take_best_fit(nodes: Nodes, job: Job, max_switches: int, busy: int = 0) -> tuple[int, ...] | None:
    """Take the nodes Slurm gives ``job`` now (:func:`pick_nodes` among the nodes it fits on, less
    the ``busy`` mask), or None when it does not fit."""
    candidates = eligible_mask(nodes, job.gpus_per_node) & ~busy
    picked = pick_nodes(nodes, candidates, job.num_nodes, max_switches, nodes.free)
    if picked is not None:
        nodes.take_nodes(picked, job.gpus_per_node)
    return picked


def eligible_mask(nodes: Nodes, gpus: int) -> int:
    """Bitmask of nodes that take work and have at least ``gpus`` free GPUs now."""
    mask = 0
    for bucket in nodes.bucket[gpus:]:
        for node in bucket:
            mask |= 1 << node
    return mask


class Plan:
    def __init__(self, now: float, nodes: Nodes, releases: Iterable[tuple[float, Job]]) -> None:
        top = nodes.gpus_per_node
        self.top = top
        self.nodes = nodes
        free = [f if ok else 0 for f, ok in zip(nodes.free, nodes.accepting, strict=True)]
        # nodes with at least g free = the union of the buckets of g..top free GPUs (suffix OR)
        masks = [0] * (top + 1)
        running_or = 0
        for level in range(top, -1, -1):
            for node in nodes.bucket[level]:
                running_or |= 1 << node
            masks[level] = running_or
        self.times: list[float] = [now]
        self.masks: list[list[int]] = [masks]
        accepting = nodes.accepting
        for at, job in releases:
            if at > self.times[-1]:
                self.times.append(at)
                self.masks.append(list(self.masks[-1]))
            current = self.masks[-1]
            add = job.gpus_per_node
            gained = 0  # nodes that become entirely free with this release
            for node in job.nodes:
                if not accepting[node]:
                    continue
                before = free[node]
                free[node] = before + add
                if before == 0 and add == top:
                    gained |= 1 << node
                    continue
                for level in range(before + 1, before + add + 1):
                    current[level] |= 1 << node
            if gained:
                for level in range(1, top + 1):
                    current[level] |= gained

    # --------------------------------------------------------------------------------------- search
    def find(
        self, job: Job, duration_s: float, max_switches: int = 0
    ) -> tuple[float, tuple[int, ...]] | None:
        """Earliest slot start at which ``job`` fits for ``duration_s``."""
        times, masks = self.times, self.masks
        need, gpus = job.num_nodes, job.gpus_per_node
        count = len(times)
        index = 0
        while index < count:
            start = times[index]
            common = masks[index][gpus]
            if common.bit_count() < need:
                index += 1
                continue
            end = start + duration_s
            later = index + 1
            while later < count and times[later] < end:
                common &= masks[later][gpus]
                if common.bit_count() < need:
                    break
                later += 1
            else:
                picked = pick_nodes(self.nodes, common, need, max_switches)
                if picked is not None:
                    return start, picked
                index += 1
                continue
            index = later + 1  # every start up to slot `later` overlaps it: skip them all
        return None

    # ------------------------------------------------------------------------------------- reserve
    def _boundary(self, at: float) -> int:
        """Index of the slot starting at ``at`` (splitting the slot that contains it)."""
        times = self.times
        at = max(at, times[0])
        index = bisect_left(times, at)
        if index < len(times) and times[index] == at:
            return index
        times.insert(index, at)
        self.masks.insert(index, list(self.masks[index - 1]))
        return index

    def reserve(self, start_s: float, end_s: float, nodes: tuple[int, ...], gpus: int) -> None:
        """Take ``gpus`` GPUs on each of ``nodes`` out of every slot in ``[start_s, end_s)``."""
        if end_s <= start_s:
            return
        first = self._boundary(start_s)
        last = self._boundary(end_s) if end_s != float("inf") else len(self.times)
        top = self.top
        if gpus == top:  # whole nodes: clear them at every level, all nodes at once
            keep = ~sum(1 << node for node in nodes)
            for slot in self.masks[first:last]:
                for level in range(1, top + 1):
                    slot[level] &= keep
            return
        for slot in self.masks[first:last]:
            for node in nodes:
                bit = 1 << node
                level = top
                while level > 0 and not slot[level] & bit:
                    level -= 1
                for cleared in range(max(level - gpus, 0) + 1, level + 1):
                    slot[cleared] &= ~bit
