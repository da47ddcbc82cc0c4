"""``mfukit size``: the minimum cluster that trains a model on D tokens by a deadline."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from mfukit import units
from mfukit.catalog.resolved import ResolvedScenario, resolve_scenario
from mfukit.cli.common import (
    emit,
    format_option,
    progress,
    report_option,
    scenario_argument,
    scenario_options,
)
from mfukit.cli.perf_views import PERF_FLAGS, layout_json, search_rule
from mfukit.cli.render import Format
from mfukit.comm.topology import scale_out_switch
from mfukit.core.results import Output, Table, shown
from mfukit.core.scenario import Scenario, load_scenario
from mfukit.errors import InputError
from mfukit.ft.goodput import expected_goodput
from mfukit.perf.activations import KERNELS_NAMES
from mfukit.perf.inputs import batch_rounding_frac, perf_inputs
from mfukit.perf.memory import SHARDING_NAMES, StageMemory, default_overheads
from mfukit.perf.sizing import (
    EXPOSED_COMM_BUDGET,
    HidingLayout,
    Sizing,
    SizingInputs,
    layout_that_hides,
    planning_layout,
)
from mfukit.perf.sizing import (
    size as size_cluster,
)
from mfukit.perf.sizing_model import GoodputOf, size_by_model

DEFAULT_GOODPUT = 0.9
START_MFU = 0.4  # where the performance model's count search starts when the GPU has no typical_mfu


@click.command("size")
@scenario_argument
@click.option(
    "--mfu",
    "mfu_text",
    default=None,
    help='Planning MFU, e.g. 0.45 or "45%" (default: the GPU\'s typical_mfu).',
)
@scenario_options(
    *PERF_FLAGS,
    "deadline",
    "goodput",
    "pue",
    "usd_per_gpu_hour",
    "failure_model",
    "failure_rate",
    "storage",
    "checkpoint_mode",
)
@report_option
@format_option
def size(
    scenario_path: Path | None,
    mfu_text: str | None,
    overrides: dict[str, Any],
    report_dir: Path | None,
    fmt: Format,
) -> int:
    """Minimum GPUs, layout, memory, network, days, energy and cost to train a model by a deadline.

    Example: mfukit size --model llama-65b --tokens 1.4T --deadline 14d --gpu a100-80gb-sxm
    --global-batch-tokens 4M
    """
    scenario = _flags_over_file(load_scenario(scenario_path, overrides), overrides)
    scene = resolve_scenario(scenario, scenario_path)
    inputs = _inputs(scene, mfu_text)
    goodput = _goodput_of(scene, given_as_flag="ft.goodput" in overrides)
    if mfu_text is None and inputs.global_batch_sequences is not None:
        perf = perf_inputs(scene)
        with progress("searching layouts per GPU count") as bar:
            sizing, goodput_source = size_by_model(inputs, perf, goodput, bar)
        rule = search_rule(perf)
    else:
        sizing, goodput_source = _size_at_constant_mfu(inputs, goodput)
        rule = (
            "layout at the assumed MFU: the fewest GPUs, then the least model parallelism; micro-batch size "
            f"{inputs.micro_batch_size} ("
            + (
                "given"
                if "micro_batch_size" in scenario.training.model_fields_set
                else "default, --micro-batch-size"
            )
            + "); given [parallelism] knobs fixed, the rest at the planning defaults below"
        )
    output = _output(sizing, goodput_source, rule)
    if report_dir is not None and sizing.chosen is not None:
        from mfukit.perf.sizing_report import write_sizing_report

        output.files.append(write_sizing_report(sizing, output, report_dir))
    return emit(output, fmt)


def _inputs(scene: ResolvedScenario, mfu_text: str | None) -> SizingInputs:
    scenario, source, model = scene.scenario, scene.source, scene.model
    system, accelerator, num_gpus = scene.system, scene.accelerator, scene.num_gpus
    training, cluster = scenario.training, scenario.cluster
    if training.tokens is None:
        raise InputError("is required", source=source, field="training.tokens", hint='e.g. --tokens "1.4T"')
    if training.tokens <= 0:
        raise InputError("must be positive", source=source, field="training.tokens", value=training.tokens)
    if training.deadline_s is None and num_gpus is None:
        raise InputError(
            "needs a deadline or a GPU count",
            source=source,
            field="training.deadline",
            hint='pass --deadline "14d" for the minimum cluster, or --gpus N for the time on N GPUs',
        )
    if mfu_text is not None:
        mfu = units.parse_fraction(mfu_text, field="--mfu")
        if mfu == 0:
            raise InputError("must be above 0", source="command line", field="--mfu", value=mfu_text)
        mfu_source = "--mfu (given)"
    elif accelerator.typical_mfu is not None:
        mfu = accelerator.typical_mfu.value
        mfu_source = (
            f"{accelerator.name} typical_mfu: {accelerator.typical_mfu.what} ({accelerator.typical_mfu.url})"
        )
        if training.global_batch_sequences is None:
            mfu_source += "; the performance model needs the global batch (--global-batch-tokens)"
    elif training.global_batch_sequences is not None:
        mfu, mfu_source = START_MFU, "performance model"  # only where the search starts
    else:
        raise InputError(
            f"{accelerator.name} has no typical_mfu in the catalog and no global batch is given",
            source=source,
            field="--mfu",
            hint="pass --global-batch-tokens for the performance model, or --mfu 0.4",
        )
    layout, fixed = planning_layout(scenario.parallelism)
    goodput = scenario.ft.goodput if scenario.ft.goodput is not None else DEFAULT_GOODPUT
    if goodput <= 0:
        raise InputError("must be above 0", source=source, field="ft.goodput", value=goodput)
    if training.deadline_s is not None and training.deadline_s <= 0:
        raise InputError(
            "must be positive", source=source, field="training.deadline", value=training.deadline_s
        )
    return SizingInputs(
        model=model,
        tokens=training.tokens,
        seq_len=training.seq_len,
        global_batch_sequences=training.global_batch_sequences,
        batch_rounding_frac=batch_rounding_frac(training),
        micro_batch_size=training.micro_batch_size,
        precision=training.precision,
        attention=training.attention_flops,
        system=system,
        accelerator=accelerator,
        mfu=mfu,
        mfu_source=mfu_source,
        goodput=goodput,
        deadline_s=training.deadline_s,
        num_gpus=num_gpus,
        layout=layout,
        fixed=fixed,
        pue=cluster.pue,
        usd_per_gpu_hour=cluster.usd_per_gpu_hour,
    )


FAILURE_FLAGS = ("ft.failure_model", "cluster.failure_rate_per_1000_node_days")


def _flags_over_file(scenario: Scenario, overrides: dict[str, Any]) -> Scenario:
    """A failure model given as a flag replaces the file's flat ``[ft] goodput`` (flags override the
    scenario: the expected ETTR takes the allowance's place); ``--goodput`` with one is a contradiction."""
    failure_flags = [field for field in FAILURE_FLAGS if field in overrides]
    if not failure_flags:
        return scenario
    if "ft.goodput" in overrides:
        raise InputError(
            "a flat goodput allowance and a failure model contradict each other",
            source="command line",
            field="--goodput",
            value=overrides["ft.goodput"],
            hint="give --goodput for a flat allowance, or --failure-model/--failure-rate for the expected ETTR",
        )
    if scenario.ft.goodput is None:
        return scenario
    return scenario.model_copy(update={"ft": scenario.ft.model_copy(update={"goodput": None})})


