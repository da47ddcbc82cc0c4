"""A plan of future free GPUs per node, for backfill with reservations (conservative and Slurm).

The plan is a list of time slots ``[t_i, t_{i+1})``; each slot holds, for every ``g`` in 1..G, the set
of nodes with at least ``g`` free GPUs as an integer bitmask, so "which nodes stay free enough for
the whole window" is an AND of a few big integers and "how many" a popcount, as Slurm's backfill
uses node bitmaps. Running jobs hand their GPUs back at their expected ends (start + time limit);
reservations take GPUs out of the slots they cover. Nodes that are down or draining never appear.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable

from mfukit.sched.job import Job
from mfukit.sched.nodes import Nodes


def _bits(mask: int) -> list[int]:
    nodes = []
    while mask:
        low = mask & -mask
        nodes.append(low.bit_length() - 1)
        mask ^= low
    return nodes


def consecutive_best_fit(candidates: int, need: int) -> tuple[int, ...] | None:
    """Slurm's node choice (select/cons_tres ``_eval_nodes``, from select/linear): split the eligible
    nodes into runs of consecutive indices; take the lowest nodes of the smallest run that holds the
    whole request, or else the largest runs first. None when there are too few nodes."""
    nodes = _bits(candidates)
    if len(nodes) < need:
        return None
    runs: list[list[int]] = []
    for node in nodes:
        if runs and runs[-1][-1] == node - 1:
            runs[-1].append(node)
        else:
            runs.append([node])
    fitting = [run for run in runs if len(run) >= need]
    if fitting:
        return tuple(min(fitting, key=len)[:need])
    picked: list[int] = []
    for run in sorted(runs, key=len, reverse=True):
        picked.extend(run[: need - len(picked)])
        if len(picked) == need:
            break
    return tuple(sorted(picked))


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
        self._leaf_masks: list[int] | None = None

    # --------------------------------------------------------------------------------------- search
    def find(
        self, job: Job, duration_s: float, latest_start_s: float, max_switches: int = 0
    ) -> tuple[float, tuple[int, ...]] | None:
        """Earliest slot start (<= ``latest_start_s``) at which ``job`` fits for ``duration_s``."""
        times, masks = self.times, self.masks
        need, gpus = job.num_nodes, job.gpus_per_node
        count = len(times)
        index = 0
        while index < count:
            start = times[index]
            if start > latest_start_s:
                return None
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
                picked = self._pick(common, need, max_switches)
                if picked is not None:
                    return start, picked
                index += 1
                continue
            index = later + 1  # every start up to slot `later` overlaps it: skip them all
        return None

    def _pick(self, candidates: int, need: int, max_switches: int) -> tuple[int, ...] | None:
        if max_switches <= 0 or self.nodes.num_leaves <= 1:
            return consecutive_best_fit(candidates, need)
        if self._leaf_masks is None:
            leaf_masks = [0] * self.nodes.num_leaves
            for node, leaf in enumerate(self.nodes.leaf):
                leaf_masks[leaf] |= 1 << node
            self._leaf_masks = leaf_masks
        per_leaf = [candidates & leaf for leaf in self._leaf_masks]
        single = [m for m in per_leaf if m.bit_count() >= need]
        if single:
            return tuple(_bits(min(single, key=int.bit_count))[:need])
        picked: list[int] = []
        for mask in sorted(per_leaf, key=int.bit_count, reverse=True)[:max_switches]:
            picked.extend(_bits(mask)[: need - len(picked)])
        return tuple(picked) if len(picked) == need else None

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
