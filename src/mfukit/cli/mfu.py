"""``mfukit mfu``: MFU and HFU of a running job from the throughput its log shows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from mfukit import units
from mfukit.catalog.resolved import load_resolved
from mfukit.cli.common import emit, format_option, scenario_argument, scenario_options
from mfukit.cli.render import Format
from mfukit.perf.utilization import tokens_per_s_per_gpu
from mfukit.perf.utilization_views import GivenRate, mfu_output


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
    "recompute_layers",
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
    rate = tokens_per_s_per_gpu(
        tokens_per_s=units.parse_count(tokens_per_s, field="--tokens-per-s") if tokens_per_s else None,
        per_gpu=units.parse_count(per_gpu, field="--tokens-per-s-per-gpu") if per_gpu else None,
        step_s=units.parse_duration_s(step_time, field="--step-time") if step_time else None,
        batch_tokens=scene.scenario.training.tokens_per_step,
        num_gpus=scene.num_gpus,
    )
    return emit(mfu_output(scene, GivenRate(tokens_per_s, per_gpu, step_time), rate), fmt)
