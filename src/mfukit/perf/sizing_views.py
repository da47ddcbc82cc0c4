"""What ``mfukit size`` shows of a sizing: the cluster, its layout, memory, network, days, energy and cost,
with the warnings that qualify them and the assumptions behind them, as the command's output."""

from __future__ import annotations

import math
from typing import Any

from mfukit import units
from mfukit.comm.topology import scale_out_switch
from mfukit.core.results import Output, Table, shown
from mfukit.perf.activations import KERNELS_NAMES
from mfukit.perf.memory import attention_names, default_overheads
from mfukit.perf.model_states import SHARDING_NAMES
from mfukit.perf.sizing import (
    EXPOSED_COMM_BUDGET,
    Candidate,
    HidingLayout,
    Sizing,
    SizingInputs,
    layout_that_hides,
)
from mfukit.perf.views import layout_json, memory_table, recompute_text


def sizing_output(sizing: Sizing, goodput_source: str, rule: str) -> Output:
    """The output of ``size``: ``goodput_source`` says how the goodput was found, ``rule`` how the layout
    was chosen. Exit 1 when no layout fits or the cluster misses the deadline."""
    inputs, chosen = sizing.inputs, sizing.chosen
    predicted = inputs.mfu_source.startswith("performance model")
    main = _head_table(sizing, goodput_source, predicted=predicted)
    result = _head_json(sizing, goodput_source)
    if chosen is None:
        main.add("layout", "none fits: " + "; ".join(sizing.why_not))
        return Output(
            schema="size/1",
            inputs=_echo(inputs),
            result=result,
            warnings=list(sizing.why_not),
            tables=[main],
            exit_code=1,
        )
    _add_cluster_rows(main, sizing, chosen)
    hiding = layout_that_hides(sizing)
    result.update(_cluster_json(sizing, chosen, hiding))
    return Output(
        schema="size/1",
        inputs=_echo(inputs),
        result=result,
        assumptions=_assumptions(sizing, chosen, goodput_source, rule, predicted=predicted),
        warnings=_warnings(sizing, chosen, hiding, predicted=predicted),
        tables=[main, memory_table(chosen.memory.peak, inputs.accelerator.hbm_bytes)],
        exit_code=1 if sizing.meets_deadline is False else 0,
    )


def _fmt_days(value: float) -> str:
    return f"{value:,.1f} d"


def _fmt_int(value: float) -> str:
    return f"{value:,.0f}"


def _row(table: Table, name: str, value: float | int | None, formatter: Any, missing: str = "—") -> None:
    table.add(name, shown(value, formatter, missing))


def _head_table(sizing: Sizing, goodput_source: str, *, predicted: bool) -> Table:
    """The rows every sizing has: the FLOPs, the rate they need, the MFU, the goodput and the GPUs."""
    inputs = sizing.inputs
    main = Table(
        f"size: {inputs.model.display_name or inputs.model.name} on {inputs.accelerator.name}",
        ["quantity", "value"],
    )
    main.csv_columns = ["quantity", "value"]
    _row(main, "total training FLOPs", sizing.total_train_flops, units.format_flops)
    _row(
        main,
        "aggregate model FLOP/s needed",
        sizing.required_flops_per_s,
        lambda v: f"{v / 1e15:,.1f} PFLOP/s",
        "no deadline",
    )
    _row(main, "MFU (performance model)" if predicted else "assumed MFU", inputs.mfu, units.format_percent)
    _row(
        main,
        "goodput (expected ETTR)"
        if "ETTR" in goodput_source and "flat" not in goodput_source
        else "goodput allowance",
        inputs.goodput,
        units.format_percent,
    )
    _row(main, "GPUs the deadline needs", sizing.gpus_min, lambda v: f"{math.ceil(v):,}", "no deadline")
    return main


def _head_json(sizing: Sizing, goodput_source: str) -> dict[str, Any]:
    inputs = sizing.inputs
    return {
        "total_train_flops": sizing.total_train_flops,
        "flops_per_token": sizing.flops_per_token,
        "required_flops_per_s": sizing.required_flops_per_s,
        "tokens_per_s_required": inputs.tokens / inputs.deadline_s if inputs.deadline_s else None,
        "mfu": inputs.mfu,
        "mfu_source": inputs.mfu_source,
        "goodput": inputs.goodput,
        "goodput_source": goodput_source,
        "gpus_min": sizing.gpus_min,
        "gpus": sizing.gpus,
        "nodes": sizing.nodes,
        "feasible": sizing.chosen is not None,
    }


