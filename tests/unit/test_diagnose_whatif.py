"""The what-if replay (diagnose.whatif) on 1F1B schedules built here, one cause at a time, and on the
StragglerAnalysis ST job (tests/golden/diagnose.toml holds its published figures)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from diagnose_support import load_cases

from mfukit.diagnose.engine import diagnose
from mfukit.diagnose.given import job
from mfukit.diagnose.records import StepChain, TimelineOps
from mfukit.diagnose.sources import kineto, pipeline_timeline
from mfukit.diagnose.whatif import analyse, chain_analyse

CASES = GEN = load_cases()

ST = Path(__file__).parents[1] / "data" / "diagnose" / "straggler" / "timeline-ST.json.gz"


def schedule(pp: int, microbatches: int) -> dict[int, list[tuple[str, int]]]:
    """Megatron's 1F1B order per stage: pp - s - 1 warm-up forwards, then one forward one backward, then
    the remaining backwards."""
    order = {}
    for stage in range(pp):
        warm = min(pp - stage - 1, microbatches)
        ops = [("forward-compute", i) for i in range(warm)]
        for i in range(microbatches - warm):
            ops += [("forward-compute", warm + i), ("backward-compute", i)]
        ops += [("backward-compute", i) for i in range(microbatches - warm, microbatches)]
        order[stage] = ops
    return order


def timeline(
    dp: int,
    pp: int,
    microbatches: int,
    steps: int,
    compute_s: callable[[int, int, int, int, str], float],  # type: ignore[valid-type]
) -> TimelineOps:
    rows = []
    for step in range(steps):
        for d in range(dp):
            for stage, ops in schedule(pp, microbatches).items():
                clock = 0.0
                rows.append((step, d, stage, "params-all-gather", 0, clock, 0.01))
                clock += 0.01
                for optype, mb in ops:
                    duration = compute_s(step, d, stage, mb, optype)  # type: ignore[misc]
                    rows.append((step, d, stage, optype, mb, clock, duration))
                    clock += duration
                    if optype == "forward-compute" and stage > 0:
                        rows.append((step, d, stage, "forward-recv", mb, clock, 0.001))
                    if optype == "backward-compute" and stage < pp - 1:
                        rows.append((step, d, stage, "backward-recv", mb, clock, 0.001))
                for optype, duration in (("gc", 0.0), ("layernorm-grads-all-reduce", 0.001),
                                         ("grads-reduce-scatter", 0.02), ("optimizer-clip-main-grad", 0.002),
                                         ("optimizer", 0.03)):  # fmt: skip
                    rows.append((step, d, stage, optype, 0, clock, duration))
                    clock += duration
    return TimelineOps(*(tuple(column) for column in zip(*rows, strict=True)))  # type: ignore[arg-type]


def test_one_slow_data_parallel_rank_is_named() -> None:
    """DP rank 2 computes at half speed on every stage: the job runs at about half its ideal speed."""
    found = analyse(
        timeline(
            4, 2, 8, 3, lambda step, d, s, mb, op: (0.1 if op[0] == "f" else 0.2) * (2.0 if d == 2 else 1.0)
        )
    )
    assert found.slowdown > 1.5
    assert max(found.by_dp_rank, key=lambda d: found.by_dp_rank[d]) == 2
    assert found.by_dp_rank[2] == pytest.approx(found.slowdown, rel=0.02)  # rank 2 alone explains it
    assert found.cause == "slow worker" and found.dp_persistence == 1.0
    assert found.named == "DP rank 2 (every stage of it)"


def test_a_slow_gpu_is_a_slow_worker() -> None:
    """One GPU (DP rank 1, stage 0) at 60 % speed: a slow worker, named by rank and stage."""
    found = analyse(
        timeline(
            4,
            2,
            8,
            3,
            lambda step, d, s, mb, op: (0.1 if op[0] == "f" else 0.2) / (0.6 if (d, s) == (1, 0) else 1.0),
        )
    )
    assert found.cause == "slow worker" and found.worst_worker == (1, 0)
    assert found.worker_metric > 0.9 and found.named == "DP rank 1, stage 0"


def test_uneven_sequence_lengths_across_data_parallel_ranks() -> None:
    """Each step a different DP rank draws the long sequences (compute grows with them): no rank or stage
    is to blame on its own; the DP ranks take turns."""
    rng = np.random.default_rng(3)
    lengths = rng.uniform(0.5, 1.5, size=(6, 4, 8))  # step, dp rank, micro-batch

    def compute(step: int, d: int, s: int, mb: int, op: str) -> float:
        return float((0.1 if op[0] == "f" else 0.2) * lengths[step, d, mb])

    found = analyse(timeline(4, 2, 8, 6, compute))
    assert found.slowdown > 1.1
    assert found.cause == "sequence-length imbalance"
    assert found.worker_metric < 0.5 and found.stage_metric < 0.5 and found.dp_persistence < 0.8


def test_a_balanced_job_has_no_straggler() -> None:
    found = analyse(timeline(2, 4, 8, 3, lambda step, d, s, mb, op: 0.1 if op[0] == "f" else 0.2))
    assert found.slowdown == pytest.approx(1.0, abs=1e-9) and found.cause == "none"


def test_the_st_job_names_its_last_stage_quickly() -> None:
    ops = pipeline_timeline.parse(ST)[0].ops
    assert ops is not None
    start = time.perf_counter()
    found = analyse(ops)
    assert time.perf_counter() - start < 5.0  # 30 steps x 8 ranks x 26 ops, a dozen replays
    assert found.replay_error < 0.03  # the graph replays the traced step times
    assert found.cause == "stage partitioning" and found.named.startswith("the last pipeline stage")
    result = diagnose([ST])
    finding = next(f for f in result.findings if f.id == "stage_imbalance")
    assert finding.details["method"] == "what-if replay" and finding.details["slowest_stage"] == 3
    assert finding.impact.step_fraction == pytest.approx(1 - 1 / found.slowdown, rel=1e-6)


def kineto_job(directory: Path, slow: callable[[int, int], float]) -> dict[int, list[StepChain]]:  # type: ignore[valid-type]
    """16 data-parallel ranks, 4 profiled steps; ``slow(rank, step)`` is the extra compute a rank does in a
    step, and every other rank waits that long in its last all-reduce (as NCCL makes them)."""
    ranks, steps = 16, 4
    for rank in range(ranks):
        plans = []
        for step in range(steps):
            extra = slow(rank, step)  # type: ignore[misc]
            longest = max(slow(r, step) for r in range(ranks))  # type: ignore[misc]
            plans.append(
                GEN.RankPlan(0.005, 0.9 + extra, 0.2, comm_wait_s=longest - extra, extra={"t0_s": 1.0})
            )
        GEN.write_rank_trace(directory / f"rank{rank}.json.gz", rank, ranks, plans, 4.0)
    traces = [t for path in sorted(directory.glob("*.json.gz")) for t in kineto.parse(path)]
    return {t.rank: t.chains for t in traces if t.rank is not None}


def test_kineto_ranks_one_straggler(tmp_path: Path) -> None:
    """Rank 5 computes 0.9 s more every step: the job runs at about half its ideal speed, and rank 5 is named."""
    found = chain_analyse(kineto_job(tmp_path, lambda rank, step: 0.9 if rank == 5 else 0.0))
    assert found is not None and found.straggler == 5 and found.cause == "slow worker"
    assert found.slowdown == pytest.approx(1.7, abs=0.15) and found.persistence == 1.0


def test_kineto_ranks_take_turns(tmp_path: Path) -> None:
    """A different rank draws the long sequences each step: uneven load, no single straggler."""
    found = chain_analyse(
        kineto_job(tmp_path, lambda rank, step: 0.6 if rank == (3 * step + 1) % 16 else 0.0)
    )
    assert found is not None and found.cause == "sequence-length imbalance" and found.persistence < 0.5
    assert found.slowdown > 1.3


@pytest.mark.slow
def test_the_synthetic_straggler_case_is_replayed(tmp_path: Path) -> None:
    """The generated 128-rank straggler case: the what-if replay backs the straggler finding with its slowdown."""
    directory = CASES.write_case(tmp_path, "straggler")
    result = diagnose([directory], **job(tmp_path / "straggler.toml", {})._asdict())
    straggler = next(f for f in result.findings if f.id == "straggler_rank")
    what_if = straggler.details["what_if"]
    assert isinstance(what_if, dict) and what_if["straggler"] == CASES.STRAGGLER_RANK
    assert what_if["slowdown"] == pytest.approx(CASES.HEALTHY_MFU / CASES.TARGET_MFU, rel=0.1)


@pytest.mark.parametrize(
    ("trial", "cause", "named"),
    [
        ("SE", "sequence-length imbalance", "the DP ranks in turn"),
        ("AR", "slow worker", "DP rank 0, stage 0"),
    ],
)
def test_the_published_jobs_are_classified(trial: str, cause: str, named: str) -> None:
    """The 128-GPU SE job is slowed by uneven sequence lengths (no stage's mean, no worker, no replica
    explains it), the 64-GPU AR job by one worker; fast enough for a diagnosis."""
    ops = pipeline_timeline.parse(ST.with_name(f"timeline-{trial}-6steps.json.gz"))[0].ops
    assert ops is not None
    start = time.perf_counter()
    found = analyse(ops)
    assert time.perf_counter() - start < 10.0
    assert found.cause == cause and found.named.startswith(named)
    assert found.replay_error < 0.03
