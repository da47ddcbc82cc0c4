"""What ``mfukit plan`` shows: the top layouts, why the others were rejected, the network check of the
best, and the command's output (its JSON result, assumptions and warnings)."""

from __future__ import annotations

from typing import Any

from mfukit import units
from mfukit.core.results import Output, Quantity, Table, shown
from mfukit.perf.efficiency import beyond_measured, efficiency_for
from mfukit.perf.estimate import plan_memory, plan_shape
from mfukit.perf.inputs import PerfInputs
from mfukit.perf.layouts import BATCH_ROUNDING_FRAC
from mfukit.perf.memory import MemoryEstimate
from mfukit.perf.network import NetworkCheck, network_check
from mfukit.perf.plan_search import PlanSearch
from mfukit.perf.planner import REASONS, Plan, SearchResult
from mfukit.perf.views import (
    breakdown_table,
    days,
    layout_json,
    layout_text,
    model_assumptions,
    options_text,
    plan_json,
    search_rule,
    tiers_table,
)

REASON_NAMES = {
    "divisibility": "degrees do not divide heads, layers, sequence, experts or GPUs",
    "batch": "dp x micro-batch does not divide the global batch "
    f"(within {units.format_percent(BATCH_ROUNDING_FRAC, 0)} if in tokens)",
    "schedule": "interleaved pipeline, micro-batches not a multiple of pp",
    "compatibility": "DeepSpeed ZeRO-2/3 with a pipeline",
    "memory": "does not fit in HBM",
    "headroom": "runs in HBM, but not with its allocator cache outside the HBM headroom (cluster.hbm_headroom)",
}


def compact_layout(plan: Plan) -> str:
    layout = plan.layout
    sp = "+SP" if layout.sequence_parallel and layout.tp > 1 else ""
    text = (
        f"TP{layout.tp}{sp} PP{layout.pp}" + (f"v{layout.vpp}" if layout.vpp > 1 else "") + f" DP{layout.dp}"
    )
    if layout.cp > 1:
        text += f" CP{layout.cp}"
    if layout.ep > 1:
        text += f" EP{layout.ep}"
    if layout.first_stage_layers is not None:
        text += f" ({layout.first_stage_layers}/{layout.last_stage_layers} edge)"
    return text


def compact_mfu(plan: Plan) -> str:
    """``44.0 % (38-48)``; ``*`` marks a plan beyond every measured run of its GPU family and stack, or in a
    regime no measured run shares (its interval from past extrapolations)."""
    text = units.format_percent(plan.mfu)
    if plan.mfu_interval is None or plan.interval is None:
        return text
    low, high = plan.mfu_interval
    return f"{text} ({low * 100:.0f}-{high * 100:.0f}){'*' if plan.beyond_measured else ''}"


def plans_table(plans: list[Plan], title: str) -> Table:
    table = Table(
        title,
        ["#", "layout", "options", "mbs x m", "MFU [80 %]", "step", "tok/s/GPU", "GiB", "days"],
        csv_columns=[
            "rank",
            "layout",
            "options",
            "micro_batches",
            "mfu",
            "step_time_s",
            "tokens_per_s_per_gpu",
            "memory_per_gpu_bytes",
            "time_to_train_s",
        ],
    )
    for rank, plan in enumerate(plans, start=1):
        table.add(
            rank,
            compact_layout(plan),
            Quantity(
                options_text(plan.layout, sequence_parallel=False),
                options_text(plan.layout, sequence_parallel=False, compact=True),
            ),
            f"{plan.micro_batch_size} x {plan.num_microbatches}",
            Quantity(plan.mfu, compact_mfu(plan)),
            shown(plan.step_time_s, lambda v: f"{v:,.2f} s"),
            shown(plan.tokens_per_s_per_gpu, lambda v: f"{v:,.0f}"),
            shown(plan.memory_bytes, lambda v: f"{v / 2**30:,.1f}"),
            shown(plan.time_to_train_s, lambda v: f"{v / units.SECONDS_PER_DAY:,.1f}", "—"),
        )
    return table


def rejected_table(result: SearchResult) -> Table:
    table = Table("layouts rejected, by reason", ["reason", "layouts"], csv_columns=["reason", "layouts"])
    for reason in REASONS:
        table.add(REASON_NAMES[reason], result.rejected[reason])
    table.add("evaluated by the model", result.configs_evaluated)
    return table


