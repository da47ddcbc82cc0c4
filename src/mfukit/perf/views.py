"""What ``estimate``, ``plan`` and ``size`` show of the performance model: a layout in words, a plan's
JSON keys, its step-time breakdown, its memory per GPU and which tier each parallel dimension crosses."""

from __future__ import annotations

from typing import Any

from mfukit import units
from mfukit.core.parallelism import Parallelism
from mfukit.core.results import Table, shown
from mfukit.perf.efficiency import Efficiency, large_gemm_fraction
from mfukit.perf.flops import ATTENTION_CONVENTION_NAMES
from mfukit.perf.inputs import DEGREES, PerfInputs
from mfukit.perf.layouts import SHORT_SHARDING, Workload
from mfukit.perf.memory import MemoryEstimate, StageMemory, memory_note
from mfukit.perf.model_states import sharding_of
from mfukit.perf.planner import Plan
from mfukit.perf.step_time import Machine

BREAKDOWN_NAMES = {
    "compute": "compute (GEMMs, attention)",
    "memory_bound": "element-wise (memory-bound)",
    "grad_accumulation": "gradient accumulation (memory-bound)",
    "recompute": "recompute",
    "tp_comm": "TP communication (exposed)",
    "cp_comm": "CP communication (exposed)",
    "ep_comm": "EP all-to-all",
    "fsdp_comm": "ZeRO-3/FSDP gathers (exposed)",
    "pp_comm": "PP send/recv (exposed)",
    "pipeline_bubble": "pipeline bubble",
    "dp_comm": "DP gradient sync (exposed)",
    "optimizer": "optimizer step",
    "offload": "host offload (exposed copies, CPU optimizer)",
    "other": "framework overhead (per layer, micro-batch)",
    "stragglers": "stragglers (slowest of the ranks)",
}


def layout_text(layout: Parallelism) -> str:
    """``TP 8 x PP 8 (v2) x DP 16 (CP 2, EP 1)``."""
    pipeline = f"PP {layout.pp}" + (f" (v{layout.vpp})" if layout.vpp > 1 else "")
    if layout.first_stage_layers is not None or layout.last_stage_layers is not None:
        pipeline += (
            f" [{layout.first_stage_layers or '-'}/{layout.last_stage_layers or '-'} layers first/last]"
        )
    return f"TP {layout.tp} x {pipeline} x DP {layout.dp} (CP {layout.cp}, EP {layout.ep})"


def recompute_text(layout: Parallelism) -> str:
    """``full``, or ``full (20 layers/chunk)`` where ``recompute_layers`` caps it to the first layers of each
    pipeline stage's model chunk."""
    if layout.recompute_layers is None:
        return layout.recompute
    return f"{layout.recompute} ({layout.recompute_layers} layers/chunk)"


def options_text(layout: Parallelism, *, sequence_parallel: bool = True, compact: bool = False) -> str:
    """``SP, recompute selective, dist-opt``: sequence parallelism (unless the layout column says it), the
    recompute mode and the sharding; ``compact`` leaves out "recompute none" (a table of many layouts)."""
    parts = ["SP"] if sequence_parallel and layout.sequence_parallel and layout.tp > 1 else []
    if not (compact and layout.recompute == "none"):
        parts.append(f"recompute {recompute_text(layout)}")
    parts.append(SHORT_SHARDING[sharding_of(layout)])
    return ", ".join(parts)


def layout_json(layout: Parallelism) -> dict[str, Any]:
    return {
        "tp": layout.tp,
        "pp": layout.pp,
        "dp": layout.dp,
        "cp": layout.cp,
        "ep": layout.ep,
        "vpp": layout.vpp,
        "sequence_parallel": layout.sequence_parallel,
        "recompute": layout.recompute,
        "recompute_layers": layout.recompute_layers,
        "sharding": sharding_of(layout),
        "zero": layout.zero,
        "fsdp": layout.fsdp,
        "first_stage_layers": layout.first_stage_layers,
        "last_stage_layers": layout.last_stage_layers,
    }


