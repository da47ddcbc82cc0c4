"""One followed log's running state: the steps in the trailing window and what they add up to.

MFU is ``diagnose.mfu.measure`` over the window's steps (the function ``mfukit diagnose`` runs on the
whole log): global batch tokens over the wall-clock time per step, or the log's tokens/s, times the model
FLOPs per token over the dense peak. HFU counts the recompute too (``perf.utilization``). The expected MFU
is ``diagnose.mfu.expected_mfu``, the performance model (``perf.estimate``) for the job's layout.

Goodput so far is productive step time over wall time since the first logged step: the logged step times
of steps that made progress (a step run again after a restart is rework), over the span of the log's own
timestamps. A value with no evidence behind it (no model, no timestamps, no save seen) stays None and is
not exported.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from mfukit.diagnose.mfu import Expected, measure
from mfukit.diagnose.records import LogEvent, StepRecord, TrainingLog
from mfukit.perf.activations import layout_recompute
from mfukit.perf.utilization import measure as utilization
from mfukit.watch.config import JobSpec
from mfukit.watch.kinds import Parsed

STEP_TIME_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0)
"""Step times of LLM training jobs run from tens of ms (small models, many GPUs) to minutes."""
EXPECTED_BASES = ("performance_model", "best_fitting_layout")
MAX_WINDOW = 2000
"""Logged steps kept in the window at most, whatever its length (a job logging every 50 ms step)."""


@dataclass
class Histogram:
    buckets_s: tuple[float, ...] = STEP_TIME_BUCKETS_S
    counts: list[int] = field(default_factory=lambda: [0] * (len(STEP_TIME_BUCKETS_S) + 1))
    sum_s: float = 0.0
    count: int = 0

    def observe(self, value_s: float) -> None:
        index = next((i for i, bound in enumerate(self.buckets_s) if value_s <= bound), len(self.buckets_s))
        self.counts[index] += 1
        self.sum_s += value_s
        self.count += 1

    def cumulative(self) -> list[tuple[str, float]]:
        total = 0
        out: list[tuple[str, float]] = []
        for bound, count in zip((*map(str, self.buckets_s), "+Inf"), self.counts, strict=True):
            total += count
            out.append((bound, float(total)))
        return out


@dataclass(frozen=True)
class Snapshot:
    """What one log says now; None where there is no evidence."""

    kind: str | None
    mfu: float | None
    hfu: float | None
    mfu_source: str
    tokens_per_s: float | None
    tokens_per_s_per_gpu: float | None
    step_time_s: float | None
    log_interval_steps: int | None
    last_step: int | None
    last_step_time_s: float | None
    goodput: float | None
    restarts: int | None
    checkpoint_stall_s: float | None
    histogram: Histogram | None
    parse_errors: int


class LogState:
    def __init__(self, job: JobSpec, expected: Expected, *, window_s: float) -> None:
        self.job = job
        self.window_s = window_s
        self.kind: str | None = None
        self.global_batch_size: int | None = None
        self.window: deque[tuple[float, StepRecord]] = deque()
        self.histogram = Histogram()
        self.parse_errors = 0
        self.restarts = 0
        self.furthest: int | None = None
        self.previous: StepRecord | None = None
        self.last_step_time_s: float | None = None
        self.first_wall_s: float | None = None
        self.last_wall_s: float | None = None
        self.productive_s = 0.0
        self.checkpoint_stall_s: float | None = None
        self.stall_in_gap_s = 0.0
        self.unmeasured_save = False
        self.step_time_s: float | None = None
        self.mfu: float | None = None
        self.hfu: float | None = None
        self.mfu_source = "no step yet"
        self.tokens_per_s: float | None = None
        self.tokens_per_s_per_gpu: float | None = None
        self.expected = expected
        self.layout_from_log = False
        self.logged_steps = 0
        self.stale = False
        """New steps since MFU was last computed (it is computed once per poll, not once per line)."""

    @property
    def expected_value(self) -> float | None:
        """The performance model's MFU for the job's layout (not the accelerator's typical MFU)."""
        return self.expected.value if self.expected.basis in EXPECTED_BASES else None

    def add(self, parsed: Parsed, mtime_s: float) -> None:
        self.parse_errors += parsed.bad_lines
        for event in parsed.events:
            self._event(event)
        for index, record in enumerate(parsed.steps):
            self._step(record, mtime_s, restarted=parsed.restarted and index == 0)
        self.stale = self.stale or bool(parsed.steps)

    def _event(self, event: LogEvent) -> None:
        if event.kind != "checkpoint":
            return
        if event.duration_s is None:
            self.unmeasured_save = True  # its stall shows as the gap before the next step
            return
        self.checkpoint_stall_s = (self.checkpoint_stall_s or 0.0) + event.duration_s
        self.stall_in_gap_s += event.duration_s
        self.unmeasured_save = False  # Megatron's save-checkpoint timer follows its "saving" lines

    def _step(self, record: StepRecord, mtime_s: float, *, restarted: bool) -> None:
        previous = self.previous
        restart = restarted or (previous is not None and record.step <= previous.step)
        if restart:
            self.restarts += 1
        progress = record.interval_steps
        if self.furthest is not None:
            progress = max(0, min(record.interval_steps, record.step - self.furthest))
        gap_s = None
        if previous is not None and previous.wall_s is not None and record.wall_s is not None:
            gap_s = record.wall_s - previous.wall_s
        step_time = record.step_time_s
        if step_time is None and gap_s is not None and gap_s > 0 and not restart:
            step_time = max(0.0, gap_s - self.stall_in_gap_s) / max(1, record.interval_steps)
        if step_time is not None:
            self.step_time_s = step_time
            self.histogram.observe(step_time)
            self.productive_s += step_time * progress
            if self.unmeasured_save and gap_s is not None and record.step_time_s is not None:
                stall = max(0.0, gap_s - record.step_time_s * record.interval_steps)
                self.checkpoint_stall_s = (self.checkpoint_stall_s or 0.0) + stall
        self.unmeasured_save = False
        self.stall_in_gap_s = 0.0
        if record.wall_s is not None:
            if self.first_wall_s is None:
                self.first_wall_s = record.wall_s - (step_time or 0.0) * record.interval_steps
            self.last_wall_s = record.wall_s
        self.furthest = record.step if self.furthest is None else max(self.furthest, record.step)
        self.logged_steps += 1
        self.previous = record
        self.last_step_time_s = mtime_s
        key = record.wall_s if record.wall_s is not None else mtime_s
        self.window.append((key, record))
        while (len(self.window) > 2 and self.window[0][0] < key - self.window_s) or len(
            self.window
        ) > MAX_WINDOW:
            self.window.popleft()

    def measure(self) -> None:
        """MFU, HFU and tokens/s over the window, when steps came in since the last time."""
        if not self.stale:
            return
        self.stale = False
        job = self.job
        steps = [record for _, record in self.window]
        log = TrainingLog("", self.kind or "generic", steps, [], self.global_batch_size)
        estimate = measure([log], job.model, job.training, job.cluster)
        self.mfu = estimate.measured
        self.mfu_source = estimate.method
        per_gpu = estimate.tokens_per_s_per_gpu
        if per_gpu is None:
            reported = [s.tokens_per_s_per_gpu for s in steps if s.tokens_per_s_per_gpu is not None]
            per_gpu = sum(reported) / len(reported) if reported else None
        job_rate = [s.tokens_per_s for s in steps if s.tokens_per_s is not None]
        self.tokens_per_s_per_gpu = per_gpu
        if per_gpu is not None and job.cluster is not None:
            self.tokens_per_s = per_gpu * job.cluster.num_gpus
        else:
            self.tokens_per_s = sum(job_rate) / len(job_rate) if job_rate else None
        self.hfu = None
        if estimate.tokens_per_s_per_gpu is not None and job.model and job.training and job.cluster:
            recompute, recomputed_share = layout_recompute(job.parallelism, job.model.num_hidden_layers)
            self.hfu = utilization(
                job.model,
                seq_len=job.training.seq_len,
                tokens_per_s_per_gpu=estimate.tokens_per_s_per_gpu,
                peak_flops_per_s=job.cluster.accelerator.peak_flops(job.training.precision),
                recompute=recompute,
                convention=job.training.attention_flops,
                recomputed_share=recomputed_share,
            ).hfu

    def snapshot(self) -> Snapshot:
        goodput = None
        if self.first_wall_s is not None and self.last_wall_s is not None:
            span_s = self.last_wall_s - self.first_wall_s
            if span_s > 0 and self.productive_s > 0:
                goodput = min(1.0, self.productive_s / span_s)
        seen = self.previous is not None
        return Snapshot(
            kind=self.kind,
            mfu=self.mfu,
            hfu=self.hfu,
            mfu_source=self.mfu_source,
            tokens_per_s=self.tokens_per_s,
            tokens_per_s_per_gpu=self.tokens_per_s_per_gpu,
            step_time_s=self.step_time_s,
            # the first logged step's interval is unknown (what came before it is not in the log)
            log_interval_steps=self.previous.interval_steps
            if self.previous and self.logged_steps > 1
            else None,
            last_step=self.furthest,
            last_step_time_s=self.last_step_time_s,
            goodput=goodput,
            restarts=self.restarts if seen else None,
            checkpoint_stall_s=self.checkpoint_stall_s,
            histogram=self.histogram if self.histogram.count else None,
            parse_errors=self.parse_errors,
        )