def _goodput_of(scene: ResolvedScenario, *, given_as_flag: bool) -> GoodputOf:
    """Goodput at a GPU count: the fault-tolerance model's expected ETTR when the scenario names a failure
    model (``[ft] failure_model``, ``--failure-rate``), else the flat allowance (``--goodput``, 0.9)."""
    ft, cluster, source = scene.ft, scene.cluster_section, scene.source
    failure_model = (
        "failure_model" in ft.model_fields_set or cluster.failure_rate_per_1000_node_days is not None
    )
    if ft.goodput is not None or not failure_model:
        flat = ft.goodput if ft.goodput is not None else DEFAULT_GOODPUT
        origin = (
            "--goodput"
            if given_as_flag
            else f"ft.goodput in {source}"
            if ft.goodput is not None
            else "default"
        )
        how = (
            f"flat goodput allowance {flat:g} ({origin}; name a failure model with --failure-model "
            "for the expected ETTR)"
        )
        return lambda count, step_time_s: (flat, how)

    def expected(count: int, step_time_s: float) -> tuple[float, str]:
        found = expected_goodput(scene, num_gpus=count, step_time_s=step_time_s or None)
        return found.ettr, found.how

    return expected


def _size_at_constant_mfu(inputs: SizingInputs, goodput: GoodputOf) -> tuple[Sizing, str]:
    """Size at the given MFU; with a failure model, re-sized once at the expected ETTR of the count found."""
    first = size_cluster(inputs)
    if first.chosen is None or first.step_s is None:
        return first, goodput(inputs.num_gpus or 1, 0.0)[1] if inputs.num_gpus else "flat goodput allowance"
    rate, how = goodput(first.gpus, first.step_s)
    if rate == inputs.goodput:
        return first, how
    return size_cluster(replace(inputs, goodput=rate)), how


def _fmt_days(value: float) -> str:
    return f"{value:,.1f} d"


def _fmt_int(value: float) -> str:
    return f"{value:,.0f}"


def memory_table(stage: StageMemory, hbm_bytes: float) -> Table:
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


