"""What ``mfukit ft plan`` shows: its JSON result, its output with the warnings that qualify it, and its
report."""

from __future__ import annotations

from typing import Any

from mfukit.core.results import Output
from mfukit.ft.plan import FtPlan
from mfukit.ft.setup import FtInputs
from mfukit.ft.views import (
    category_table,
    deadline_check,
    duration,
    interval_text,
    interval_warning,
    plan_section,
    plan_table,
    policy_table,
    storage_warning,
)
from mfukit.report.html import Report, Section


def plan_result(result: FtPlan) -> dict[str, Any]:
    """The JSON result of ``ft plan``."""
    inputs = result.inputs
    run = inputs.run
    ckpt = inputs.checkpoint
    save = ckpt.save(inputs.mode)
    parts = run.restart
    expected = result.expected
    return {
        "failure_model": inputs.failures.model,
        "num_gpus": inputs.cluster.num_gpus,
        "num_nodes": inputs.cluster.num_nodes,
        "failure_rate_per_s": inputs.failures.failure_rate_per_s,
        "planned_stops_per_s": inputs.failures.planned_rate_per_s,
        "mtbf_s": run.mtbf_s,
        "young_interval_s": result.young_interval_s,
        "daly_interval_s": result.daly_interval_s,
        "young_interval_steps": inputs.steps(result.young_interval_s),
        "daly_interval_steps": inputs.steps(result.daly_interval_s),
        "recommended_interval_s": inputs.recommended_interval_s,
        "interval_s": run.interval_s,
        "interval_steps": inputs.steps(run.interval_s),
        "step_time_s": inputs.step_time_s,
        "ettr": expected.ettr,
        "ettr_at_optimum": result.expected_at_optimum.ettr,
        "ettr_first_order": result.first_order_ettr,
        "expected_interruptions": result.expected_interruptions,
        "expected_planned_stops": expected.planned_per_s * expected.wall_s,
        "checkpoint_mode": inputs.mode,
        "checkpoint_bytes": ckpt.checkpoint_bytes,
        "checkpoint_bytes_per_param": ckpt.bytes_per_param,
        "checkpoint_per_rank_bytes": ckpt.per_rank_bytes,
        "checkpoint_write_s": save.write_s,
        "checkpoint_read_s": ckpt.read_s,
        "blocking_s": run.blocking_s,
        "persist_s": run.persist_s,
        "saves": {mode: vars(cost) for mode, cost in ckpt.saves.items()},
        "restart_s": parts.typical_restart_s(parts.replacement_s * result.no_spare_probability),
        "restart_parts_s": {
            "detection": parts.detection_s,
            "replacement_without_spare": parts.replacement_s,
            "init": parts.init_s,
            "checkpoint_load": parts.load_s,
            "fast_forward": parts.fast_forward_s,
        },
        "hot_spares": parts.hot_spares,
        "recommended_hot_spares": result.recommended_hot_spares,
        "no_spare_probability": result.no_spare_probability,
        "work_s": run.work_s,
        "wall_clock_s": expected.wall_s,
        "lost_fraction": expected.lost_fractions,
        "gpu_hours_lost_per_day": result.gpu_hours_lost_per_day(),
        "storage_write_bytes_per_s": result.storage.write_bytes_per_s,
        "storage_write_duty": result.storage.duty,
        "storage_duty_limit": result.storage.duty_limit,
        "interval_at_storage_duty_limit_s": result.storage.interval_at_limit_s,
        "ettr_at_storage_duty_limit": result.storage.ettr_at_limit,
        "categories": [
            {
                "name": c.name,
                "component": c.component,
                "group": c.group,
                "per": c.per,
                "rate_per_1000_unit_days": c.rate_per_1000_unit_days,
                "job_rate_per_s": inputs.failures.rate_per_s(c),
                "needs_replacement": c.needs_replacement,
                "planned": c.planned,
                "overridden": c.overridden,
            }
            for c in inputs.failures.categories
        ],
        "policies": [
            {
                "mode": p.mode,
                "interval_s": p.interval_s,
                "interval_steps": p.interval_steps,
                "hot_spares": p.hot_spares,
                "blocking_s": p.blocking_s,
                "ettr": p.expected.ettr,
                "wall_clock_s": p.expected.wall_s,
                "recommended_interval": p.recommended,
            }
            for p in result.policies
        ],
    }


def plan_output(inputs: FtInputs, result: FtPlan, echo: dict[str, Any]) -> Output:
    """The output of ``ft plan`` (exit 1 when the run misses the deadline); ``echo``: its inputs."""
    output = Output(
        schema="ft.plan/1",
        inputs=echo,
        result=plan_result(result),
        assumptions=inputs.assumptions,
        warnings=list(inputs.warnings),
        tables=[plan_table(result), category_table(inputs), policy_table(result)],
    )
    if inputs.run.weibull_shape is not None:
        output.warnings.append(
            "the analytic model assumes exponential failures; use `mfukit ft simulate` for Weibull"
        )
    output.warnings.extend(
        w for w in (interval_warning(result), storage_warning(result.storage, inputs)) if w
    )
    deadline_check(inputs, result.expected.wall_s, output)
    return output


def plan_report(inputs: FtInputs, result: FtPlan, output: Output) -> Report:
    """The report of ``ft plan --report``."""
    return Report(
        title=f"Fault tolerance: {inputs.model.name} on {inputs.cluster.num_gpus:,} x {inputs.cluster.accelerator.name}",
        summary=[
            ("MTBF", duration(inputs.run.mtbf_s)),
            ("recommended interval", interval_text(inputs, inputs.recommended_interval_s)),
            ("expected ETTR", f"{result.expected.ettr:.3f}"),
            ("wall clock", duration(result.expected.wall_s)),
        ],
        sections=[
            plan_section(result),
            Section("Failure model", tables=[category_table(inputs)]),
        ],
        assumptions=output.assumptions,
        warnings=output.warnings,
    )
