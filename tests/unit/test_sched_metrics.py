"""Metric definitions on hand-computed cases."""

from __future__ import annotations

import pytest

from mfukit.sched.job import COMPLETED, FAILED, Job
from mfukit.sched.metrics import Timeline, idle_gaps_s, measure, queue_idle_gpu_s


def done(
    job_id: int,
    submit: float,
    start: float,
    end: float,
    gpus: int,
    nodes: tuple[str, ...],
    state: str = COMPLETED,
) -> Job:
    job = Job(job_id, submit, end - start, end - start, len(nodes), gpus // len(nodes))
    job.start_s = job.first_start_s = start
    job.end_s = end
    job.state = state
    job.node_names = nodes
    return job


def test_utilization_waits_gaps_and_slowdown() -> None:
    # two 8-GPU nodes over [0, 100]: a 16-GPU job 0-50 (waited 0), an 8-GPU job 60-100 on n1
    # (waited 30), a 4-GPU job 50-55 on n2 that failed (waited 5 s: bounded slowdown uses 10 s)
    jobs = [
        done(1, 0, 0, 50, 16, ("n1", "n2")),
        done(2, 30, 60, 100, 8, ("n1",)),
        done(3, 45, 50, 55, 4, ("n2",), FAILED),
    ]
    timeline = Timeline.from_attempts(jobs, now_s=100)
    metrics = measure(jobs, jobs, timeline, capacity_gpus=16, window_s=(0.0, 100.0))
    assert metrics.utilization == pytest.approx((16 * 50 + 8 * 40 + 4 * 5) / (16 * 100))
    assert metrics.wait_s["mean"] == pytest.approx(35 / 3)
    assert metrics.wait_s["p50"] == pytest.approx(5)
    # slowdowns: 1, (30 + 40) / 40, max(1, (5 + 5) / 10)
    assert metrics.bounded_slowdown_mean == pytest.approx((1 + 70 / 40 + 1) / 3)
    # gaps: n1 ends 50 -> next start 60 (10 s); n2 ends 50 -> 50 (0 s); n2 ends 55 -> none after
    assert sorted(idle_gaps_s(jobs)) == [0.0, 10.0]
    assert metrics.gpu_hours_lost_to_failures == pytest.approx(4 * 5 / 3600)
    assert metrics.counts["completed"] == 2 and metrics.counts["failed"] == 1
    assert not metrics.gate_pass  # 71 % utilization is below the 85 % gate


def test_timeline_integrates_inside_a_window() -> None:
    timeline = Timeline.from_steps([0, 10, 20], [4, 8, 0])
    assert timeline.gpu_seconds(0, 20) == 4 * 10 + 8 * 10
    assert timeline.gpu_seconds(5, 15) == 4 * 5 + 8 * 5
    assert timeline.gpu_seconds(20, 30) == 0
    times, values = timeline.sampled(0, 20, points=2)
    assert times == [0.0, 10.0] and values == [4.0, 8.0]


def test_fragmentation_counts_free_gpus_no_waiting_job_fits() -> None:
    # one 8-GPU node; A holds 6 GPUs over [0, 10). B waits [2, 10) for 4 GPUs on a node: the 2 free
    # GPUs are stranded, except over [4, 6) while C, asking 1 GPU, waits too. Free while jobs wait:
    # 2 GPUs over [2, 10); a node no job used adds its 8 GPUs over the same 8 s, never stranded.
    a = Job(1, 0.0, 10.0, 10.0, 1, 6)
    a.start_s, a.end_s, a.node_names = 0.0, 10.0, ("n1",)
    waits = [(2.0, 10.0, 4), (4.0, 6.0, 1)]
    assert queue_idle_gpu_s([a], waits, {"n1": 8}, (0.0, 10.0)) == (2 * 6.0, 2 * 8.0)
    assert queue_idle_gpu_s([a], waits, {"n1": 8}, (0.0, 10.0), unseen_free_gpus=8) == (12.0, 16.0 + 64.0)
    assert queue_idle_gpu_s([a], waits, {"n1": 8}, (3.0, 5.0)) == (2 * 1.0, 2 * 2.0)  # clipped to the window
