"""Policies on hand-checked scenarios: every expected start time is worked out in the comments."""

from __future__ import annotations

import pytest

from mfukit.sched.engine import ClusterSpec, Drain, Partition, Qos, simulate
from mfukit.sched.job import COMPLETED, NODE_FAIL, TIMEOUT, Job
from mfukit.sched.policies import POLICIES
from mfukit.sched.policies.base import PriorityWeights
from mfukit.sched.policies.fifo import StrictPriority
from mfukit.sched.policies.slurm import SlurmPolicy


def job(
    job_id: int, submit: float, run: float, nodes: int = 1, *, limit: float | None = None, **kw: object
) -> Job:
    return Job(job_id, submit, run, limit if limit is not None else run, nodes, 8, **kw)  # type: ignore[arg-type]


def starts(jobs: list[Job]) -> dict[int, float | None]:
    return {j.job_id: j.start_s for j in jobs}


def head_of_line() -> list[Job]:
    # 2 nodes. A holds one node until 100; B needs both; C (1 node, 10 s) could use the free node.
    return [job(1, 0, 100), job(2, 1, 50, 2), job(3, 2, 10)]


def test_fifo_blocks_behind_the_head() -> None:
    result = simulate(head_of_line(), ClusterSpec(2, 8), POLICIES["fifo"]())
    assert starts(result.jobs) == {1: 0, 2: 100, 3: 150}


@pytest.mark.parametrize("name", ["easy", "conservative"])
def test_backfill_starts_a_short_job_that_ends_before_the_reservation(name: str) -> None:
    result = simulate(head_of_line(), ClusterSpec(2, 8), POLICIES[name]())
    assert starts(result.jobs) == {1: 0, 2: 100, 3: 2}
    assert [j.backfilled for j in result.jobs] == [False, False, True]


def easy_versus_conservative() -> list[Job]:
    # 3 nodes. R: 2 nodes until 100. B: 2 nodes (head; shadow 100; one spare node then).
    # C: 3 nodes. D: 1 node for 500 s.
    return [job(1, 0, 100, 2), job(2, 1, 100, 2), job(3, 2, 100, 3), job(4, 3, 500, 1)]


def test_easy_protects_only_the_head() -> None:
    # EASY lets D take the spare node (it does not delay B), which delays C until D ends at 503.
    result = simulate(easy_versus_conservative(), ClusterSpec(3, 8), POLICIES["easy"]())
    assert starts(result.jobs) == {1: 0, 2: 100, 3: 503, 4: 3}


def test_conservative_protects_every_reservation() -> None:
    # B reserved [100, 200), C [200, 300) on all nodes: D may not start before C ends.
    result = simulate(easy_versus_conservative(), ClusterSpec(3, 8), POLICIES["conservative"]())
    assert starts(result.jobs) == {1: 0, 2: 100, 3: 200, 4: 300}


def test_sub_node_requests_pack_onto_busy_nodes() -> None:
    # one 8-GPU node and one half-used node: a 4-GPU job takes the half-used node (best fit),
    # so the 8-GPU job that follows still finds a whole node.
    jobs = [Job(1, 0, 100, 100, 1, 4), Job(2, 1, 100, 100, 1, 4), Job(3, 2, 100, 100, 1, 8)]
    result = simulate(jobs, ClusterSpec(2, 8), POLICIES["easy"]())
    assert starts(result.jobs) == {1: 0, 2: 1, 3: 2}
    assert result.jobs[0].nodes == result.jobs[1].nodes


def test_time_limit_kills_as_timeout() -> None:
    result = simulate([job(1, 0, 500, limit=60), job(2, 0, 10)], ClusterSpec(1, 8), POLICIES["fifo"]())
    first, second = result.jobs
    assert (first.state, first.end_s, second.start_s) == (TIMEOUT, 60, 60)
    assert second.state == COMPLETED


