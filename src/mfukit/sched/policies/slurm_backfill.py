"""One cycle of Slurm's backfill scheduler (sched/backfill ``_attempt_backfill``, Slurm 22.05), with
select/cons_tres's will-run test, step by step as the C code does it.

Times are Slurm's: whole epoch seconds (``time_t``). A cycle keeps a *node space map*: time records
``[begin, end)`` from ``now`` rounded down to ``bf_resolution`` up to the end of ``bf_window``, each
with the nodes still free of *pending* jobs' reservations (running jobs are not in it). For each
pending job in priority order (at most ``bf_max_job_test`` reach the will-run test):

1. ``start_res`` = now. The usable nodes are those in every record overlapping
   ``[start_res, start_res + limit]`` (a record that begins exactly at the end counts); *later_start*
   is the end of the first record after ``start_res`` whose successor frees a node it lacks.
2. Will-run (``_will_run_test``): the job starts now if it fits on the usable nodes free now. Else
   running jobs are released in order of their expected end (start + time limit) in *groups*: the
   first group ends at the first end rounded up to the next multiple of 30 s (strictly above it) +
   30 s, and every later group reaches a window doubled at least once until it holds the next end;
   after each group the job is tested, and its start is the *last* end of the group that let it
   fit. Nodes are chosen by consecutive best fit (:func:`~mfukit.sched.policies.plan.
   consecutive_best_fit`) among the usable nodes free by then.
3. A start not later than now starts the job (flagged SchedBackfill) on the nodes chosen. A start
   after ``later_start`` retries from ``later_start`` (step 1). Otherwise the job's reservation is
   ``[start, start + limit)`` with both bounds rounded *down* to ``bf_resolution`` (at least one
   resolution long) on the chosen nodes, unless the rounded reservation overlaps a reservation
   already made on those nodes, which retries from the planned start.

A job that neither fits nor has a ``later_start`` is skipped; one whose start lies beyond
``bf_window`` gets no reservation. Jobs started by backfill stay in the will-run test as running
jobs, not in the map (Slurm reserves running jobs in the map only for ``--exclusive`` jobs or
licences, neither modelled).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from mfukit.sched.job import Job
from mfukit.sched.nodes import Nodes
from mfukit.sched.policies.plan import eligible_mask, pick_nodes

WILL_RUN_WINDOW_S = 30  # cons_tres _will_run_test: time_window = 30, doubled after every group
WILL_RUN_GROUP_MAX = 200  # ... and a group stops being tested after this many releases (rm_job_cnt)


@dataclass
class _Record:
    begin: int
    end: int
    avail: int  # bitmask of nodes free of reservations over [begin, end)


class NodeSpace:
    """Slurm's ``node_space`` map of one backfill cycle (a linked list in time order; kept as a list)."""

    def __init__(self, now_s: int, resolution_s: int, window_s: int, usable: int) -> None:
        self.resolution_s = resolution_s
        self.records = [
            _Record(
                now_s // resolution_s * resolution_s,
                (now_s + window_s) // resolution_s * resolution_s,
                usable,
            )
        ]

    def scan(self, usable: int, start_s: int, end_s: int) -> tuple[int, int]:
        """(nodes free of reservations over ``[start_s, end_s]``, later_start or 0)."""
        avail, later = usable, 0
        records = self.records
        last = len(records) - 1
        for index, record in enumerate(records):
            if record.end > start_s and index < last and not later:
                following = usable & records[index + 1].avail
                if following & ~(avail & record.avail):
                    later = record.end
            if record.end <= start_s:
                continue
            if record.begin > end_s:
                break
            avail &= record.avail
        return avail, later

    def overlaps(self, nodes: int, start_s: int, end_s: int) -> bool:
        """Whether ``nodes`` are reserved anywhere in ``[start_s, end_s)`` (``_test_resv_overlap``)."""
        return any(r.end > start_s and r.begin < end_s and nodes & ~r.avail for r in self.records)

    def reserve(self, start_s: int, end_s: int, nodes: int) -> None:
        """``_add_reservation``: take ``nodes`` out of ``[start_s, end_s)``, splitting records at the
        bounds, then merge at most one pair of neighbouring records left identical."""
        records = self.records
        start_s = max(start_s, records[0].begin)
        end_s = max(end_s, start_s + self.resolution_s)
        one_before, index, placed = 0, 0, False
        while index < len(records):
            record = records[index]
            if record.end > start_s:
                records.insert(index + 1, _Record(start_s, record.end, record.avail))
                record.end = start_s
                placed = True
                break
            if record.end == start_s:
                placed = True
                break
            one_before = index
            index += 1
        one_after = -1
        while placed and index + 1 < len(records):
            index += 1
            record = records[index]
            if end_s < record.end:
                records.insert(index + 1, _Record(end_s, record.end, record.avail))
                record.end = end_s
            record.avail &= ~nodes
            if end_s == record.end:
                one_after = index + 1 if index + 1 < len(records) else -1
                break
        index = one_before
        while index != one_after and index + 1 < len(records):
            if records[index].avail == records[index + 1].avail:
                records[index].end = records[index + 1].end
                del records[index + 1]
                break
            index += 1


@dataclass(frozen=True)
class Planned:
    """A pending job's planned start, as ``_dump_job_sched`` logs it: the start (not rounded), the
    reservation's end (rounded down) and its nodes; ``reserved`` is False beyond ``bf_window``."""

    job_id: int
    start_s: int
    end_s: int
    nodes: tuple[int, ...]
    reserved: bool


def _mask(nodes: Iterable[int]) -> int:
    mask = 0
    for node in nodes:
        mask |= 1 << node
    return mask


