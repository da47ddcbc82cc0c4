"""From a scenario to what the performance model needs: the workload, the hardware, the GPU count, the
layout (``estimate``) or the search space (``plan``), each checked with an error that names the field."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from mfukit.catalog.resolved import ResolvedScenario
from mfukit.core.hardware import Accelerator, System
from mfukit.core.model import ModelSpec
from mfukit.core.parallelism import Parallelism, Recompute, default_stage_split
from mfukit.core.scenario import TrainingSection
from mfukit.errors import InputError
from mfukit.perf.efficiency import efficiency_for
from mfukit.perf.layouts import BATCH_ROUNDING_FRAC, Workload
from mfukit.perf.memory import headroom_bytes, stack_memory_fields
from mfukit.perf.model_states import sharding_of
from mfukit.perf.offload import host_rates, offloads
from mfukit.perf.planner import SearchSpace

DEGREES = ("tp", "pp", "dp", "cp", "ep", "vpp")


@dataclass(frozen=True)
class PerfInputs:
    source: str
    model: ModelSpec
    workload: Workload
    system: System
    accelerator: Accelerator
    num_gpus: int | None
    tokens: float | None
    deadline_s: float | None
    micro_batch_size: int
    micro_batch_given: bool
    layout: Parallelism | None
    hbm_headroom_bytes: float = 0.0  # cluster.hbm_headroom of this accelerator's HBM

    @property
    def base_dir(self) -> Path | None:
        return Path(self.source).parent if self.source != "command line" else None


def batch_rounding_frac(training: TrainingSection) -> float:
    """How far a layout may move the scenario's global batch: a batch in tokens is a target, rounded to whole
    micro-batches per DP rank (:data:`~mfukit.perf.layouts.BATCH_ROUNDING_FRAC`); one in sequences is exact."""
    return BATCH_ROUNDING_FRAC if training.global_batch_size is None else 0.0


class AttentionFields(TypedDict):
    """What the step and memory models take of ``[training]``'s attention kernel and dropout probabilities."""

    flash_attention: bool
    attention_dropout: bool  # a probability above 0: masks kept
    hidden_dropout: bool


def attention_fields(training: TrainingSection) -> AttentionFields:
    """:class:`AttentionFields` of ``training`` (the Workload's and the sizing inputs' alike)."""
    return AttentionFields(
        flash_attention=training.attention == "flash",
        attention_dropout=training.attention_dropout > 0,
        hidden_dropout=training.hidden_dropout > 0,
    )


def training_workload(model: ModelSpec, training: TrainingSection, sequences: int) -> Workload:
    """The workload of a scenario's ``[training]`` with ``sequences`` per step; the stack's memory behaviour
    (kernels, FP8 weights, allocator) from ``data/memory_stacks.toml``, the Workload defaults for a stack
    not listed there."""
    memory: dict[str, Any] = stack_memory_fields(
        training.framework, training.norm, training.compile, training.fp8_all_gather
    )
    return Workload(
        model=model,
        seq_len=training.seq_len,
        global_batch_sequences=sequences,
        precision=training.precision,
        attention=training.attention_flops,
        framework=training.framework,
        compile=training.compile,
        tp_comm_overlap=training.tp_comm_overlap,
        fp8_recipe=training.fp8_recipe,
        batch_rounding_frac=batch_rounding_frac(training),
        **attention_fields(training),
        offload_optimizer=training.offload_optimizer,
        offload_params=training.offload_params,
        offload_activations=training.offload_activations,
        offload_optimizer_step=training.offload_optimizer_step,
        **memory,
    )


def perf_inputs(scene: ResolvedScenario) -> PerfInputs:
    """What the performance model needs of ``scene``, each fact checked with an error naming its field."""
    source, model, system, accelerator = scene.source, scene.model, scene.system, scene.accelerator
    training = scene.training
    batch = training.global_batch_sequences
    if batch is None:
        raise InputError(
            "the performance model needs the global batch",
            source=source,
            field="training.global_batch_tokens",
            hint='give training.global_batch_tokens ("4M") or training.global_batch_size (sequences per step)',
        )
    if training.tokens is not None and training.tokens <= 0:
        raise InputError("must be positive", source=source, field="training.tokens", value=training.tokens)
    workload = training_workload(model, training, batch)
    efficiency_for(accelerator, training.framework)  # an unknown framework is bad input, said now
    if offloads(workload):
        host_rates(workload, system, accelerator)  # so is an offload the catalog cannot cost
    accelerator.peak_flops(training.precision)  # so is a precision the GPU has no peak for
    return PerfInputs(
        source=source,
        model=model,
        workload=workload,
        system=system,
        accelerator=accelerator,
        num_gpus=scene.num_gpus,
        tokens=training.tokens,
        deadline_s=training.deadline_s,
        micro_batch_size=training.micro_batch_size,
        micro_batch_given="micro_batch_size" in training.model_fields_set,
        layout=scene.parallelism,
        hbm_headroom_bytes=headroom_bytes(scene.cluster_section.hbm_headroom, accelerator.hbm_bytes),
    )


def layout_for_estimate(inputs: PerfInputs) -> Parallelism:
    """The scenario's layout, with dp filled in from the GPU count when it was left out."""
    layout = inputs.layout
    if layout is None:
        raise InputError(
            "needs a parallel layout",
            source=inputs.source,
            field="parallelism",
            hint="give parallelism.tp and parallelism.pp (and parallelism.dp); `mfukit plan` searches for one",
        )
    if "dp" not in layout.model_fields_set:
        if inputs.num_gpus is None:
            raise InputError(
                "needs dp or the GPU count",
                source=inputs.source,
                field="parallelism.dp",
                hint="give parallelism.dp, or cluster.num_gpus so that dp = GPUs / (tp x pp x cp)",
            )
        model_parallel = layout.tp * layout.pp * layout.cp
        layout = layout.model_copy(update={"dp": max(1, inputs.num_gpus // model_parallel)})
    split = (
        None if layout.uneven else default_stage_split(inputs.model.num_hidden_layers, layout.pp, layout.vpp)
    )
    if split is not None:  # the split Megatron-Core / NeMo make themselves (core.parallelism)
        layout = layout.model_copy(update={"first_stage_layers": split[0], "last_stage_layers": split[1]})
    return layout


def search_space(inputs: PerfInputs) -> SearchSpace:
    """Every knob the scenario fixed becomes a single option; the others are searched."""
    layout = inputs.layout
    fixed: dict[str, Any] = {}
    if inputs.micro_batch_given:
        fixed["micro_batch_size"] = (inputs.micro_batch_size,)
    if layout is not None:
        given = layout.model_fields_set
        fixed |= {name: (int(getattr(layout, name)),) for name in DEGREES if name in given}
        if "recompute" in given:
            recompute: Recompute = layout.recompute
            fixed["recompute"] = (recompute,)
        if layout.recompute_layers is not None:
            fixed["recompute_layers"] = layout.recompute_layers
        if "sequence_parallel" in given:
            fixed["sequence_parallel"] = (layout.sequence_parallel,)
        if given & {"zero", "fsdp", "zero_impl"}:
            sharding = sharding_of(layout)
            fixed["sharding"] = (sharding,)
    return SearchSpace(**fixed)
