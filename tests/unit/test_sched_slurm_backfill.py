"""Slurm's backfill pieces on hand-checked cases (times in whole seconds; the 30 s will-run windows
and bf_resolution are phased on absolute time, as Slurm's epoch seconds are)."""

from __future__ import annotations

from mfukit.sched.job import Job
from mfukit.sched.nodes import Nodes
from mfukit.sched.policies.slurm_backfill import NodeSpace, WillRun, backfill_cycle

ALL = 0b1111_1111


def running(nodes: Nodes, job_id: int, node_ids: tuple[int, ...], end_s: int) -> tuple[int, Job]:
    job = Job(job_id, 0, 1000, 1000, len(node_ids), 8)
    job.nodes = node_ids
    nodes.take_nodes(node_ids, 8)
    return end_s, job


def first_cycle() -> tuple[Nodes, list[tuple[int, Job]]]:
    """The dev Slurm's state at its first backfill cycle of a replay (now = 54 s): six jobs started at
    54 with limits of 1-3 min, ending at 114 (nodes 1-2, 4-5, 6), 174 (nodes 0 and 3) and 234 (7)."""
    nodes = Nodes(8, 8, 8)
    jobs = [
        running(nodes, 4, (0,), 174),
        running(nodes, 14, (1, 2), 114),
        running(nodes, 22, (3,), 174),
        running(nodes, 23, (4, 5), 114),
        running(nodes, 26, (6,), 114),
        running(nodes, 27, (7,), 234),
    ]
    return nodes, jobs


def test_will_run_releases_running_jobs_in_30_s_groups() -> None:
    nodes, jobs = first_cycle()
    will_run = WillRun(nodes, jobs)
    # the first end, 114, rounds up to the window 120; the group takes every end up to 150 (the
    # three ending at 114); nodes 1-2, 4-6 are then free, and a 1-node job takes the tightest run
    # [1-2] (as Slurm logged: "to start at 19:14:54 ... on nodes gpu02")
    assert will_run.test(Job(21, 0, 5, 120, 1, 8), ALL, 54, 0) == (114, (1,))
    # a 4-node job without node 1 (reserved): no run holds 4, the largest [4-6] first, then [2]
    assert will_run.test(Job(2, 0, 2, 120, 4, 8), ALL & ~0b10, 54, 0) == (114, (2, 4, 5, 6))
    # only nodes 0, 3 and 7 usable: the jobs on other nodes are skipped; 174 rounds to 180, the group
    # reaches 210 and holds both jobs ending at 174 ("to start at 19:15:54 ... on nodes gpu01")
    assert will_run.test(Job(5, 0, 6, 60, 1, 8), 0b1000_1001, 54, 0) == (174, (0,))


def test_will_run_plans_at_the_last_end_of_a_group() -> None:
    # node 0 frees at 100 and node 1 at 125: a 1-node job would fit at 100, but both ends fall in the
    # first group (100 rounds to 120, the group reaches 150), so Slurm plans it at 125, on the
    # tightest node (0). Planning at the first end would reserve 25 s earlier than Slurm does.
    nodes = Nodes(2, 8, 2)
    jobs = [running(nodes, 1, (0,), 100), running(nodes, 2, (1,), 125)]
    assert WillRun(nodes, jobs).test(Job(3, 0, 10, 60, 1, 8), 0b11, 50, 0) == (125, (0,))
    # an end beyond the first group (155 > 150) waits for the next one: the window doubles to 60
    nodes = Nodes(2, 8, 2)
    jobs = [running(nodes, 1, (0,), 100), running(nodes, 2, (1,), 155)]
    assert WillRun(nodes, jobs).test(Job(3, 0, 10, 60, 2, 8), 0b11, 50, 0) == (155, (0, 1))


def test_node_space_reservations_round_down_and_split_records() -> None:
    space = NodeSpace(54, 60, 86_400, ALL)
    assert [(r.begin, r.end) for r in space.records] == [(0, 86_400)]
    space.reserve(60, 180, 0b10)  # job 21 on node 1, planned 114 with a 2 min limit: [60, 180)
    assert [(r.begin, r.end, r.avail) for r in space.records] == [
        (0, 60, ALL),
        (60, 180, ALL & ~0b10),
        (180, 86_400, ALL),
    ]
    # a job over [54, 174] sees node 1 reserved; the map frees it again at 180 (later_start)
    assert space.scan(ALL, 54, 174) == (ALL & ~0b10, 180)
    # a record that begins exactly at the window's end counts ("begin_time <= end_time")
    assert space.scan(ALL, 0, 60) == (ALL & ~0b10, 180)
    assert space.scan(ALL, 180, 240) == (ALL, 0)
    assert space.overlaps(0b10, 120, 180) and not space.overlaps(0b01, 0, 86_400)


def test_a_cycle_backfills_only_what_ends_before_the_reservations() -> None:
    # 2 nodes; node 0 runs until 600. Job 2 needs both: planned at 600 ([600, 720) reserved).
    # Job 3 (limit 120) would end at 240 < 600: it starts now on node 1. Job 4 (limit 600) would
    # overlap the reservation (a record that begins at its window's end counts), so it retries from
    # the reservation's end, 720, on node 1 (free from job 3's end at 240).
    nodes = Nodes(2, 8, 2)
    jobs = [running(nodes, 1, (0,), 600)]
    started: list[tuple[int, tuple[int, ...], int]] = []

    def start(job: Job, picked: tuple[int, ...], at_s: int) -> None:
        nodes.take_nodes(picked, job.gpus_per_node)
        job.nodes = picked
        started.append((job.job_id, picked, at_s))

    queue = [Job(2, 0, 100, 120, 2, 8), Job(3, 0, 100, 120, 1, 8), Job(4, 0, 100, 600, 1, 8)]
    planned = backfill_cycle(
        queue,
        nodes,
        jobs,
        now_s=120,
        clock=lambda job, attempt: 120,
        resolution_s=60,
        window_s=86_400,
        max_job_test=500,
        max_time_s=30,
        completing=0,
        switches=lambda job: 0,
        start=start,
    )
    assert started == [(3, (1,), 120)]
    assert [(p.job_id, p.start_s, p.end_s, p.nodes) for p in planned] == [
        (2, 600, 720, (0, 1)),
        (4, 720, 1320, (1,)),
    ]


def test_a_job_on_completing_nodes_is_planned_a_second_later() -> None:
    nodes = Nodes(2, 8, 2)
    planned = backfill_cycle(
        [Job(1, 0, 10, 60, 1, 8)],
        nodes,
        [],
        now_s=30,
        clock=lambda job, attempt: 30,
        resolution_s=60,
        window_s=86_400,
        max_job_test=500,
        max_time_s=30,
        completing=0b11,
        switches=lambda job: 0,
        start=lambda job, picked, at: None,
    )
    assert [(p.job_id, p.start_s, p.end_s) for p in planned] == [(1, 31, 60)]
