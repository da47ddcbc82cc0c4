"""``mfukit plan``: search every parallel layout for the fastest step on a cluster, or the smallest cluster
that meets a deadline, and (``--report``) write the plan report."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import click

from mfukit import units
from mfukit.catalog.resolved import load_resolved
from mfukit.cli.common import (
    emit,
    format_option,
    progress,
    report_option,
    scenario_argument,
    scenario_options,
)
from mfukit.cli.perf_views import (
    PERF_FLAGS,
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
from mfukit.cli.render import Format
from mfukit.core.files import write_text_atomic
from mfukit.core.results import Output, Quantity, Table, shown
from mfukit.errors import InputError
from mfukit.perf.efficiency import beyond_measured, efficiency_for
from mfukit.perf.estimate import plan_memory, plan_shape
from mfukit.perf.inputs import PerfInputs, perf_inputs, search_space
from mfukit.perf.layout_table import Row, every_layout
from mfukit.perf.layouts import BATCH_ROUNDING_FRAC
from mfukit.perf.memory import MemoryEstimate
from mfukit.perf.network import NetworkCheck, network_check
from mfukit.perf.planner import REASONS, Objective, Plan, SearchResult, SearchSpace, search
from mfukit.perf.scaling import scaling_counts, smallest_count

REASON_NAMES = {
    "divisibility": "degrees do not divide heads, layers, sequence, experts or GPUs",
    "batch": "dp x micro-batch does not divide the global batch "
    f"(within {units.format_percent(BATCH_ROUNDING_FRAC, 0)} if in tokens)",
    "schedule": "interleaved pipeline, micro-batches not a multiple of pp",
    "compatibility": "DeepSpeed ZeRO-2/3 with a pipeline",
    "memory": "does not fit in HBM",
    "headroom": "runs in HBM, but not with its allocator cache outside the HBM headroom (cluster.hbm_headroom)",
}


@click.command("plan")
@scenario_argument
@scenario_options(*PERF_FLAGS, "deadline", "storage", "failure_model", "checkpoint_mode", "goodput")
@click.option(
    "--objective",
    type=click.Choice(["mfu", "time"]),
    default="mfu",
    show_default=True,
    help="Rank by MFU or by time to train (they differ only across GPU counts).",
)
@click.option(
    "--top", "top_k", type=click.IntRange(1, 50), default=5, show_default=True, help="Plans to show."
)
@click.option(
    "--scaling/--no-scaling",
    default=None,
    help="Also find the best layout at GPU counts from 1/8 to 2x (default: with --report).",
)
@click.option(
    "--all",
    "all_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also write every evaluated layout at the planned GPU count, one row each, to this file: CSV "
    "(.csv) or JSON lines (.jsonl), best MFU first.",
)
@report_option
@format_option
def plan(
    scenario_path: Path | None,
    overrides: dict[str, Any],
    objective: Objective,
    top_k: int,
    scaling: bool | None,
    all_path: Path | None,
    report_dir: Path | None,
    fmt: Format,
) -> int:
    """Search tp, pp, vpp, dp, cp, ep, micro-batch, recompute, sharding and sequence parallelism for the
    fastest step; with --deadline and no --gpus, the smallest cluster that meets it.

    Example: mfukit plan examples/llama3-70b_h100x1024.toml --report out/
    """
    if all_path is not None and all_path.suffix.lower() not in ALL_FORMATS:
        raise InputError(
            "names no format I can write",
            field="--all",
            value=str(all_path),
            hint="end the file name in .csv (CSV) or .jsonl (JSON lines)",
        )
    scene = load_resolved(scenario_path, overrides)
    inputs = perf_inputs(scene)
    space = search_space(inputs)
    workload, system, accelerator = inputs.workload, inputs.system, inputs.accelerator
    notes: list[str] = []
    with progress("searching layouts") as bar:
        count = _count_for_deadline(inputs, space, notes) if inputs.num_gpus is None else inputs.num_gpus
        result = search(
            workload,
            system,
            accelerator,
            [count],
            space=space,
            objective=objective,
            tokens=inputs.tokens,
            top_k=top_k,
            progress=bar,
            headroom_bytes=inputs.hbm_headroom_bytes,
        )
        curve: dict[int, Plan | None] = {count: result.best_per_count[count]}
        if scaling or (scaling is None and report_dir is not None):
            for other in scaling_counts(count, workload, system, space):
                if other != count:
                    found = search(
                        workload,
                        system,
                        accelerator,
                        [other],
                        space=space,
                        tokens=inputs.tokens,
                        top_k=1,
                        headroom_bytes=inputs.hbm_headroom_bytes,
                    )
                    curve[other] = found.best_per_count[other]
                    result.search_s += found.search_s
    output, memory, network = _output(inputs, result, count, curve, notes)
    if all_path is not None:
        rows = list(every_layout(workload, system, accelerator, count, space))
        write_text_atomic(all_path, ALL_FORMATS[all_path.suffix.lower()](rows))
        output.result["all_layouts"] = {"path": str(all_path), "rows": len(rows)}
        output.files.append(all_path)
    if report_dir is not None and result.plans and memory is not None and network is not None:
        from mfukit.cli.plan_report import plan_report

        output.files.append(plan_report(scene, inputs, result, curve, memory, network, output, report_dir))
    return emit(output, fmt)


def _csv(rows: list[Row]) -> str:
    if not rows:
        return ""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def _json_lines(rows: list[Row]) -> str:
    return "".join(json.dumps(row) + "\n" for row in rows)


ALL_FORMATS = {".csv": _csv, ".jsonl": _json_lines}


def _count_for_deadline(inputs: PerfInputs, space: SearchSpace, notes: list[str]) -> int:
    if inputs.deadline_s is None or inputs.tokens is None:
        raise InputError(
            "needs the GPU count, or a deadline and the training tokens",
            source=inputs.source,
            field="cluster.num_gpus",
            hint='give --gpus N (or --nodes N), or --deadline "14d" with --tokens "1.4T"',
        )
    typical = inputs.accelerator.typical_mfu.value if inputs.accelerator.typical_mfu else 0.4
    found = smallest_count(
        inputs.workload,
        inputs.system,
        inputs.accelerator,
        tokens=inputs.tokens,
        deadline_s=inputs.deadline_s,
        space=space,
        goodput=lambda count, plan: 1.0,
        mfu_guess=typical,
    )
    if found.chosen is None:
        raise InputError(
            "; ".join(found.why_not) or "no GPU count meets the deadline",
            source=inputs.source,
            field="training.deadline",
            hint="extend the deadline, or give --gpus N to see the time on N GPUs",
        )
    notes.append(
        f"{found.chosen.num_gpus:,} GPUs: the smallest of {len(found.evaluated)} counts searched whose best layout "
        f"trains {units.format_count(inputs.tokens)} tokens in the deadline (failure-free; `mfukit size` adds goodput)"
    )
    return found.chosen.num_gpus


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


def _output(
    inputs: PerfInputs, result: SearchResult, count: int, curve: dict[int, Plan | None], notes: list[str]
) -> tuple[Output, MemoryEstimate | None, NetworkCheck | None]:
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