def test_priority_order_and_nice() -> None:
    # one node: after job 1, the prio-partition job (factor 10) goes first, then the un-niced job.
    spec = ClusterSpec(1, 8, partitions=(Partition("batch", 1), Partition("prio", 10)))
    jobs = [job(1, 0, 10), job(2, 1, 10, nice=50), job(3, 2, 10), job(4, 3, 10, partition="prio")]
    weights = PriorityWeights(partition=1000)
    result = simulate(jobs, spec, StrictPriority(weights))
    assert starts(result.jobs) == {1: 0, 4: 10, 3: 20, 2: 30}


class TestSlurm:
    """Slurm's defaults: main pass every 60 s on the whole minute and 1 s after a submission or an end
    (3 s after the last pass at the earliest); backfill 30 s after its last cycle, then every second
    once something changed. Worked out by hand in the comments."""

    def test_a_blocked_job_stops_the_main_pass_for_every_partition(self) -> None:
        # 2 nodes. t=0: job 1 starts (the main pass on the minute). t=3: the pass for job 2's
        # submission: job 2 (p1, 2 nodes) is blocked, so job 3 in p2 may not take the free node.
        # t=30, backfill: job 1 ends by its limit at 100, so job 2 is planned [100, 200) on both
        # nodes, and job 3 (limit 50) fits now and ends before: it starts at 30. Job 1's end at 100
        # queues a main pass at 101, which starts job 2.
        spec = ClusterSpec(2, 8, partitions=(Partition("p1"), Partition("p2")))
        jobs = [
            job(1, 0, 100, partition="p1"),
            job(2, 1, 100, 2, partition="p1"),
            job(3, 2, 50, partition="p2"),
        ]
        result = simulate(jobs, spec, SlurmPolicy(bf_resolution_s=1))
        assert starts(result.jobs) == {1: 0, 2: 101, 3: 30}
        assert result.jobs[2].backfilled
        # with the default bf_resolution=60 job 2's reservation is rounded down to [60, 180): job 3's
        # [30, 80] overlaps it, and job 3 is planned after it. Nothing changes until job 1 ends at
        # 100, when the backfill thread (checking every second since 60) starts job 2; job 3 follows
        # when job 2 ends at 200.
        result = simulate(jobs, spec, SlurmPolicy())
        assert starts(result.jobs) == {1: 0, 2: 100, 3: 200}

    def test_completions_start_work_at_the_next_controller_pass(self) -> None:
        # job 1 ends at 10.5; its end queues a main pass at the background loop's next wake, 11
        result = simulate([job(1, 0, 10.5), job(2, 1, 5, 1)], ClusterSpec(1, 8), SlurmPolicy())
        assert starts(result.jobs) == {1: 0, 2: 11}

    def test_the_main_pass_waits_for_batch_sched_delay(self) -> None:
        # sched_interval 60: the pass at 0 starts job 1; job 2's submission at 1 asks for a pass,
        # which waits until 3 s after the last one (t=3); job 3's at 5 gets one at 6.
        jobs = [job(1, 0, 100, 1), job(2, 1, 100, 1), job(3, 5, 100, 1)]
        result = simulate(jobs, ClusterSpec(3, 8), SlurmPolicy(bf_interval_s=1000))
        assert starts(result.jobs) == {1: 0, 2: 3, 3: 6}

    def test_bf_window_leaves_far_jobs_without_reservation(self) -> None:
        # 2 nodes. job 1 holds a node for 10,000 s (limit). job 2 needs both: its reservation would
        # start at 10,000 s, beyond a 1,000 s bf_window, so none is made and job 3 (1 node, limit
        # 20,000 s) backfills at the cycle at 30; with the default 1-day window it may not, and
        # follows job 2 (10,000-10,100: the backfill thread sees job 1's end at once).
        jobs = lambda: [job(1, 0, 10_000), job(2, 1, 100, 2), job(3, 2, 20_000)]  # noqa: E731
        narrow = simulate(jobs(), ClusterSpec(2, 8), SlurmPolicy(bf_interval_s=30, bf_window_s=1000))
        assert starts(narrow.jobs)[3] == 30
        wide = simulate(jobs(), ClusterSpec(2, 8), SlurmPolicy(bf_interval_s=30))
        assert starts(wide.jobs) == {1: 0, 2: 10_000, 3: 10_100}

    def test_bf_max_job_test_limits_the_cycle(self) -> None:
        # 3 nodes; job 2 (all nodes) is blocked behind job 1; jobs 3 and 4 fit on the 2 free nodes.
        # A cycle that tests only 2 jobs reaches job 3 at t=30 and job 4 only at the next one (60).
        jobs = [job(1, 0, 1000), job(2, 1, 100, 3), job(3, 2, 50), job(4, 3, 50)]
        few = simulate(jobs, ClusterSpec(3, 8), SlurmPolicy(bf_max_job_test=2))
        assert (starts(few.jobs)[3], starts(few.jobs)[4]) == (30, 60)
        many = simulate(jobs, ClusterSpec(3, 8), SlurmPolicy())
        assert (starts(many.jobs)[3], starts(many.jobs)[4]) == (30, 30)