def plan_json(
    plan: Plan, memory: MemoryEstimate | None, workload: Workload, hbm_bytes: float
) -> dict[str, Any]:
    """The estimate keys of one plan (``estimate`` returns them at the top level, ``plan`` per plan)."""
    peak = memory.peak if memory is not None else None
    return {
        "num_gpus": plan.num_gpus,
        "layout": layout_json(plan.layout),
        "micro_batch_size": plan.micro_batch_size,
        "num_microbatches": plan.num_microbatches,
        "step_time_s": plan.step_time_s,
        "mfu": plan.mfu,
        "hfu": plan.hfu,
        "model_tflops_per_gpu": plan.model_flops_per_s_per_gpu / 1e12,
        "tokens_per_s": plan.tokens_per_s,
        "tokens_per_s_per_gpu": plan.tokens_per_s_per_gpu,
        "time_to_train_s": plan.time_to_train_s,
        "memory_per_gpu_bytes": plan.memory_bytes,
        "hbm_bytes": hbm_bytes,
        "fits": memory.fits(hbm_bytes) if memory is not None else plan.memory_bytes <= hbm_bytes,
        "memory_required_bytes": memory.required_bytes if memory is not None else None,
        "breakdown_s": plan.breakdown_s,
        "memory_breakdown_bytes": (
            {name.replace(" ", "_").lower(): value for name, value in peak.parts().items()} if peak else None
        ),
        "memory_stage": peak.stage if peak else None,
        "crosses_network": plan.crosses_network,
        "attention_flops_convention": workload.attention,
        **interval_json(plan),
    }


def interval_json(plan: Plan) -> dict[str, Any]:
    """The 80 % interval of a plan's MFU and step time, and what it rests on (perf.uncertainty)."""
    interval = plan.interval
    if interval is None:
        return {"mfu_interval": None}
    low, high = interval.around_mfu(plan.mfu)
    return {
        "mfu_interval": {
            "low": low,
            "high": high,
            "coverage": 0.8,
            "basis": interval.basis(),
            "matched_on": list(interval.matched_on),
            "held_out_runs": interval.rows,
            "sources": interval.sources,
            "extrapolated": interval.extrapolated,
            "highest_measured_mfu": interval.highest_measured_mfu,
            "beyond_measured": plan.beyond_measured,
        },
        "step_time_interval_s": [
            plan.step_time_s / interval.high_factor,
            plan.step_time_s / interval.low_factor,
        ],
    }


def mfu_with_interval(plan: Plan) -> str:
    """``44.0 % (38.1-47.9 %)``, marked when the regime lies outside the measured runs."""
    text = units.format_percent(plan.mfu)
    if plan.mfu_interval is None or plan.interval is None:
        return text
    low, high = plan.mfu_interval
    mark = " extrapolated" if plan.interval.extrapolated else ""
    return f"{text} ({low * 100:.1f}-{high * 100:.1f} %){mark}"


def breakdown_table(plan: Plan, title: str = "step-time breakdown") -> Table:
    table = Table(
        title, ["part", "seconds", "share of step"], csv_columns=["part", "seconds", "share_of_step"]
    )
    for name, value in plan.breakdown_s.items():
        if value > 0:
            table.add(
                BREAKDOWN_NAMES[name],
                shown(value, lambda v: f"{v:,.3f}"),
                shown(value / plan.step_time_s, units.format_percent),
            )
    table.add("step", shown(plan.step_time_s, lambda v: f"{v:,.3f}"), shown(1.0, units.format_percent))
    return table


def tiers_table(plan: Plan, machine: Machine) -> Table:
    layout = plan.layout
    table = Table(
        "where each dimension communicates",
        ["dimension", "degree", "tier"],
        csv_columns=["dimension", "degree", "crosses_network"],
    )
    domain = machine.topology.scale_up_link
    degrees = {
        "tp": layout.tp,
        "cp": layout.cp,
        "ep": layout.ep,
        "dp": layout.dp * layout.cp,
        "pp": layout.pp,
    }
    # the gradients are reduced over the DP x CP ranks: say so, so that it does not read as another DP degree
    labels = {"dp": f"DP x CP ({layout.dp} x {layout.cp}, gradients)" if layout.cp > 1 else "DP"}
    for name, degree in degrees.items():
        if degree <= 1:
            continue
        crosses = plan.crosses_network[name]
        tier = f"network ({machine.system.nics_per_node} x {units.format_bit_rate(machine.system.nic_bytes_per_s)})"
        table.add(
            labels.get(name, name.upper()),
            degree,
            tier if crosses else f"{domain} (inside the scale-up domain)",
        )
    return table


