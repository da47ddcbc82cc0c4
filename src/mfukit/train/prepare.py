"""From a scenario and the ``mfukit train`` flags to a checked :class:`TrainConfig` (no torch needed).

Every default the run depends on is returned as an assumption sentence; every degraded input (no peak
for MFU, a scenario field the harness ignores) as a warning.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mfukit import units
from mfukit.catalog.resolved import ResolvedScenario, load_resolved
from mfukit.core import jobtext
from mfukit.core.hardware import Accelerator, Dtype, System
from mfukit.errors import InputError
from mfukit.ft.failures import JobFailures, scenario_failures
from mfukit.train.config import CheckpointPolicy, TrainConfig, check_trainable
from mfukit.train.faults import parse_all

DEFAULT_LR = 1e-3
DEFAULT_WEIGHT_DECAY = 0.1
DEFAULT_HANG_TIMEOUT_S = 300.0
MAX_SYNTHETIC_TOKENS = 16 * 2**20


@dataclass(frozen=True)
class TrainRequest:
    """Everything ``mfukit train`` was asked, before resolution."""

    scenario_path: Path | None
    overrides: dict[str, Any] = field(default_factory=dict)
    steps: int | None = None
    out: Path | None = None
    nproc_per_node: int | None = None
    nnodes: str = "1"
    max_restarts: int = 3
    inject: tuple[str, ...] = ()
    keep: int = 3
    lr: float = DEFAULT_LR
    warmup_steps: int | None = None
    seed: int = 0
    compile: bool = False
    hang_timeout: str | None = None
    peak_flops: str | None = None
    data: Path | None = None
    verify_resume: bool = False
    device: str = "auto"
    log_every: int = 10
    metrics_listen: str | None = None
    """HOST:PORT to serve the run's Prometheus metrics on while it trains (``mfukit watch``'s)."""
    watch_sidecar: str | None = None
    """HOST:PORT of an ``mfukit watch`` sidecar in the emitted sbatch script / JobSet."""


@dataclass
class Prepared:
    config: TrainConfig
    scene: ResolvedScenario
    """the scenario as the one resolver resolved it (its node only where it names a system or a GPU)"""
    world_size: int
    nnodes_min: int
    nnodes_max: int
    failures: JobFailures
    """the job's failure process under the scenario's failure model (``mfukit ft``'s)"""
    assumptions: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    peak_dtype: Dtype = "fp32"

    @property
    def system(self) -> System | None:
        """The scenario's node, for the emitted job; None where it names neither a system nor a GPU."""
        return self.scene.node.system if self.scene.node is not None else None

    @property
    def accelerator(self) -> Accelerator | None:
        """The scenario's GPU, whose catalog peak gives MFU on CUDA; None where it names none."""
        return self.scene.node.accelerator if self.scene.node is not None else None


def parse_nnodes(text: str) -> tuple[int, int]:
    """``"2"`` -> (2, 2); ``"1:4"`` -> (1, 4) (torchrun's elastic MIN:MAX)."""
    low, _, high = text.partition(":")
    # ASCII digits only (int() also takes blanks, '_' and other scripts' digits)
    if not all(part.isascii() and part.isdigit() for part in (low, high or low)):
        raise InputError("is not N or MIN:MAX", source="command line", field="--nnodes", value=text)
    minimum, maximum = int(low), int(high or low)
    if minimum < 1 or maximum < minimum:
        raise InputError("needs 1 <= MIN <= MAX", source="command line", field="--nnodes", value=text)
    return minimum, maximum


def prepare(request: TrainRequest, *, cuda: bool) -> Prepared:
    """Resolve and check everything; raises InputError naming the flag or field at fault."""
    scene = load_resolved(request.scenario_path, request.overrides, node_optional=True)
    source, spec, training = scene.source, scene.model, scene.training
    check_trainable(spec, source=source)
    assumptions: list[str] = []
    warnings: list[str] = []
    if training.seq_len < 2:
        raise InputError(
            "must be at least 2 tokens (inputs and shifted targets)",
            source=source,
            field="training.seq_len",
            value=training.seq_len,
        )
    if training.seq_len > spec.max_position_embeddings:
        warnings.append(
            f"training.seq_len {training.seq_len} exceeds the model's max_position_embeddings "
            f"{spec.max_position_embeddings}; RoPE extrapolates beyond what the model was specified for"
        )

    layout = scene.parallelism
    if layout is not None:
        for name in ("tp", "pp", "cp", "ep", "vpp"):
            if getattr(layout, name) > 1:
                raise InputError(
                    "the training harness is data-parallel (DDP or FSDP2) only",
                    source=source,
                    field=f"parallelism.{name}",
                    value=getattr(layout, name),
                    hint="set it to 1; use `mfukit plan` for TP/PP/CP layouts",
                )
    nnodes_min, nnodes_max = parse_nnodes(request.nnodes)
    nproc = request.nproc_per_node or (layout.dp // nnodes_min if layout is not None else 1) or 1
    world = nproc * nnodes_min
    if layout is not None and request.nproc_per_node and layout.dp != world:
        assumptions.append(f"world size {world} from --nproc-per-node (the scenario says dp = {layout.dp})")
    parallel = "fsdp" if layout is not None and layout.shards_parameters else "ddp"

    global_batch = training.global_batch_sequences or world * training.micro_batch_size
    if training.global_batch_sequences is None:
        assumptions.append(f"global batch = world size x micro batch = {global_batch} sequences (none given)")
    for ranks in (nproc * nodes for nodes in range(nnodes_min, nnodes_max + 1)):
        if global_batch % (ranks * training.micro_batch_size):
            raise InputError(
                f"global batch of {global_batch} sequences does not split over {ranks} ranks x "
                f"micro batch {training.micro_batch_size}",
                source=source,
                field="training.global_batch_size",
                value=global_batch,
                hint="choose a global batch divisible by ranks x micro_batch_size (for every world size "
                "--nnodes allows)",
            )
    steps = request.steps
    if steps is None:
        if training.tokens is None:
            raise InputError(
                "needs training.tokens or --steps",
                source=source,
                field="training.tokens",
                hint='e.g. tokens = "1M" in [training], or --steps 100',
            )
        step_tokens = global_batch * training.seq_len
        steps = int(training.tokens // step_tokens)
        if steps < 1:
            raise InputError(
                f"is less than one step of {step_tokens} tokens",
                source=source,
                field="training.tokens",
                value=training.tokens,
            )
        assumptions.append(
            f"{steps} steps = training.tokens / ({global_batch} sequences x {training.seq_len} tokens)"
        )
    parse_all(list(request.inject), steps=steps, world_size=world)

    precision = training.precision
    if not cuda and precision != "fp32":
        assumptions.append(f"fp32 on CPU (scenario precision {precision} applies to CUDA runs with autocast)")
    peak_dtype: Dtype = precision if cuda else "fp32"

    name = jobtext.check_text(
        request.scenario_path.stem if request.scenario_path else spec.name,
        field="scenario name",
        source=source,
    )
    out = Path(jobtext.check_text(str(request.out), field="--out")) if request.out else Path("runs") / name
    failures, failures_how = scenario_failures(
        scene.ft,
        node_rate_per_s=scene.cluster_section.node_failure_rate_per_s,
        num_gpus=world,
        num_nodes=nnodes_min,
        source=source,
    )
    assumptions.append(
        f"{failures_how}; for {world} rank(s) on {nnodes_min} node(s), each rank counted as a GPU"
    )
    checkpoint = _checkpoint_policy(scene, request.keep, failures, assumptions)
    hang_timeout_s = (
        units.parse_duration_s(request.hang_timeout, field="--hang-timeout")
        if request.hang_timeout
        else DEFAULT_HANG_TIMEOUT_S
    )
    warmup = request.warmup_steps if request.warmup_steps is not None else max(1, steps // 10)
    config = TrainConfig(
        name=name,
        out_dir=str(out.resolve()),
        model=spec,
        seq_len=training.seq_len,
        global_batch_size=global_batch,
        micro_batch_size=training.micro_batch_size,
        steps=steps,
        lr=request.lr,
        warmup_steps=warmup,
        weight_decay=DEFAULT_WEIGHT_DECAY,
        seed=request.seed,
        precision=precision,
        parallel=parallel,
        device="cuda" if cuda else "cpu",
        compile=request.compile,
        data_path=str(request.data.resolve()) if request.data else "",
        checkpoint=checkpoint,
        faults=list(request.inject),
        hang_timeout_s=hang_timeout_s,
        attention_flops=training.attention_flops,
        verify_resume=request.verify_resume,
        log_every=request.log_every,
    )
    return Prepared(
        config=config,
        scene=scene,
        world_size=world,
        nnodes_min=nnodes_min,
        nnodes_max=nnodes_max,
        failures=failures,
        assumptions=assumptions,
        warnings=warnings,
        peak_dtype=peak_dtype,
    )


def _checkpoint_policy(
    scene: ResolvedScenario, keep: int, failures: JobFailures, assumptions: list[str]
) -> CheckpointPolicy:
    ft = scene.ft
    interval = ft.checkpoint_interval
    if interval is not None:
        if interval.steps is not None:
            return CheckpointPolicy(
                interval_steps=int(interval.steps),
                keep=keep,
                mode=ft.checkpoint_mode,
                blocking_s=ft.checkpoint_blocking_s,
            )
        return CheckpointPolicy(
            interval_s=interval.seconds,
            keep=keep,
            mode=ft.checkpoint_mode,
            blocking_s=ft.checkpoint_blocking_s,
        )
    if failures.failure_rate_per_s <= 0:
        raise InputError(
            "every failure rate is zero, so there is no optimum checkpoint interval",
            source=scene.source,
            field="ft.checkpoint_interval",
            hint='give the interval ("30min" or "500steps"), or a failure model with non-zero rates',
        )
    assumptions.append(
        f"checkpoint interval: `mfukit ft`'s recommended interval (Daly's optimum, no shorter than a step "
        f"nor than an async save's persist) for a job MTBF of {units.format_duration(failures.mtbf_s)}, with "
        "the first save's blocking time measured; set ft.checkpoint_interval or --checkpoint-interval to override"
    )
    return CheckpointPolicy(
        daly_mtbf_s=failures.mtbf_s, keep=keep, mode=ft.checkpoint_mode, blocking_s=ft.checkpoint_blocking_s
    )


def synthetic_token_count(config: TrainConfig) -> int:
    """One epoch of the run's tokens (+1 for the last target), capped; the sampler wraps beyond it."""
    needed = config.steps * config.global_batch_size * config.seq_len + 1
    return max(config.seq_len + 1, min(needed, MAX_SYNTHETIC_TOKENS))