class WillRun:
    """cons_tres's will-run test against the running jobs, each ending at its Slurm end time."""

    def __init__(self, nodes: Nodes, running: Sequence[tuple[int, Job]]) -> None:
        self.nodes = nodes
        self.running = sorted(running, key=lambda item: item[0])
        self._masks = [_mask(job.nodes) for _, job in self.running]
        self.usable = _mask(n for n, ok in enumerate(nodes.accepting) if ok)
        # the answer depends only on the request and the usable nodes while nothing starts or ends
        self._answers: dict[tuple[int, int, int, int, int], tuple[int, tuple[int, ...]] | None] = {}

    def _pick(self, fit: int, job: Job, switches: int, free: Sequence[int]) -> tuple[int, ...] | None:
        if fit.bit_count() < job.num_nodes:
            return None
        return pick_nodes(self.nodes, fit, job.num_nodes, switches, free)

    def test(self, job: Job, avail: int, now_s: int, switches: int) -> tuple[int, tuple[int, ...]] | None:
        """(start, nodes) for ``job`` on the nodes of ``avail``, or None if it never fits there."""
        key = (job.num_nodes, job.gpus_per_node, avail, switches, now_s)
        if key not in self._answers:
            self._answers[key] = self._test(job, avail, now_s, switches)
        return self._answers[key]

    def _test(self, job: Job, avail: int, now_s: int, switches: int) -> tuple[int, tuple[int, ...]] | None:
        gpus = job.gpus_per_node
        free = list(self.nodes.free)
        usable = avail & self.usable
        fit = eligible_mask(self.nodes, gpus) & usable  # usable nodes with room for the job
        picked = self._pick(fit, job, switches, free)
        if picked is not None:
            return now_s, picked
        running, masks = self.running, self._masks
        count = len(running)
        position, anchor, window = 0, 0, WILL_RUN_WINDOW_S
        more = True
        while more:
            last: int | None = None
            upcoming: int | None = None
            released = 0
            tested = True
            while True:
                if position >= count:
                    more = False
                    break
                end, other = running[position]
                position += 1
                if not avail & masks[position - 1]:
                    continue  # runs on none of the usable nodes
                if not anchor:
                    anchor = end + (WILL_RUN_WINDOW_S - end % WILL_RUN_WINDOW_S)
                last = end
                for node in other.nodes:
                    free[node] += other.gpus_per_node
                    if free[node] >= gpus and usable >> node & 1:
                        fit |= 1 << node
                if position >= count:
                    more = False
                    break
                upcoming = running[position][0]
                if upcoming > anchor + window:
                    break
                if released > WILL_RUN_GROUP_MAX:
                    tested = False
                    break
                released += 1
            if last is None:
                return None
            if not tested:
                continue
            window *= 2
            while upcoming is not None and upcoming > anchor + window:
                window *= 2
            picked = self._pick(fit, job, switches, free)
            if picked is not None:
                return last, picked
        return None


def backfill_cycle(
    queue: Sequence[Job],
    nodes: Nodes,
    running: Sequence[tuple[int, Job]],
    *,
    now_s: int,
    clock: Callable[[Job, int], int],
    resolution_s: int,
    window_s: int,
    max_job_test: int,
    max_time_s: int,
    completing: int,
    switches: Callable[[Job], int],
    start: Callable[[Job, tuple[int, ...], int], None],
) -> list[Planned]:
    """Run one cycle over ``queue`` (priority order); ``start(job, nodes, at_s)`` starts a job now.

    ``running``: (Slurm end time, job) of every running job. ``completing``: nodes whose last job has
    ended but which slurmctld has not yet seen released (COMPLETING): a job that would start now on
    one of them is planned a second later instead. ``clock(job, attempt)``: the whole second
    at which the cycle looks at ``job`` (``attempt`` 0, then once per retry); the cycle stops when
    that reaches ``now_s + max_time_s`` (``bf_max_time``, compared in whole seconds as Slurm does).
    A simulated cycle takes no time, but a real one may cross a second. Returns the planned starts
    of the jobs left waiting.
    """
    will_run = WillRun(nodes, running)
    usable = will_run.usable
    space = NodeSpace(now_s, resolution_s, window_s, usable)
    planned: list[Planned] = []
    tried = 0
    for job in queue:
        if max_job_test and tried >= max_job_test:
            break
        limit = math.ceil(job.limit_s)
        start_res = clock(job, 0)
        counted = False
        for attempt in itertools.count():
            now = clock(job, attempt)
            if now - now_s >= max_time_s:
                return planned  # bf_max_time: the cycle ends here
            end = start_res + limit
            avail, later = space.scan(usable, start_res, end)
            found = None
            if avail.bit_count() >= job.num_nodes:
                if not counted:
                    tried += 1
                    counted = True
                found = will_run.test(job, avail, now, switches(job))
            if found is None:
                if not later:
                    break  # cannot run (or not before bf_window): no reservation
                start_res = later
                continue
            planned_s, picked = found
            planned_s = max(planned_s, start_res)
            if planned_s <= now and completing & _mask(picked):
                planned_s, later = now + 1, 0
            if planned_s <= now:
                start(job, picked, now)
                will_run = WillRun(nodes, [*will_run.running, (now + limit, job)])
                break
            if later and planned_s > later:
                start_res = later
                continue
            first = planned_s // resolution_s * resolution_s
            last = (planned_s + limit) // resolution_s * resolution_s
            if planned_s > now_s + window_s:
                planned.append(Planned(job.job_id, planned_s, last, picked, False))
                break
            if space.overlaps(_mask(picked), first, last):
                assert planned_s > start_res, "backfill retry without progress"
                start_res = planned_s
                continue
            planned.append(Planned(job.job_id, planned_s, last, picked, True))
            space.reserve(first, last, _mask(picked))
            break
    return planned
