"""``mfukit train``: a real fault-tolerant training run on torchrun, or the sbatch / Kubernetes job that runs it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from mfukit import units
from mfukit.cli.common import emit, format_option, scenario_argument, scenario_options
from mfukit.cli.render import Format

_INJECT_HELP = (
    "Inject a fault (repeatable): kill@step=N[:rank=R], hang@step=N[:rank=R], crash-during-save@step=N, "
    "slow-rank@rank=R:factor=F."
)


@click.command()
@scenario_argument
@scenario_options(
    "model",
    "seq_len",
    "global_batch_size",
    "micro_batch_size",
    "precision",
    "attention_flops",
    "system",
    "gpu",
    "fsdp",
    "failure_rate",
    "checkpoint_interval",
    "checkpoint_mode",
    "checkpoint_blocking",
)
@click.option(
    "--steps", type=click.IntRange(min=1), help="Optimizer steps (default: training.tokens / batch)."
)
@click.option(
    "--out", type=click.Path(file_okay=False, path_type=Path), help="Run directory [runs/<scenario name>]."
)
@click.option("--nproc-per-node", type=click.IntRange(min=1), help="Ranks per node [parallelism.dp, else 1].")
@click.option("--nnodes", default="1", show_default=True, help="Nodes, or MIN:MAX for elastic membership.")
@click.option(
    "--max-restarts", type=click.IntRange(min=0), default=3, show_default=True, help="torchrun restarts."
)
@click.option("--inject", multiple=True, help=_INJECT_HELP)
@click.option(
    "--keep", type=click.IntRange(min=1), default=3, show_default=True, help="Committed checkpoints kept."
)
@click.option(
    "--lr", type=click.FloatRange(min=0, min_open=True), default=1e-3, show_default=True, help="Peak LR."
)
@click.option("--warmup-steps", type=click.IntRange(min=0), help="Linear warm-up steps [10 % of the steps].")
@click.option(
    "--seed", type=int, default=0, show_default=True, help="Seed of the weights and the data order."
)
@click.option("--compile", "compile_model", is_flag=True, help="torch.compile every transformer block.")
@click.option("--hang-timeout", help='A rank silent this long is a hang, e.g. "60s" [5min].')
@click.option("--timeout", "timeout", help='Stop the whole run after this long, e.g. "2h" [no limit].')
@click.option(
    "--peak-flops",
    help='Peak FLOP/s per device for MFU: "989 TFLOPS", a `bench matmul --format json` file, or "measure" '
    "[the catalog peak on a catalog GPU, else measured].",
)
@click.option("--data", type=click.Path(dir_okay=False, path_type=Path), help="Raw uint16/uint32 token file.")
@click.option(
    "--verify-resume", is_flag=True, help="Hash parameters at every save and check them after a resume."
)
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True)
@click.option(
    "--log-every", type=click.IntRange(min=1), default=10, show_default=True, help="Progress line period."
)
@click.option(
    "--metrics-listen",
    help="HOST:PORT to serve the run's Prometheus metrics on while it trains (those of `mfukit watch`).",
)
@click.option(
    "--watch-sidecar",
    help="With --emit: run an `mfukit watch` sidecar on the run's metrics, serving on HOST:PORT "
    "(e.g. 0.0.0.0:9464).",
)
@click.option(
    "--emit", "emit_kind", type=click.Choice(["slurm", "k8s"]), help="Write the job instead of running it."
)
@click.option("--image", help="Container image with mfukit and torch (for --emit k8s).")
@click.option("--time-limit", default="24:00:00", show_default=True, help="Slurm --time for --emit slurm.")
@click.option("--partition", help="Slurm partition for --emit slurm.")
@format_option
def train(
    scenario_path: Path | None,
    overrides: dict[str, Any],
    fmt: Format,
    emit_kind: str | None,
    image: str | None,
    time_limit: str,
    partition: str | None,
    timeout: str | None,
    compile_model: bool,
    **options: Any,
) -> int:
    """Train the scenario's model on torchrun with checkpoints, restarts and a goodput ledger.

    Resumes on its own from the newest complete checkpoint in --out after any failure (and when run
    again on the same --out). Progress goes to stderr; the result, the goodput ledger and the measured
    ETTR to stdout.
    """
    from mfukit.train.prepare import TrainRequest

    if options.get("watch_sidecar") and emit_kind is None:
        from mfukit.errors import InputError

        raise InputError(
            "--watch-sidecar is for the emitted job",
            source="command line",
            field="--watch-sidecar",
            hint="add --emit slurm or --emit k8s, or serve this run's metrics with --metrics-listen HOST:PORT",
        )
    request = TrainRequest(scenario_path=scenario_path, overrides=overrides, compile=compile_model, **options)
    if emit_kind is not None:
        from mfukit.train.emit import emit_job

        emitted = emit_job(emit_kind, request, image=image, time_limit=time_limit, partition=partition)
        return emit(emitted, fmt)
    from mfukit.train.run import run_training
    from mfukit.train.views import run_output

    timeout_s = units.parse_duration_s(timeout, field="--timeout") if timeout else None
    outcome = run_training(request, echo=lambda line: click.echo(line, err=True), timeout_s=timeout_s)
    return emit(run_output(request, outcome), fmt)
