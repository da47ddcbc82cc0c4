"""One layout's estimate (``mfukit estimate``), the memory breakdown of any plan, and the step time the
fault-tolerance model and ``size`` run on."""

from __future__ import annotations

from dataclasses import dataclass

from mfukit.core.hardware import Accelerator, System
from mfukit.core.model import ModelSpec
from mfukit.core.parallelism import LayoutProblem, Parallelism, layout_problems
from mfukit.core.scenario import TrainingSection
from mfukit.errors import InputError
from mfukit.perf.efficiency import Efficiency, efficiency_for, require_interleaving
from mfukit.perf.inputs import PerfInputs, training_workload
from mfukit.perf.layouts import Workload, grid_of, rounded_batch, step_shape
from mfukit.perf.memory import MemoryEstimate, StepShape, estimate_memory
from mfukit.perf.planner import (
    Plan,
    SearchSpace,
    evaluate_grid,
    interleaving_breaks,
    layout_intervals,
    plan_at,
    search,
)
from mfukit.perf.step_time import Machine, machine_for
from mfukit.perf.unpublished import tuned_choice


@dataclass(frozen=True)
class LayoutEstimate:
    layout: Parallelism
    num_gpus: int
    micro_batch_size: int
    problems: list[LayoutProblem]
    machine: Machine
    efficiency: Efficiency
    plan: Plan | None  # None when the layout cannot be built
    memory: MemoryEstimate | None
    # what was not given and how it was chosen (:func:`mfukit.perf.unpublished.tuned_choice`)
    assumed: tuple[str, ...] = ()

    @property
    def fits(self) -> bool:
        return self.memory is not None and self.memory.fits(self.machine.accelerator.hbm_bytes)


def plan_shape(workload: Workload, plan: Plan, gpus_per_node: int) -> StepShape:
    """The memory model's view of a plan's step."""
    return step_shape(
        workload,
        plan.layout,
        micro_batch_size=plan.micro_batch_size,
        num_microbatches=plan.num_microbatches,
        gpus_per_node=gpus_per_node,
    )


def plan_memory(workload: Workload, plan: Plan, gpus_per_node: int) -> MemoryEstimate:
    """The named memory breakdown of a plan (the planner ranks on the same totals)."""
    return estimate_memory(workload.model, plan.layout, plan_shape(workload, plan, gpus_per_node))


def estimate_layout(
    inputs: PerfInputs, layout: Parallelism, *, micro_batch_size: int | None = None
) -> LayoutEstimate:
    """Step time, MFU and memory of ``layout``, or the rules it breaks. A micro-batch neither passed nor in the
    scenario, and a recompute the layout does not set, are what a tuned run of the layout uses
    (:mod:`mfukit.perf.unpublished`)."""
    given = micro_batch_size or (inputs.micro_batch_size if inputs.micro_batch_given else None)
    return evaluate_layout(
        inputs.workload,
        inputs.system,
        inputs.accelerator,
        inputs.num_gpus or layout.world_size,
        layout,
        micro_batch_size=given,
        tokens=inputs.tokens,
        source=inputs.source,
        headroom_bytes=inputs.hbm_headroom_bytes,
    )


def evaluate_layout(
    workload: Workload,
    system: System,
    accelerator: Accelerator,
    num_gpus: int,
    layout: Parallelism,
    *,
    micro_batch_size: int | None,
    tokens: float | None = None,
    source: str | None = None,
    headroom_bytes: float = 0.0,
) -> LayoutEstimate:
    """:func:`estimate_layout` on plain values (``micro_batch_size`` None, or a recompute ``layout`` does not
    set: :func:`~mfukit.perf.unpublished.tuned_choice`)."""
    machine = machine_for(system, accelerator, num_gpus)
    efficiency = efficiency_for(accelerator, workload.framework)
    require_interleaving(accelerator, workload.framework, layout.vpp, source)
    probe = micro_batch_size or 1
    problems = _problems(workload, system, num_gpus, layout, probe, _sequences(workload, layout, probe))
    if problems:
        return LayoutEstimate(layout, num_gpus, probe, problems, machine, efficiency, None, None)
    given = (layout.recompute,) if "recompute" in layout.model_fields_set else None
    choice = tuned_choice(
        workload,
        layout,
        machine,
        micro_batch_size=micro_batch_size,
        recomputes=given,
        headroom_bytes=headroom_bytes,
    )
    layout, micro_batch_size = choice.layout, choice.micro_batch_size
    per_step = layout.dp * micro_batch_size
    sequences = _sequences(workload, layout, micro_batch_size)
    problems = _problems(workload, system, num_gpus, layout, micro_batch_size, sequences)
    if problems:
        return LayoutEstimate(
            layout, num_gpus, micro_batch_size, problems, machine, efficiency, None, None, tuple(choice.notes)
        )
    microbatches = sequences // per_step
    if interleaving_breaks(layout.pp, layout.vpp, microbatches):
        raise InputError(
            f"an interleaved pipeline (pp {layout.pp}, vpp {layout.vpp}) needs the micro-batches per step to be "
            f"a multiple of pp, and {sequences:,} sequences / (dp {layout.dp} x micro-batch {micro_batch_size}) "
            f"= {microbatches} is not (Megatron's interleaved 1F1B schedule)",
            source=source,
            field="parallelism.vpp",
            value=layout.vpp,
            hint=f"set vpp = 1, or a global batch that is a multiple of pp x dp x micro-batch = "
            f"{layout.pp * per_step:,} sequences (training.global_batch_size)",
        )
    grid = grid_of(
        [layout], model=workload.model, micro_batch_size=[micro_batch_size], num_microbatches=[microbatches]
    )
    estimate, memory, crosses = evaluate_grid(workload, grid, machine)
    plan = plan_at(
        workload, grid, estimate, memory, crosses, 0, tokens, layout_intervals(workload, grid, machine)[0]
    )
    return LayoutEstimate(
        layout,
        num_gpus,
        micro_batch_size,
        [],
        machine,
        efficiency,
        plan,
        plan_memory(workload, plan, machine.gpus_per_node),
        tuple(choice.notes),
    )


