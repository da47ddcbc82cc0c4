"""The records sources produce and rules consume: one dataclass per kind of observation.

Records are small summaries (per step, per GPU, per event), never raw event lists, so a diagnosis of a
2 GB trace set holds a few MB. Every record names the file it came from.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:  # the parsers of comm (and ft's ledger) load only when a file of theirs is read
    from mfukit.comm.nccl_log import NcclLogReport
    from mfukit.comm.nccl_tests import NcclTestsRun
    from mfukit.ft.ledger import Goodput

TimelineCategory = Literal["compute", "comm", "memcpy"]


@dataclass
class StepBreakdown:
    """Where one step's time went on one rank's GPU (seconds)."""

    step: int | None
    start_s: float
    duration_s: float
    compute_s: float
    comm_s: float
    comm_exposed_s: float
    memcpy_exposed_s: float
    idle_s: float
    host_wait_s: float
    kernel_wait_s: float
    launch_gap_s: float
    """Idle time in gaps shorter than a kernel launch can hide (see ``LAUNCH_GAP_S``)."""
    dataloader_s: float
    dataloader_exposed_s: float
    checkpoint_exposed_s: float
    gc_exposed_s: float
    num_kernels: int


@dataclass(frozen=True)
class KernelTotal:
    name: str
    total_s: float
    count: int
    category: str
    tensor_core: bool


@dataclass(frozen=True)
class CollectiveSample:
    """One communication kernel with its message size: enough to compute its bus bandwidth."""

    collective: str
    size_bytes: float
    duration_s: float
    group_size: int


@dataclass(frozen=True)
class StepChain:
    """One step of one rank as the what-if replay of a data-parallel job sees it: when (from the step's
    start) each communication kernel started and how long it ran, in order, and when the step's last GPU
    work ended."""

    step: int | None
    starts_s: tuple[float, ...]
    durations_s: tuple[float, ...]
    end_s: float


@dataclass
class RankTrace:
    """One rank's profiler trace, reduced to its per-step breakdown and kernel statistics."""

    file: str
    rank: int | None
    rank_source: str
    world_size: int | None
    backend: str | None
    device_name: str | None
    steps: list[StepBreakdown]
    steps_from_markers: bool
    kernel_totals: list[KernelTotal]
    num_kernels: int
    num_short_kernels: int
    median_kernel_s: float | None
    num_comm_kernels: int
    num_comm_annotations: int
    cuda_graph_launches: int
    launch_api_s: float
    collectives: list[CollectiveSample]
    timeline: list[tuple[float, float, TimelineCategory]]
    clock_origin_s: float
    problems: list[str] = field(default_factory=list)
    events: int = 0
    chains: list[StepChain] = field(default_factory=list)
    """per step: the communication kernels in order (for the what-if replay across ranks)"""

    def median(self, attribute: str) -> float:
        """Median over steps of one StepBreakdown field."""
        values = sorted(float(getattr(step, attribute)) for step in self.steps)
        if not values:
            return 0.0
        middle = len(values) // 2
        return values[middle] if len(values) % 2 else 0.5 * (values[middle - 1] + values[middle])


@dataclass(frozen=True)
class StagePhase:
    """One pipeline stage's busy time in one step (from a per-stage timeline)."""

    step: int
    stage: int
    dp_rank: int
    compute_s: float
    step_s: float


@dataclass(frozen=True)
class TimelineOps:
    """The per-op spans of a pipeline timeline: one entry per traced op."""

    step: tuple[int, ...]
    dp: tuple[int, ...]
    stage: tuple[int, ...]
    optype: tuple[str, ...]
    seq: tuple[int, ...]
    start_s: tuple[float, ...]
    duration_s: tuple[float, ...]


@dataclass
class PipelineTimeline:
    """A pipeline-parallel job's per-stage timeline (Megatron timers / StragglerAnalysis traces)."""

    file: str
    num_stages: int
    num_microbatches: int
    dp_size: int
    phases: list[StagePhase]
    gc_s_per_step: float
    problems: list[str] = field(default_factory=list)
    ops: TimelineOps | None = None
    """every traced op (for the what-if replay)"""


@dataclass(frozen=True)
class StepRecord:
    """One logged training step (or logging interval)."""

    step: int
    step_time_s: float | None = None
    tokens_per_s: float | None = None
    tokens_per_s_per_gpu: float | None = None
    samples_per_s: float | None = None
    """Sequences per second of the whole job (HF Trainer's ``train_samples_per_second``)."""
    loss: float | None = None
    mfu: float | None = None
    tflops_per_gpu: float | None = None
    data_time_s: float | None = None
    wall_s: float | None = None
    """Wall-clock timestamp of the line, when the log prints one (seconds since the epoch)."""
    interval_steps: int = 1
    rank: int | None = None


@dataclass(frozen=True)
class LogEvent:
    """A notable line: checkpoint save, GC, straggler report, error."""

    kind: Literal["checkpoint", "gc", "straggler_report", "error"]
    line: int
    text: str
    step: int | None = None
    duration_s: float | None = None
    wall_s: float | None = None
    values: tuple[tuple[str, float], ...] = ()


SettingValue = bool | int | float | str


@dataclass(frozen=True)
class Setting:
    """One launch setting as the job printed it: the value, and the line it was read from."""

    value: SettingValue
    line: int
    text: str


