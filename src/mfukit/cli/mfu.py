"""``mfukit mfu``: MFU and HFU of a running job from the throughput its log shows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from mfukit import units
from mfukit.catalog.resolved import load_resolved
from mfukit.cli.common import emit, format_option, scenario_argument, scenario_options
from mfukit.cli.render import Format
from mfukit.core.hardware import Accelerator
from mfukit.core.results import Cell, Output, Table, shown
from mfukit.errors import InputError
from mfukit.perf.efficiency import efficiency_for
from mfukit.perf.utilization import Utilization, measure, tokens_per_s_per_gpu


@click.command("mfu")
@scenario_argument
@click.option("--tokens-per-s", "tokens_per_s", default=None, help='Total training throughput, e.g. "778k".')
@click.option("--tokens-per-s-per-gpu", "per_gpu", default=None, help="Throughput per GPU, e.g. 380.")
@click.option("--step-time", "step_time", default=None, help='Time of one optimizer step, e.g. "10.8s".')
@scenario_options(
    "model",
    "seq_len",
    "global_batch_tokens",
    "global_batch_size",
    "precision",
    "attention_flops",
    "system",
    "gpu",
    "gpus",
    "nodes",
    "recompute",
)
@format_option
def mfu(
    scenario_path: Path | None,
    tokens_per_s: str | None,
    per_gpu: str | None,
    step_time: str | None,
    overrides: dict[str, Any],
    fmt: Format,
) -> int:
    """MFU, HFU and model TFLOP/s per GPU from tokens/s (total or per GPU) or step time + batch.

    Example: mfukit mfu --model llama-65b --gpu a100-80gb-sxm --tokens-per-s-per-gpu 380
    """
    scene = load_resolved(scenario_path, overrides)
    scenario, model, accelerator, num_gpus = scene.scenario, scene.model, scene.accelerator, scene.num_gpus
    training = scenario.training
    batch_tokens = training.tokens_per_step
    rate = tokens_per_s_per_gpu(
        tokens_per_s=units.parse_count(tokens_per_s, field="--tokens-per-s") if tokens_per_s else None,
        per_gpu=units.parse_count(per_gpu, field="--tokens-per-s-per-gpu") if per_gpu else None,
        step_s=units.parse_duration_s(step_time, field="--step-time") if step_time else None,
        batch_tokens=batch_tokens,
        num_gpus=num_gpus,
    )
    recompute = scenario.parallelism.recompute if scenario.parallelism else "none"
    peak = accelerator.peak_flops(training.precision)
    result = measure(
        model,
        seq_len=training.seq_len,
        tokens_per_s_per_gpu=rate,
        peak_flops_per_s=peak,
        recompute=recompute,
        convention=training.attention_flops,
    )
    flag, given = next(
        (flag, value)
        for flag, value in (
            ("--tokens-per-s", tokens_per_s),
            ("--tokens-per-s-per-gpu", per_gpu),
            ("--step-time", step_time),
        )
        if value is not None
    )
    _check_possible(result, flag, given, accelerator, num_gpus)
    ceiling = efficiency_for(accelerator).gemm_peak_fraction
    if training.precision == "fp8":
        ceiling = efficiency_for(accelerator).fp8_gemm_peak_fraction
    warnings = (
        [
            f"MFU {units.format_percent(result.mfu)} is above {units.format_percent(ceiling)}, the share of the "
            f"{training.precision} peak that large GEMMs reach on {accelerator.name} (the fitted GEMM ceiling of "
            "the performance model): a whole training step, with attention, element-wise work and "
            f"communication, rarely gets there; check {flag}, the GPU count and --gpu"
        ]
        if result.mfu > ceiling
        else []
    )
    other = "causal" if result.convention == "full" else "full"
    table = Table(f"MFU of {model.display_name or model.name} on {accelerator.name}", ["quantity", "value"])
    table.csv_columns = ["quantity", "value"]
    rows: list[tuple[str, Cell]] = [
        ("MFU", shown(result.mfu, units.format_percent)),
        (f"HFU (recompute: {recompute})", shown(result.hfu, units.format_percent)),
        ("model FLOP/s per GPU", shown(result.model_flops_per_s_per_gpu, units.format_flops_rate)),
        ("hardware FLOP/s per GPU", shown(result.hardware_flops_per_s_per_gpu, units.format_flops_rate)),
        ("tokens/s per GPU", shown(rate, lambda v: f"{v:,.1f}")),
        (f"peak ({training.precision}, dense)", shown(peak, units.format_flops_rate)),
        ("model FLOPs per token", shown(result.model_flops_per_token, units.format_flops)),
        ("attention convention", result.convention_name),
        (f"MFU under {other} convention", shown(result.mfu_by_convention[other], units.format_percent)),
    ]
    for row in rows:
        table.add(*row)
    output = Output(
        schema="mfu/1",
        inputs={
            "model": model.name,
            "accelerator": accelerator.name,
            "num_gpus": num_gpus,
            "seq_len": training.seq_len,
            "precision": training.precision,
            "tokens_per_s": tokens_per_s,
            "tokens_per_s_per_gpu": per_gpu,
            "step_time": step_time,
            "global_batch_tokens": batch_tokens,
        },
        result={
            "mfu": result.mfu,
            "hfu": result.hfu,
            "model_flops_per_s_per_gpu": result.model_flops_per_s_per_gpu,
            "hardware_flops_per_s_per_gpu": result.hardware_flops_per_s_per_gpu,
            "tokens_per_s_per_gpu": rate,
            "peak_flops_per_s": peak,
            "model_flops_per_token": result.model_flops_per_token,
            "hardware_flops_per_token": result.hardware_flops_per_token,
            "attention_convention": result.convention,
            "recompute": recompute,
            "mfu_by_convention": result.mfu_by_convention,
        },
        assumptions=[
            f"attention FLOPs: {result.convention_name} (--attention-flops to change)",
            f"peak: {accelerator.display_name} dense {training.precision}, {units.format_flops_rate(peak)}",
            "model FLOPs: matrix multiplies only, backward = 2 x forward (Narayanan et al. 2021)",
            f"HFU adds the recompute '{recompute}' executes (--recompute to change)",
            f"sequence length {training.seq_len} tokens ("
            + ("given" if "seq_len" in training.model_fields_set else "the default")
            + "; the 12·L·h·s attention term of the FLOPs depends on it; --seq-len to change)",
        ],
        warnings=warnings,
        tables=[table],
    )
    return emit(output, fmt)


def _check_possible(
    result: Utilization, flag: str, given: str, accelerator: Accelerator, num_gpus: int | None
) -> None:
    """An MFU above 100 % cannot be measured: the rate, the GPU count or the GPU is wrong."""
    if result.mfu <= 1.0:
        return
    most = result.peak_flops_per_s / result.model_flops_per_token
    likely = {
        "--tokens-per-s-per-gpu": "if it is the whole job's rate, pass it as --tokens-per-s with --gpus N",
        "--tokens-per-s": f"check --gpus ({num_gpus:,} given): the total is divided by it"
        if num_gpus
        else "",
        "--step-time": "check --step-time, the global batch (tokens per step) and --gpus",
    }[flag]
    raise InputError(
        f"gives {result.tokens_per_s_per_gpu:,.0f} tokens/s per GPU, MFU {units.format_percent(result.mfu)}: "
        f"more than {accelerator.name} can compute even at 100 % MFU ({most:,.0f} tokens/s per GPU at its "
        "dense peak)",
        source="command line",
        field=flag,
        value=given,
        hint=f"{likely}; or check --gpu (is it {accelerator.name}?), the model and --seq-len",
    )