def _sequences(workload: Workload, layout: Parallelism, micro_batch_size: int) -> int:
    """The global batch this layout runs: a batch given in tokens rounded to it (when it can be, within the
    bound; else the layout rules say why), one given in sequences as it is."""
    return int(rounded_batch(workload, [layout.dp * micro_batch_size])[0]) or workload.global_batch_sequences


def _problems(
    workload: Workload,
    system: System,
    num_gpus: int,
    layout: Parallelism,
    micro_batch_size: int,
    sequences: int,
) -> list[LayoutProblem]:
    """The divisibility rules ``layout`` breaks at ``micro_batch_size`` with ``sequences`` per step."""
    return layout_problems(
        layout,
        workload.model,
        seq_len=workload.seq_len,
        global_batch_sequences=sequences,
        micro_batch_size=micro_batch_size,
        num_gpus=num_gpus,
        max_tp=system.scale_up_domain_gpus,
    )


def best_plan(
    workload: Workload,
    system: System,
    accelerator: Accelerator,
    num_gpus: int,
    *,
    layout: Parallelism | None = None,
    micro_batch_size: int | None = None,
    headroom_bytes: float = 0.0,
) -> tuple[Plan | None, str]:
    """The scenario's layout when it has one (dp from the GPU count when left out), else the best of the
    planner's search on ``num_gpus`` GPUs (keeping ``headroom_bytes`` of HBM free, as ``plan`` does); and how
    it was chosen."""
    if layout is not None:
        if "dp" not in layout.model_fields_set:
            layout = layout.model_copy(update={"dp": max(1, num_gpus // (layout.tp * layout.pp * layout.cp))})
        found = evaluate_layout(
            workload,
            system,
            accelerator,
            num_gpus,
            layout,
            micro_batch_size=micro_batch_size,
            headroom_bytes=headroom_bytes,
        )
        if found.plan is None:
            return None, "the scenario's layout cannot be built: " + "; ".join(
                p.message for p in found.problems
            )
        return found.plan, "the scenario's layout"
    space = SearchSpace(micro_batch_size=(micro_batch_size,) if micro_batch_size else None)
    result = search(
        workload, system, accelerator, [num_gpus], space=space, top_k=1, headroom_bytes=headroom_bytes
    )
    plan = result.best_per_count[num_gpus]
    if plan is None:
        return None, result.nothing_fits(workload, num_gpus)
    return plan, f"the best of {result.configs_evaluated:,} layouts searched"


def training_plan(
    model: ModelSpec,
    training: TrainingSection,
    system: System,
    accelerator: Accelerator,
    num_gpus: int,
    layout: Parallelism | None,
) -> tuple[Plan | None, str]:
    """:func:`best_plan` for a scenario's ``[training]`` (which must give the global batch): its micro-batch
    when the scenario names one, else the planner's (on a given layout, :mod:`mfukit.perf.unpublished`'s rule)."""
    sequences = training.global_batch_sequences
    if sequences is None:
        return None, "the performance model needs the global batch (--global-batch-tokens)"
    micro = training.micro_batch_size if "micro_batch_size" in training.model_fields_set else None
    return best_plan(
        training_workload(model, training, sequences),
        system,
        accelerator,
        num_gpus,
        layout=layout,
        micro_batch_size=micro,
    )
