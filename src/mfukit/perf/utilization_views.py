"""What ``mfukit mfu`` shows of a running job: MFU, HFU and FLOP/s per GPU from the throughput its log
shows, with the warning when the MFU is above what large GEMMs reach, as the command's output."""

from __future__ import annotations

from dataclasses import dataclass

from mfukit import units
from mfukit.catalog.resolved import ResolvedScenario
from mfukit.core.hardware import Accelerator
from mfukit.core.results import Cell, Output, Table, shown
from mfukit.errors import InputError
from mfukit.perf.activations import layout_recompute
from mfukit.perf.efficiency import efficiency_for, large_gemm_fraction
from mfukit.perf.utilization import Utilization, measure
from mfukit.perf.views import recompute_text


@dataclass(frozen=True)
class GivenRate:
    """The throughput as given on the command line (echoed as written); at least one is set."""

    tokens_per_s: str | None
    per_gpu: str | None
    step_time: str | None

    def first(self) -> tuple[str, str]:
        """The flag of the first one given and its text."""
        return next(
            (flag, value)
            for flag, value in (
                ("--tokens-per-s", self.tokens_per_s),
                ("--tokens-per-s-per-gpu", self.per_gpu),
                ("--step-time", self.step_time),
            )
            if value is not None
        )


def mfu_output(scene: ResolvedScenario, given: GivenRate, rate: float) -> Output:
    """The output of ``mfu`` at ``rate`` tokens/s per GPU (found from ``given``); an MFU above 100 % is bad
    input, naming the flag that gave the rate."""
    training, accelerator = scene.scenario.training, scene.accelerator
    layout = scene.scenario.parallelism
    recompute, recomputed_share = layout_recompute(layout, scene.model.num_hidden_layers)
    described = recompute_text(layout) if layout else "none"
    peak = accelerator.peak_flops(training.precision)
    result = measure(
        scene.model,
        seq_len=training.seq_len,
        tokens_per_s_per_gpu=rate,
        peak_flops_per_s=peak,
        recompute=recompute,
        convention=training.attention_flops,
        recomputed_share=recomputed_share,
    )
    flag, text = given.first()
    _check_possible(result, flag, text, accelerator, scene.num_gpus)
    return Output(
        schema="mfu/1",
        inputs={
            "model": scene.model.name,
            "accelerator": accelerator.name,
            "num_gpus": scene.num_gpus,
            "seq_len": training.seq_len,
            "precision": training.precision,
            "tokens_per_s": given.tokens_per_s,
            "tokens_per_s_per_gpu": given.per_gpu,
            "step_time": given.step_time,
            "global_batch_tokens": training.tokens_per_step,
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
            "recompute_layers": layout.recompute_layers if layout else None,
            "mfu_by_convention": result.mfu_by_convention,
        },
        assumptions=_assumptions(scene, result, described, peak),
        warnings=_warnings(scene, result, flag),
        tables=[_table(scene, result, described, peak, rate)],
    )


def _warnings(scene: ResolvedScenario, result: Utilization, flag: str) -> list[str]:
    """An MFU above what a large GEMM reaches on the performance model's curve: a whole step rarely gets there."""
    precision, accelerator = scene.scenario.training.precision, scene.accelerator
    ceiling = large_gemm_fraction(
        accelerator, efficiency_for(accelerator), "fp8" if precision == "fp8" else "bf16"
    )
    if result.mfu <= ceiling:
        return []
    return [
        f"MFU {units.format_percent(result.mfu)} is above {units.format_percent(ceiling)}, the share of the "
        f"{precision} peak that a large GEMM (8192^3) reaches on {accelerator.name} (the performance "
        "model's GEMM curve): a whole training step, with attention, element-wise work and "
        f"communication, rarely gets there; check {flag}, the GPU count and --gpu"
    ]


def _table(scene: ResolvedScenario, result: Utilization, recompute: str, peak: float, rate: float) -> Table:
    model, accelerator, precision = scene.model, scene.accelerator, scene.scenario.training.precision
    other = "causal" if result.convention == "full" else "full"
    table = Table(f"MFU of {model.display_name or model.name} on {accelerator.name}", ["quantity", "value"])
    table.csv_columns = ["quantity", "value"]
    rows: list[tuple[str, Cell]] = [
        ("MFU", shown(result.mfu, units.format_percent)),
        (f"HFU (recompute: {recompute})", shown(result.hfu, units.format_percent)),
        ("model FLOP/s per GPU", shown(result.model_flops_per_s_per_gpu, units.format_flops_rate)),
        ("hardware FLOP/s per GPU", shown(result.hardware_flops_per_s_per_gpu, units.format_flops_rate)),
        ("tokens/s per GPU", shown(rate, lambda v: f"{v:,.1f}")),
        (f"peak ({precision}, dense)", shown(peak, units.format_flops_rate)),
        ("model FLOPs per token", shown(result.model_flops_per_token, units.format_flops)),
        ("attention convention", result.convention_name),
        (f"MFU under {other} convention", shown(result.mfu_by_convention[other], units.format_percent)),
    ]
    for row in rows:
        table.add(*row)
    return table


def _assumptions(scene: ResolvedScenario, result: Utilization, recompute: str, peak: float) -> list[str]:
    training = scene.scenario.training
    return [
        f"attention FLOPs: {result.convention_name} (--attention-flops to change)",
        f"peak: {scene.accelerator.display_name} dense {training.precision}, {units.format_flops_rate(peak)}",
        "model FLOPs: matrix multiplies only, backward = 2 x forward (Narayanan et al. 2021)",
        f"HFU adds the recompute '{recompute}' executes (--recompute, --recompute-layers to change)",
        f"sequence length {training.seq_len} tokens ("
        + ("given" if "seq_len" in training.model_fields_set else "the default")
        + "; the 12·L·h·s attention term of the FLOPs depends on it; --seq-len to change)",
    ]


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
        hint=f"{likely}; or check cluster.gpu (is it {accelerator.name}?), the model and training.seq_len",
    )