def model_assumptions(workload: Workload, machine: Machine, efficiency: Efficiency) -> list[str]:
    notes = [
        f"attention FLOPs: {ATTENTION_CONVENTION_NAMES[workload.attention]} for MFU; the step time runs "
        + (
            "flash attention's causal half"
            if workload.flash_attention
            else "eager attention: the full s^2 scores as batched GEMMs, stored and moved through HBM"
        ),
        f"efficiency profiles: {'; '.join(efficiency.notes)}",
        f"framework {efficiency.framework}: {efficiency.host_layer_s * 1e6:,.0f} us of host time per layer forward "
        "(a floor under the GPU time; backward x2, full recompute +1), "
        f"{efficiency.collective_overhead_s * 1e6:,.0f} us per TP/CP/EP collective",
        f"GEMMs: the best tile's asymptote is {efficiency.gemm_peak_fraction:.0%} of the 16-bit peak, an "
        f"8192^3 GEMM reaches {large_gemm_fraction(machine.accelerator, efficiency, 'bf16'):.0%}, "
        + (
            f"tiles run in waves of {machine.accelerator.compute_units} "
            f"{'CUs' if machine.accelerator.vendor == 'amd' else 'SMs'}"
            if machine.accelerator.compute_units
            else "tiles spread evenly (no SM or CU count in the catalog)"
        )
        + f" (+{efficiency.gemm_latency_s * 1e6:.0f} us each); {efficiency.framework}'s flash attention {efficiency.attention_fraction:.0%}, "
        f"element-wise kernels {efficiency.hbm_fraction:.0%} of HBM bandwidth",
        f"overlap ({efficiency.framework} facts): {efficiency.grad_reduce_overlap:.0%} of the DP gradient "
        f"reduction may hide under the last backward, {efficiency.param_gather_overlap:.0%} of a sharded "
        "optimizer's weight gather under the next forward; ZeRO-3/FSDP gathers one layer ahead, TP "
        "input-gradient reductions under the weight-gradient GEMMs",
        _accumulation_note(workload, efficiency),
        memory_note(workload.memory_shape()),
        *machine.assumptions,
    ]
    return notes


def _accumulation_note(workload: Workload, efficiency: Efficiency) -> str:
    moved = efficiency.grad_accumulation_bytes(workload.precision)
    where = (
        f"a pass of its own moves {moved:.0f} B per parameter of an unsharded gradient every micro-batch"
        if moved
        else "no pass of its own (the stack accumulates inside its weight-gradient GEMMs, or only gradient "
        "shards accumulate, or its gradients are the fp32 ones the optimizer reads)"
    )
    return f"gradient accumulation ({efficiency.framework} facts, {workload.precision}): {where}"


def search_rule(inputs: PerfInputs) -> str:
    """The one rule for layout knobs, the same for flags and the scenario file: a knob the scenario gives
    (``[training] micro_batch_size``, ``[parallelism]`` keys, or their flags) is fixed, one it leaves out is
    searched; which is which, for this run."""
    layout = inputs.layout
    given = layout.model_fields_set if layout is not None else set()
    fixed: list[str] = []
    searched: list[str] = []
    if inputs.micro_batch_given:
        fixed.append(f"micro-batch size {inputs.micro_batch_size}")
    else:
        searched.append("micro-batch size")
    for name in DEGREES:
        (
            fixed.append(f"{name} {getattr(layout, name)}")
            if layout is not None and name in given
            else searched.append(name)
        )
    if layout is not None and "recompute" in given:
        fixed.append(f"recompute {recompute_text(layout)}")
    else:
        searched.append("recompute")
    if layout is not None and "sequence_parallel" in given:
        fixed.append(f"sequence parallel {layout.sequence_parallel}")
    else:
        searched.append("sequence parallel")
    if layout is not None and given & {"zero", "fsdp", "zero_impl"}:
        fixed.append(f"sharding {sharding_of(layout)}")
    else:
        searched.append("sharding")
    return (
        "layout knobs, flags and file alike: given ones are fixed, left-out ones searched; "
        f"fixed: {', '.join(fixed) or 'none'}; searched: {', '.join(searched) or 'none'}"
    )


def days(value: float) -> str:
    return f"{value / units.SECONDS_PER_DAY:,.1f} d"


def memory_table(stage: StageMemory, hbm_bytes: float) -> Table:
    """The memory per GPU of a pipeline stage (the peak one), part by part, in GiB and as a share of HBM."""
    table = Table(
        f"memory per GPU ({stage.stage} pipeline stage, the peak)",
        ["part", "GiB", "share of HBM"],
        csv_columns=["part", "bytes", "share_of_hbm"],
    )
    for name, value in stage.parts().items():
        if value:
            table.add(
                name,
                shown(value, lambda v: f"{v / 2**30:,.2f}", unit="bytes"),
                shown(value / hbm_bytes, units.format_percent),
            )
    table.add(
        "total",
        shown(stage.total_bytes, lambda v: f"{v / 2**30:,.2f}", unit="bytes"),
        shown(stage.total_bytes / hbm_bytes, units.format_percent),
    )
    return table
