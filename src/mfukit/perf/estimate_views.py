"""What ``mfukit estimate`` shows of one layout: step time, MFU, HFU, throughput and memory, with the
warnings that qualify them, as the command's output."""

from __future__ import annotations

from typing import Any

from mfukit import units
from mfukit.core.results import Output, Table, shown
from mfukit.perf.efficiency import beyond_measured
from mfukit.perf.estimate import LayoutEstimate
from mfukit.perf.inputs import PerfInputs
from mfukit.perf.memory import MemoryEstimate
from mfukit.perf.model_states import sharding_of
from mfukit.perf.planner import Plan
from mfukit.perf.views import (
    breakdown_table,
    days,
    layout_json,
    layout_text,
    memory_table,
    mfu_with_interval,
    model_assumptions,
    options_text,
    plan_json,
    recompute_text,
    tiers_table,
)


def estimate_output(inputs: PerfInputs, result: LayoutEstimate, plan: Plan, memory: MemoryEstimate) -> Output:
    """The output of ``estimate`` for a layout that can be built (``plan`` and ``memory`` are ``result``'s;
    its peak stage's memory is shown as ``size`` shows it). Exit 1 when it does not fit."""
    workload, accelerator = inputs.workload, inputs.accelerator
    title = f"estimate: {inputs.model.display_name or inputs.model.name} on {result.num_gpus:,} x {accelerator.name}"
    echo = {
        "model": inputs.model.name,
        "accelerator": accelerator.name,
        "system": inputs.system.name,
        "num_gpus": result.num_gpus,
        "seq_len": workload.seq_len,
        "global_batch_sequences": workload.global_batch_sequences,
        "micro_batch_size": result.micro_batch_size,
        "precision": workload.precision,
        "framework": workload.framework,
        "layout": layout_json(result.layout),
    }
    assumptions = model_assumptions(workload, result.machine, result.efficiency)
    assumptions += result.assumed
    warnings = list(result.efficiency.uncalibrated_notes)
    hbm = accelerator.hbm_bytes
    fits = result.fits
    main = Table(title, ["quantity", "value"], csv_columns=["quantity", "value"])
    main.add("layout", layout_text(plan.layout))
    main.add("options", options_text(plan.layout))
    main.add("micro-batch x micro-batches", f"{plan.micro_batch_size} x {plan.num_microbatches}")
    rows: list[tuple[str, float | None, Any]] = [
        ("step time", plan.step_time_s, lambda v: units.format_duration(v, digits=3)),
        (f"MFU ({workload.attention} attention FLOPs)", plan.mfu, lambda _: mfu_with_interval(plan)),
        (f"HFU (recompute {recompute_text(plan.layout)})", plan.hfu, units.format_percent),
        ("model FLOP/s per GPU", plan.model_flops_per_s_per_gpu, units.format_flops_rate),
        ("tokens/s", plan.tokens_per_s, lambda v: f"{v:,.0f}"),
        ("tokens/s per GPU", plan.tokens_per_s_per_gpu, lambda v: f"{v:,.0f}"),
        ("time to train", plan.time_to_train_s, days),
        ("memory per GPU (peak)", plan.memory_bytes, units.format_bytes),
    ]
    for name, value, formatter in rows:
        main.add(name, shown(value, formatter))
    main.add("fits in HBM", f"{'yes' if fits else 'NO'} ({units.format_bytes(hbm)})")
    result_json = {"feasible": fits, "problems": [], **plan_json(plan, memory, workload, hbm)}
    supported = result.efficiency.shardings
    if supported is not None and sharding_of(plan.layout) not in supported:
        warnings.append(
            f"{workload.framework} does not implement {sharding_of(plan.layout)} (it runs "
            f"{', '.join(supported)}): the estimate prices that sharding as another stack would run it"
        )
    if plan.interval is not None and plan.interval.extrapolated:
        warnings.append(
            f"the prediction extrapolates beyond the measured runs ({plan.interval.reason}): its interval is "
            "the spread of past extrapolations; validate it on a short run (`mfukit validate` with your measured rows)"
        )
    for note in (plan.batch_note(workload), beyond_measured(result.efficiency, plan.mfu, workload.precision)):
        if note:
            warnings.append(note)
    if not fits:
        warnings.append(
            f"the layout needs {units.format_bytes(memory.required_bytes)} per GPU even with the allocator's cache "
            f"given back ({units.format_bytes(plan.memory_bytes)} with it), more than the "
            f"{units.format_bytes(hbm)} of {accelerator.name}: shard more (--zero 1/3, --fsdp), recompute "
            "(--recompute selective/full), raise tp or pp, or lower the micro-batch"
        )
    elif plan.memory_bytes > hbm - inputs.hbm_headroom_bytes:
        warnings.append(
            f"the layout needs {units.format_bytes(plan.memory_bytes)} per GPU, inside the "
            f"{units.format_bytes(inputs.hbm_headroom_bytes)} of headroom kept free of the "
            f"{units.format_bytes(hbm)} of {accelerator.name} (cluster.hbm_headroom): it may run out of memory "
            "on an allocator spike, NCCL buffers created on first use or an eval step; plan rejects such layouts"
        )
    return Output(
        schema="estimate/1",
        inputs=echo,
        result=result_json,
        assumptions=assumptions,
        warnings=warnings,
        tables=[
            main,
            breakdown_table(plan),
            memory_table(memory.peak, accelerator.hbm_bytes),
            tiers_table(plan, result.machine),
        ],
        exit_code=0 if fits else 1,
    )