@dataclass
class JobConfig:
    """The launch configuration one file printed (Megatron/NeMo arguments, DeepSpeed config, torchtitan
    job config), under canonical keys (``tp``, ``seq_len``, ``precision``...)."""

    file: str
    framework: str
    settings: dict[str, Setting]
    unread: tuple[str, ...] = ()  # setting lines whose value is not what the setting holds, said and skipped


@dataclass
class TrainingLog:
    file: str
    framework: str
    steps: list[StepRecord]
    events: list[LogEvent]
    global_batch_size: int | None = None
    problems: list[str] = field(default_factory=list)
    timers_ms: dict[str, list[float]] = field(default_factory=dict)
    """Megatron's timers block: the max across ranks of each timer (ms per iteration), one per report."""


@dataclass(frozen=True)
class GpuSample:
    """One telemetry sample of one GPU. Clocks in Hz, power in W, temperatures in °C."""

    time_s: float | None
    sm_clock_hz: float | None = None
    max_sm_clock_hz: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    temperature_c: float | None = None
    utilization: float | None = None
    throttle_reasons: int | None = None
    ecc_uncorrected: float | None = None
    ecc_corrected: float | None = None
    retired_pending: bool | None = None
    remap_pending: bool | None = None
    remap_failure: bool | None = None
    thermal_violation_s: float | None = None
    power_violation_s: float | None = None
    xid: int | None = None

    def __post_init__(self) -> None:
        """A count, clock, power or duration below zero is no reading (a wrapped counter, a bad export):
        it is dropped here, where every telemetry source builds its samples, not printed as it is."""
        for name in _NON_NEGATIVE_SAMPLE_FIELDS:
            value = getattr(self, name)
            if value is not None and not value >= 0:  # NaN too
                object.__setattr__(self, name, None)


_NON_NEGATIVE_SAMPLE_FIELDS = (
    "sm_clock_hz",
    "max_sm_clock_hz",
    "power_w",
    "power_limit_w",
    "utilization",
    "throttle_reasons",
    "ecc_uncorrected",
    "ecc_corrected",
    "thermal_violation_s",
    "power_violation_s",
    "xid",
)


@dataclass
class GpuSeries:
    """Telemetry of one GPU (nvidia-smi CSV, nvidia-smi -q, dcgm-exporter scrape)."""

    file: str
    host: str
    """the host the artifact names ('' when it names none)"""
    gpu: str
    name: str | None
    samples: list[GpuSample]
    uuid: str | None = None


@dataclass(frozen=True)
class DiagResult:
    """One ``dcgmi diag`` test result for one GPU (or all GPUs when the output does not say)."""

    file: str
    test: str
    status: Literal["pass", "fail", "warn", "skip"]
    gpu: str | None
    message: str


@dataclass(frozen=True)
class XidEvent:
    file: str
    line: int
    host: str | None
    pci: str | None
    xid: int
    text: str
    wall_s: float | None
    nvswitch: bool = False


FAILED_STATES = frozenset({"FAILED", "NODE_FAIL", "TIMEOUT", "OUT_OF_MEMORY"})
"""sacct states of an allocation that ended by failure (not a user's cancel, not success)."""


@dataclass(frozen=True)
class SlurmJob:
    """One ``sacct`` allocation row. Times are seconds since the epoch."""

    file: str
    job_id: str
    name: str
    state: str
    submit_s: float | None
    eligible_s: float | None
    start_s: float | None
    end_s: float | None
    num_gpus: int | None
    num_nodes: int | None
    nodes: str


@dataclass(frozen=True)
class NcclTestsResult:
    """One nccl-tests output (any era, or its ``-J`` JSON report, or a collective of ``mfukit bench
    collectives``), parsed by ``comm.nccl_tests``."""

    file: str
    run: NcclTestsRun | None
    problem: str | None = None
    """Why the output could not be read (``run`` is then None), or why it is not to be judged against the
    cluster (a gloo run on CPU)."""


@dataclass(frozen=True)
class DamagedInput:
    """A file of a recognised kind that could not be read at all: said as degraded input."""

    file: str
    problem: str


@dataclass(frozen=True)
class BenchMatmul:
    """``mfukit bench matmul``: the best GEMM rate per dtype on one device."""

    file: str
    device: str
    device_name: str
    best_flops_per_s: tuple[tuple[str, float], ...]
    """(dtype, best FLOP/s over the size sweep)"""
    largest_size: int


@dataclass(frozen=True)
class BenchCheckpoint:
    """``mfukit bench checkpoint``: DCP save throughput of one node against its disk, measured together."""

    file: str
    state_bytes: float
    save_bytes_per_s: float
    async_blocking_s: float
    disk_write_bytes_per_s: float


@dataclass(frozen=True)
class TrainLedger:
    """An ``mfukit train`` run directory's goodput ledger (``ledger.jsonl`` with its ``metrics.jsonl``),
    accounted by ``ft.ledger``: restarts, recoveries, saves and where the wall time went."""

    file: str
    goodput: Goodput
    world_size: int | None
    problems: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class NcclLog:
    """What the NCCL_DEBUG=INFO lines of one file say (a log of its own, or interleaved in a training log
    or nccl-tests output), analysed by ``comm.nccl_log``."""

    file: str
    report: NcclLogReport


Record = (
    RankTrace
    | PipelineTimeline
    | TrainingLog
    | JobConfig
    | GpuSeries
    | DiagResult
    | XidEvent
    | SlurmJob
    | NcclTestsResult
    | BenchMatmul
    | BenchCheckpoint
    | TrainLedger
    | NcclLog
    | DamagedInput
)
"""What a source's ``parse`` returns, one of these per observation."""
