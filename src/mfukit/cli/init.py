"""``mfukit init``: write a commented scenario file to start from."""

from __future__ import annotations

from pathlib import Path

import click

from mfukit import catalog
from mfukit.cli.common import emit, format_option
from mfukit.cli.render import Format
from mfukit.cli.scenario_reference import starter
from mfukit.core.files import write_text_atomic
from mfukit.core.results import Output, Table
from mfukit.core.scenario import load_scenario
from mfukit.errors import InputError

DEFAULT_MODEL = "llama3.1-8b"
DEFAULT_GPU = "h100-sxm"


@click.command("init")
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path), default="scenario.toml")
@click.option(
    "--model", "model_name", default=DEFAULT_MODEL, show_default=True, help="Model preset or HF hub id."
)
@click.option(
    "--gpu", "gpu_name", default=DEFAULT_GPU, show_default=True, help="Accelerator (its default node)."
)
@click.option("--force", is_flag=True, help="Overwrite PATH if it exists.")
@format_option
def init(path: Path, model_name: str, gpu_name: str, force: bool, fmt: Format) -> int:
    """Write a commented scenario file: the model and GPU set, every other field commented out at its
    default with its meaning (docs/scenario.md documents them all).

    Example: mfukit init llama.toml --model meta-llama/Llama-2-13b-hf --gpu a100-80gb-sxm
    """
    if path.exists() and not force:
        raise InputError(
            "exists already", source=str(path), hint="pass --force to overwrite it, or another path"
        )
    model = catalog.model(model_name, field="--model")
    gpu = catalog.accelerator(gpu_name, field="--gpu")
    write_text_atomic(path, starter(model.name, gpu.name))
    scenario = load_scenario(path)  # what was written loads as it stands
    table = Table("scenario file", ["field", "value"])
    table.add("model", f"{model.name} ({model.display_name})")
    table.add("gpu", gpu.name)
    output = Output(
        schema="init/1",
        inputs={"path": str(path), "model": model_name, "gpu": gpu_name},
        result={"path": str(path), "model": scenario.model["preset"], "gpu": scenario.cluster.gpu},
        tables=[table],
        notes=[f"next: mfukit plan {path} --gpus 8 --global-batch-tokens 4M (or uncomment the fields)"],
    )
    output.files.append(path)
    return emit(output, fmt)