def _add_cluster_rows(main: Table, sizing: Sizing, chosen: Candidate) -> None:
    """The rows of a cluster that fits: its size, layout, time, memory, network, energy and cost."""
    system, hbm = sizing.inputs.system, sizing.inputs.accelerator.hbm_bytes
    layout, traffic = chosen.layout, sizing.traffic
    _row(main, "GPUs", sizing.gpus, _fmt_int)
    _row(main, "nodes", sizing.nodes, _fmt_int)
    main.add("layout", f"TP {layout.tp} x PP {layout.pp} x DP {layout.dp} (CP {layout.cp}, EP {layout.ep})")
    _row(main, "micro-batches per step", chosen.num_microbatches, _fmt_int)
    _row(main, "wall-clock days", sizing.days, _fmt_days)
    _row(main, "GPU-hours", sizing.gpu_hours, _fmt_int)
    _row(main, "memory per GPU (peak)", chosen.memory.peak.total_bytes, units.format_bytes)
    main.add("fits in HBM", f"{'yes' if chosen.memory.fits(hbm) else 'no'} ({units.format_bytes(hbm)})")
    if traffic is not None:
        _row(
            main,
            "DP traffic per GPU per step (inter-node)",
            traffic.inter_node_bytes_per_step,
            units.format_bytes_si,
        )
        _row(
            main,
            "inter-node rate to hide it, per GPU",
            traffic.inter_node_bytes_per_s_required,
            units.format_bit_rate,
        )
        _row(
            main,
            f"NICs per node ({units.format_bit_rate(system.nic_bytes_per_s)}, of {system.nics_per_node} cages)",
            sizing.recommended_nics_per_node,
            _fmt_int,
        )
        _row(main, "exposed gradient traffic per step", sizing.exposed_comm_s, units.format_duration)
    _row(main, "energy", sizing.energy_kwh, units.format_energy_kwh, "no published power figure")
    _row(main, "cost", sizing.cost_usd, units.format_usd, "give --usd-per-gpu-hour")


def _warnings(
    sizing: Sizing, chosen: Candidate, hiding: HidingLayout | None, *, predicted: bool
) -> list[str]:
    """What qualifies a cluster that fits: a missed deadline, exposed traffic, the fabric, the bubble, the
    model's notes and the rounding of the GPU count."""
    inputs, system = sizing.inputs, sizing.inputs.system
    warnings: list[str] = []
    if sizing.meets_deadline is False:
        warnings.append(f"{sizing.gpus} GPUs take {sizing.days:.1f} days, past the deadline")
    if not sizing.fabric_hides_traffic:
        warnings.append(_exposed_note(sizing, hiding))
    _, fabric_note = scale_out_switch(
        system, sizing.nodes * system.nics_per_node, rail_groups=system.nics_per_node
    )
    if fabric_note is not None:
        warnings.append(f"network: {fabric_note}")
    bubble = sizing.pipeline_bubble_frac
    if bubble is not None and bubble > 0.1 and not predicted:  # the model's MFU already pays the bubble
        warnings.append(
            f"the pipeline bubble (p-1)/(v·m) is {bubble:.0%} with {chosen.num_microbatches} micro-batches; the "
            "assumed MFU may not hold: raise the global batch, interleave (--vpp) or fix --pp lower"
        )
    warnings.extend(inputs.model_warnings)
    if inputs.global_batch_sequences is None:
        warnings.append("no global batch given: DP is not capped by it (give --global-batch-tokens)")
    elif sizing.gpus_min is not None and sizing.gpus > 1.05 * sizing.gpus_min:
        warnings.append(
            f"whole nodes and a layout that runs the global batch ({inputs.global_batch_sequences:,} sequences "
            f"in whole micro-batches per DP rank) round {sizing.gpus_min:,.0f} GPUs up to {sizing.gpus:,}"
        )
    return warnings


def _cluster_json(sizing: Sizing, chosen: Candidate, hiding: HidingLayout | None) -> dict[str, Any]:
    inputs, system, traffic = sizing.inputs, sizing.inputs.system, sizing.traffic
    peak, hbm = chosen.memory.peak, inputs.accelerator.hbm_bytes
    watts, power_source = sizing.watts_per_gpu
    return {
        "layout": layout_json(chosen.layout),
        "num_microbatches": chosen.num_microbatches,
        "days": sizing.days,
        "wall_s": sizing.wall_s,
        "meets_deadline": sizing.meets_deadline,
        "gpu_hours": sizing.gpu_hours,
        "memory_per_gpu_bytes": peak.total_bytes,
        "memory_stage": peak.stage,
        "memory_breakdown_bytes": {
            name.replace(" ", "_").lower(): value for name, value in peak.parts().items()
        },
        "hbm_bytes": hbm,
        "fits": chosen.memory.fits(hbm),
        "sharding": chosen.memory.sharding,
        "gradient_traffic_pattern": traffic.pattern if traffic else None,
        "gradient_bytes_per_step_per_gpu": traffic.bytes_per_step if traffic else None,
        "inter_node_bytes_per_step_per_gpu": traffic.inter_node_bytes_per_step if traffic else None,
        "inter_node_bytes_per_s_required": traffic.inter_node_bytes_per_s_required if traffic else None,
        "inter_node_bytes_per_s_required_per_node": (
            traffic.inter_node_bytes_per_s_required * system.gpus_per_node if traffic else None
        ),
        "overlap_window_s": traffic.window_s if traffic else None,
        "recommended_nics_per_node": sizing.recommended_nics_per_node,
        "nics_needed_per_node": sizing.nics_needed_per_node,
        "fabric_hides_traffic": sizing.fabric_hides_traffic,
        "layout_that_hides_traffic": layout_json(hiding.candidate.layout) if hiding else None,
        "nics_to_hide_fully": sizing.nics_to_hide_fully,
        "nics_per_node": system.nics_per_node,
        "exposed_comm_s_per_step": sizing.exposed_comm_s,
        "step_s": sizing.step_s,
        "pipeline_bubble_frac": sizing.pipeline_bubble_frac,
        "power_w_per_gpu": watts,
        "power_source": power_source,
        "pue": inputs.pue,
        "energy_kwh": sizing.energy_kwh,
        "cost_usd": sizing.cost_usd,
    }