def _output(sizing: Sizing, goodput_source: str, rule: str) -> Output:
    inputs = sizing.inputs
    system, accelerator = inputs.system, inputs.accelerator
    chosen = sizing.chosen
    main = Table(
        f"size: {inputs.model.display_name or inputs.model.name} on {accelerator.name}", ["quantity", "value"]
    )
    main.csv_columns = ["quantity", "value"]

    def row(name: str, value: float | int | None, formatter: Any, missing: str = "—") -> None:
        main.add(name, shown(value, formatter, missing))

    row("total training FLOPs", sizing.total_train_flops, units.format_flops)
    row(
        "aggregate model FLOP/s needed",
        sizing.required_flops_per_s,
        lambda v: f"{v / 1e15:,.1f} PFLOP/s",
        "no deadline",
    )
    predicted = inputs.mfu_source.startswith("performance model")
    row("MFU (performance model)" if predicted else "assumed MFU", inputs.mfu, units.format_percent)
    row(
        "goodput (expected ETTR)"
        if "ETTR" in goodput_source and "flat" not in goodput_source
        else "goodput allowance",
        inputs.goodput,
        units.format_percent,
    )
    row("GPUs the deadline needs", sizing.gpus_min, lambda v: f"{math.ceil(v):,}", "no deadline")
    warnings: list[str] = []
    result: dict[str, Any] = {
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
        "feasible": chosen is not None,
    }
    exit_code = 0
    if chosen is None:
        warnings.extend(sizing.why_not)
        exit_code = 1
        main.add("layout", "none fits: " + "; ".join(sizing.why_not))
        return Output(
            schema="size/1",
            inputs=_echo(inputs),
            result=result,
            warnings=warnings,
            tables=[main],
            exit_code=1,
        )
    layout = chosen.layout
    peak = chosen.memory.peak
    hbm = accelerator.hbm_bytes
    traffic = sizing.traffic
    watts, power_source = sizing.watts_per_gpu
    row("GPUs", sizing.gpus, _fmt_int)
    row("nodes", sizing.nodes, _fmt_int)
    main.add("layout", f"TP {layout.tp} x PP {layout.pp} x DP {layout.dp} (CP {layout.cp}, EP {layout.ep})")
    row("micro-batches per step", chosen.num_microbatches, _fmt_int)
    row("wall-clock days", sizing.days, _fmt_days)
    row("GPU-hours", sizing.gpu_hours, _fmt_int)
    row("memory per GPU (peak)", peak.total_bytes, units.format_bytes)
    main.add("fits in HBM", f"{'yes' if chosen.memory.fits(hbm) else 'no'} ({units.format_bytes(hbm)})")
    if traffic is not None:
        row(
            "DP traffic per GPU per step (inter-node)",
            traffic.inter_node_bytes_per_step,
            units.format_bytes_si,
        )
        row(
            "inter-node rate to hide it, per GPU",
            traffic.inter_node_bytes_per_s_required,
            units.format_bit_rate,
        )
        row(
            f"NICs per node ({units.format_bit_rate(system.nic_bytes_per_s)}, of {system.nics_per_node} cages)",
            sizing.recommended_nics_per_node,
            _fmt_int,
        )
        row("exposed gradient traffic per step", sizing.exposed_comm_s, units.format_duration)
    row("energy", sizing.energy_kwh, units.format_energy_kwh, "no published power figure")
    row("cost", sizing.cost_usd, units.format_usd, "give --usd-per-gpu-hour")
    if sizing.meets_deadline is False:
        warnings.append(f"{sizing.gpus} GPUs take {sizing.days:.1f} days, past the deadline")
        exit_code = 1
    hiding = layout_that_hides(sizing)
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
    result.update(
        {
            "layout": layout_json(layout),
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
            "pipeline_bubble_frac": bubble,
            "power_w_per_gpu": watts,
            "power_source": power_source,
            "pue": inputs.pue,
            "energy_kwh": sizing.energy_kwh,
            "cost_usd": sizing.cost_usd,
        }
    )
    overheads = default_overheads()
    assumptions = [
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
        f"memory: {SHARDING_NAMES[chosen.memory.sharding]}, recompute {layout.recompute}, sequence parallel "
        f"{layout.sequence_parallel}, {KERNELS_NAMES['fused']}, flash attention, no dropout; CUDA context "
        f"{units.format_bytes(float(overheads.cuda_context.value))}, NCCL "
        f"{units.format_bytes(float(overheads.nccl_buffer_per_communicator.value))} per communicator, "
        f"fragmentation {float(overheads.allocator_fragmentation.value):.0%}",
        "gradient traffic hides only behind the last micro-batch's backward (and the first one's forward for the "
        f"weight all-gather); NICs recommended so that at most {EXPOSED_COMM_BUDGET:.0%} of a step stays exposed",
        f"energy: {power_source} = {units.format_power(watts)} per GPU for the whole wall-clock, PUE {inputs.pue}"
        if watts is not None
        else f"energy: not computed, the catalog has no power figure for {system.name} or {accelerator.name}",
    ]
    return Output(
        schema="size/1",
        inputs=_echo(inputs),
        result=result,
        assumptions=assumptions,
        warnings=warnings,
        tables=[main, memory_table(peak, hbm)],
        exit_code=exit_code,
    )


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