def test_qos_preemption_requeues_the_victim() -> None:
    spec = ClusterSpec(2, 8, qos=(Qos("normal", 0), Qos("high", 100, ("normal",))), requeue_delay_s=5)
    jobs = [job(1, 0, 1000, 2), job(2, 10, 100, 1, qos="high")]
    result = simulate(jobs, spec, StrictPriority(PriorityWeights(qos=1000)))
    victim, winner = result.jobs
    assert winner.start_s == 10
    assert victim.restarts == 1 and victim.first_start_s == 0
    assert victim.start_s == 110 and victim.end_s == 1110  # eligible at 15, fits once job 2 ends
    assert result.lost_gpu_s == 10 * 16 and result.preemptions == 1


def test_node_failures_follow_the_rate_and_requeue_jobs() -> None:
    # 200 nodes at 50 failures per 1,000 node-days for ~100 days -> about 1,000 failures
    jobs = [job(i, i * 3600.0, 3000.0, 4) for i in range(2400)]
    spec = ClusterSpec(200, 8, failure_rate_per_1000_node_days=50.0, repair_s=3600.0)
    result = simulate(jobs, spec, POLICIES["easy"](), seed=3)
    days = (max(j.end_s or 0 for j in result.jobs) - 0) / 86400
    expected = 50.0 / 1000 * 200 * days
    assert abs(result.node_failures - expected) < 4 * expected**0.5  # Poisson: within 4 sigma
    assert all(j.state == COMPLETED for j in result.jobs)
    hit = [j for j in result.jobs if j.restarts]
    assert hit and result.lost_gpu_s > 0
    assert result.down_node_s == pytest.approx(result.node_failures * 3600.0, rel=0.05)
    no_requeue = simulate(
        jobs, ClusterSpec(200, 8, 0, 50.0, 3600.0, requeue_on_node_fail=False), POLICIES["easy"](), seed=3
    )
    assert any(j.state == NODE_FAIL for j in no_requeue.jobs)


def test_drained_nodes_take_no_new_work() -> None:
    # 2 nodes; node 1 drained from 5 s for 100 s: job 2 (arriving at 10) must wait for node 0
    spec = ClusterSpec(2, 8, drains=(Drain((1,), 5.0, 100.0),))
    result = simulate([job(1, 0, 50), job(2, 10, 10)], spec, POLICIES["fifo"]())
    assert starts(result.jobs) == {1: 0, 2: 50}


def test_jobs_larger_than_the_cluster_are_rejected() -> None:
    result = simulate([job(1, 0, 10, 4), job(2, 0, 10)], ClusterSpec(2, 8), POLICIES["easy"]())
    assert [j.job_id for j in result.rejected] == [1] and result.jobs[0].state == COMPLETED