def _assumptions(
    sizing: Sizing, chosen: Candidate, goodput_source: str, rule: str, *, predicted: bool
) -> list[str]:
    inputs, layout = sizing.inputs, chosen.layout
    system, accelerator = inputs.system, inputs.accelerator
    watts, power_source = sizing.watts_per_gpu
    overheads = default_overheads()
    return [
        rule,
        f"MFU {inputs.mfu:.1%} from {inputs.mfu_source}"
        + (
            ""
            if predicted
            else "; constant across GPU counts"
            + (
                " (omit --mfu for the performance model's prediction)"
                if inputs.mfu_source.startswith("--mfu")
                else ""
            )
        ),
        f"goodput {inputs.goodput:.3f} of wall-clock: {goodput_source}",
        f"attention FLOPs: {inputs.attention} convention (--attention-flops)",
        f"memory: {SHARDING_NAMES[chosen.memory.sharding]}, recompute {recompute_text(layout)}, sequence parallel "
        f"{layout.sequence_parallel}, {KERNELS_NAMES['fused']}, "
        f"{attention_names(inputs.flash_attention, inputs.attention_dropout, inputs.hidden_dropout)}; "
        "CUDA context "
        f"{units.format_bytes(float(overheads.cuda_context.value))}, NCCL "
        f"{units.format_bytes(float(overheads.nccl_buffer_per_communicator.value))} per communicator, "
        f"fragmentation {float(overheads.allocator_fragmentation.value):.0%}",
        "gradient traffic hides only behind the last micro-batch's backward (and the first one's forward for the "
        f"weight all-gather); NICs recommended so that at most {EXPOSED_COMM_BUDGET:.0%} of a step stays exposed",
        f"energy: {power_source} = {units.format_power(watts)} per GPU for the whole wall-clock, PUE {inputs.pue}"
        if watts is not None
        else f"energy: not computed, the catalog has no power figure for {system.name} or {accelerator.name}",
    ]


def _exposed_note(sizing: Sizing, hiding: HidingLayout | None) -> str:
    """What the node's NICs leave exposed, what hiding it would take, and the layout change that does."""
    system, layout = sizing.inputs.system, sizing.chosen.layout if sizing.chosen else None
    exposed = sizing.exposed_comm_s or 0.0
    share = (
        f" ({exposed / sizing.step_s:.0%} of a {units.format_duration(sizing.step_s)} step)"
        if sizing.step_s
        else ""
    )
    text = (
        f"the fabric cannot hide the gradient traffic: all {system.nics_per_node} NIC cages of {system.name} "
        f"leave {units.format_duration(exposed)} exposed per step{share}; keeping it within "
        f"{EXPOSED_COMM_BUDGET:.0%} of a step would take {sizing.nics_needed_per_node} NICs per node"
    )
    if hiding is not None and layout is not None:
        new = hiding.candidate.layout
        return (
            f"{text}; TP {new.tp} x PP {new.pp} x DP {new.dp} instead of TP {layout.tp} x PP {layout.pp} x DP "
            f"{layout.dp} hides it on the same GPUs ({units.format_duration(hiding.exposed_s)} exposed; fix it "
            f"with --tp {new.tp} --pp {new.pp})"
        )
    return f"{text}; no layout of {sizing.gpus:,} GPUs that fits hides it: faster NICs or a larger global batch do"


def _echo(inputs: SizingInputs) -> dict[str, Any]:
    return {
        "model": inputs.model.name,
        "tokens": inputs.tokens,
        "deadline_s": inputs.deadline_s,
        "accelerator": inputs.accelerator.name,
        "system": inputs.system.name,
        "num_gpus": inputs.num_gpus,
        "seq_len": inputs.seq_len,
        "global_batch_sequences": inputs.global_batch_sequences,
        "micro_batch_size": inputs.micro_batch_size,
        "precision": inputs.precision,
        "fixed_layout": inputs.fixed,
        "usd_per_gpu_hour": inputs.usd_per_gpu_hour,
    }