def network_table(check: NetworkCheck) -> Table:
    table = Table("network check (best layout)", ["quantity", "value"], csv_columns=["quantity", "value"])
    table.add("DP traffic pattern", check.pattern)
    table.add("DP bytes per GPU per step", shown(check.bytes_per_step, units.format_bytes_si))
    table.add("  of which cross the NIC", shown(check.inter_node_bytes_per_step, units.format_bytes_si))
    table.add("  as NCCL runs it (comm model)", check.inter_node_algorithm)
    table.add("NIC rate that hides it, per GPU", shown(check.required_bytes_per_s, units.format_bit_rate))
    table.add("NIC rate available, per GPU", shown(check.available_bytes_per_s, units.format_bit_rate))
    table.add("NICs per node to hide it", shown(check.nics_to_hide, lambda v: f"{v:,.0f}"))
    table.add(
        "exposed communication per step", shown(check.exposed_comm_s, lambda v: f"{v:,.3f} s", unit="s")
    )
    return table


def plan_output(
    inputs: PerfInputs, found: PlanSearch
) -> tuple[Output, MemoryEstimate | None, NetworkCheck | None]:
    """The output of ``plan`` (exit 1 when nothing fits or the best misses the deadline), and the memory
    and network check of the best layout (None when nothing fits)."""
    result, count, curve, notes = found.result, found.count, found.curve, found.notes
    workload, accelerator = inputs.workload, inputs.accelerator
    machine = result.machines[count]
    efficiency = efficiency_for(accelerator, workload.framework)
    hbm = accelerator.hbm_bytes
    name = inputs.model.display_name or inputs.model.name
    title = (
        f"plan: {name} on {count:,} x {accelerator.name}: top {len(result.plans)} of "
        f"{result.configs_evaluated:,} layouts ({result.search_s:.1f} s)"
    )
    echo = {
        "model": inputs.model.name,
        "accelerator": accelerator.name,
        "system": inputs.system.name,
        "num_gpus": count,
        "seq_len": workload.seq_len,
        "global_batch_sequences": workload.global_batch_sequences,
        "precision": workload.precision,
        "framework": workload.framework,
        "tokens": inputs.tokens,
        "deadline_s": inputs.deadline_s,
    }
    assumptions = [
        search_rule(inputs),
        *model_assumptions(workload, machine, efficiency),
        "MFU [80 %]: the prediction and its 80 % interval from the leave-one-source-out errors of comparable "
        "measured runs; layouts are ranked on the interval's lower bound (what the plan can count on), and * "
        "marks a plan above every measured run of its GPU family and stack, or in a regime none measured "
        "(docs/performance-model.md)",
    ]
    warnings = list(efficiency.uncalibrated_notes)
    result_json: dict[str, Any] = {
        "num_gpus": count,
        "feasible": bool(result.plans),
        "configs_evaluated": result.configs_evaluated,
        "configs_considered": result.configs_considered,
        "rejected": result.rejected,
        "search_s": result.search_s,
        "attention_flops_convention": workload.attention,
        "scaling": [
            {
                "num_gpus": number,
                "mfu": plan.mfu,
                "tokens_per_s": plan.tokens_per_s,
                "time_to_train_s": plan.time_to_train_s,
                "layout": layout_json(plan.layout),
            }
            for number, plan in sorted(curve.items())
            if plan is not None
        ],
    }
    tables = [plans_table(result.plans, title)]
    if not result.plans:
        result_json["plans"] = []
        warnings.append(f"{name} on {accelerator.name}: {result.nothing_fits(workload, count)}")
        return (
            Output(
                "plan/1",
                result_json,
                echo,
                assumptions,
                warnings,
                [*tables, rejected_table(result)],
                notes,
                exit_code=1,
            ),
            None,
            None,
        )
    memories = [plan_memory(workload, plan, machine.gpus_per_node) for plan in result.plans]
    best = result.plans[0]
    shape = plan_shape(workload, best, machine.gpus_per_node)
    check = network_check(workload.model, best, shape, machine)
    result_json["plans"] = [
        plan_json(p, m, workload, hbm) for p, m in zip(result.plans, memories, strict=True)
    ]
    result_json["network"] = check.as_json()
    for note in (best.batch_note(workload), beyond_measured(efficiency, best.mfu, workload.precision)):
        if note:
            warnings.append(f"#1: {note}")
    deadline = inputs.deadline_s
    if deadline is not None and best.time_to_train_s is not None:
        result_json["meets_deadline"] = best.time_to_train_s <= deadline
        if best.time_to_train_s > deadline:
            warnings.append(
                f"the best layout takes {days(best.time_to_train_s)} without failures, past the deadline"
            )
    tables += [
        breakdown_table(best, f"step-time breakdown of #1: {layout_text(best.layout)}"),
        rejected_table(result),
        tiers_table(best, machine),
        network_table(check),
    ]
    output = Output(
        schema="plan/1",
        inputs=echo,
        result=result_json,
        assumptions=assumptions,
        warnings=warnings,
        tables=tables,
        notes=notes,
        exit_code=1 if result_json.get("meets_deadline") is False else 0,
    )
    return output, memories[0], check
