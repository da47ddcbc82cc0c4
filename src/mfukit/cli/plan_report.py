"""Build the plan report from a search: the tables ``mfukit plan`` prints, its charts, and the
fault-tolerance plan of the best layout (its step time from the performance model)."""

from __future__ import annotations

from pathlib import Path

from mfukit import units
from mfukit.catalog.resolved import ResolvedScenario
from mfukit.core.results import Output
from mfukit.ft.plan import plan_for_layout
from mfukit.ft.views import plan_section
from mfukit.perf.estimate import plan_memory
from mfukit.perf.inputs import PerfInputs
from mfukit.perf.memory import MemoryEstimate
from mfukit.perf.network import NetworkCheck
from mfukit.perf.plan_report import PlanReport, write_plan_report
from mfukit.perf.planner import Plan, SearchResult
from mfukit.perf.views import BREAKDOWN_NAMES, layout_text, options_text
from mfukit.report.html import Section


def plan_report(
    scene: ResolvedScenario,
    inputs: PerfInputs,
    result: SearchResult,
    curve: dict[int, Plan | None],
    memory: MemoryEstimate,
    network: NetworkCheck,
    output: Output,
    out_dir: Path,
) -> Path:
    best = result.plans[0]
    plans_table, breakdown, rejected, tiers, network_checked = output.tables[:5]
    ft, ft_note = plan_for_layout(scene, best)
    summary = [
        ("best layout", layout_text(best.layout)),
        ("options", options_text(best.layout)),
        ("MFU", units.format_percent(best.mfu)),
        ("step time", f"{best.step_time_s:,.2f} s"),
        ("memory per GPU", units.format_bytes(best.memory_bytes)),
    ]
    if best.time_to_train_s is not None:
        summary.append(
            ("time to train (no failures)", f"{best.time_to_train_s / units.SECONDS_PER_DAY:,.1f} days")
        )
    ft_section = Section("Fault tolerance", paragraphs=[ft_note])
    if ft is not None:
        summary.append(("expected ETTR", f"{ft.expected_at_optimum.ettr:.3f}"))
        ft_section = plan_section(ft)
    paragraph = (
        f"Each GPU moves {units.format_bytes_si(network.inter_node_bytes_per_step)} of data-parallel traffic "
        f"through its NIC per step ({network.pattern}); hiding it behind compute takes "
        f"{units.format_bit_rate(network.required_bytes_per_s)} per GPU, the node provides "
        f"{units.format_bit_rate(network.available_bytes_per_s)}. All exposed communication of the modelled step: "
        f"{network.exposed_comm_s:,.3f} s of {best.step_time_s:,.2f} s."
    )
    content = PlanReport(
        title=output.tables[0].title.split(":")[0] + ": " + (inputs.model.display_name or inputs.model.name),
        summary=summary,
        plans=result.plans,
        plans_table=plans_table,
        best_tables=[breakdown, rejected],
        memory=memory,
        plan_memories=[
            plan_memory(inputs.workload, plan, inputs.system.gpus_per_node) for plan in result.plans
        ],
        hbm_bytes=inputs.accelerator.hbm_bytes,
        deadline_s=inputs.deadline_s,
        scaling=curve,
        network_tables=[network_checked, tiers],
        network_paragraph=paragraph,
        breakdown_names=BREAKDOWN_NAMES,
        fault_tolerance=ft_section,
        assumptions=output.assumptions,
        warnings=output.warnings,
    )
    return write_plan_report(content, out_dir)
