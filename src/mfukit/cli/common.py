"""Options every command shares: ``--format``, ``--report``, and flags that override scenario fields.

A command declares which scenario fields it takes as flags with ``@scenario_options("model", "tokens", ...)``;
the values arrive in one ``overrides`` argument keyed by dotted field, typed exactly as the user wrote them,
and are validated (units included) by the scenario schema, so a flag and a file field behave the same.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from mfukit.cli.render import FORMATS, Format, render
from mfukit.core.cluster import Cluster
from mfukit.core.results import Output, ProgressCallback
from mfukit.errors import InputError

F = TypeVar("F", bound=Callable[..., Any])


def format_option(function: F) -> F:
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(FORMATS),
        default="table",
        show_default=True,
        help="table for people, json (the envelope) or csv for programs.",
    )(function)


def report_option(function: F) -> F:
    return click.option(
        "--report",
        "report_dir",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        help="Also write a self-contained report.html and its PNG charts into this directory.",
    )(function)


@contextlib.contextmanager
def progress(description: str) -> Iterator[ProgressCallback]:
    """A progress bar on stderr (only on a terminal) driven by a library ``callback(done, total)``."""
    stderr = Console(stderr=True)
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=stderr,
        transient=True,
        disable=not stderr.is_terminal,
    ) as bar:
        task = bar.add_task(description, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


def emit(output: Output, fmt: Format) -> int:
    """Print ``output`` and return its exit code (0, or 1 for a negative answer)."""
    render(output, fmt)
    return output.exit_code


@dataclass(frozen=True)
class Flag:
    option: str
    field: str
    help: str
    choices: tuple[str, ...] | None = None
    boolean: bool = False


SCENARIO_FLAGS: dict[str, Flag] = {
    flag.option.removeprefix("--").replace("-", "_"): flag
    for flag in (
        Flag(
            "--model",
            "model.preset",
            "Model preset (`mfukit catalog list models`) or an HF config.json path.",
        ),
        Flag("--tokens", "training.tokens", 'Training tokens, e.g. "1.4T".'),
        Flag("--seq-len", "training.seq_len", "Sequence length in tokens."),
        Flag("--global-batch-tokens", "training.global_batch_tokens", 'Global batch in tokens, e.g. "4M".'),
        Flag("--global-batch-size", "training.global_batch_size", "Global batch in sequences."),
        Flag("--micro-batch-size", "training.micro_batch_size", "Sequences per micro-batch per GPU."),
        Flag("--precision", "training.precision", "Training precision.", ("bf16", "fp16", "fp8", "fp32")),
        Flag("--deadline", "training.deadline", 'Wall-clock target, e.g. "14d".'),
        Flag(
            "--attention-flops",
            "training.attention_flops",
            "Attention FLOP convention: full s^2 (PaLM, Megatron 2021) or causal-halved (Megatron 2025).",
            ("full", "causal"),
        ),
        Flag(
            "--attention",
            "training.attention",
            "Attention kernel: flash (default) or eager (stores the s^2 scores, runs slower; 2021-22 runs).",
            ("flash", "eager"),
        ),
        Flag(
            "--offload-optimizer",
            "training.offload_optimizer",
            "Share of the optimizer states kept in host memory (ZeRO-Offload, Megatron --optimizer-cpu-offload), "
            'e.g. "100%".',
        ),
        Flag(
            "--offload-params",
            "training.offload_params",
            "Share of the sharded parameters (ZeRO-3/FSDP) kept in host memory (ZeRO-Infinity).",
        ),
        Flag(
            "--offload-activations",
            "training.offload_activations",
            "Share of the layers whose activations wait in host memory for their backward (Megatron/NeMo).",
        ),
        Flag(
            "--framework",
            "training.framework",
            "The software stack that trains (its costs, overlaps, sharding and kernels): megatron-core "
            "(default; megatron is an alias), nemo, megatron-deepspeed, deepspeed, torchtitan, fsdp, nanotron.",
        ),
        Flag(
            "--compile",
            "training.compile",
            "torch.compile the model: element-wise ops fused into few kernels (frameworks whose eager ops "
            "are composite, like torchtitan, get faster).",
            boolean=True,
        ),
        Flag(
            "--tp-comm-overlap",
            "training.tp_comm_overlap",
            "TP collectives overlapped with the GEMMs they feed (torchtitan async TP, Megatron "
            "--tp-comm-overlap); with sequence parallelism.",
            boolean=True,
        ),
        Flag("--system", "cluster.system", "Node preset (`mfukit catalog list systems`)."),
        Flag(
            "--gpu",
            "cluster.gpu",
            "Accelerator (`mfukit catalog list accelerators`); implies its default node.",
        ),
        Flag("--gpus", "cluster.num_gpus", "Number of GPUs."),
        Flag("--nodes", "cluster.num_nodes", "Number of nodes."),
        Flag("--storage", "cluster.storage", "Storage tier (`mfukit catalog list storage`)."),
        Flag("--nics-per-node", "cluster.nics_per_node", "Override the node's NIC count."),
        Flag("--nic-rate", "cluster.nic_rate", 'Override the NIC rate, e.g. "400Gbps".'),
        Flag("--pue", "cluster.pue", "Data-centre PUE for energy."),
        Flag(
            "--hbm-headroom",
            "cluster.hbm_headroom",
            'HBM kept free per GPU: a share ("5%", the default) or a size ("4GiB").',
        ),
        Flag("--usd-per-gpu-hour", "cluster.usd_per_gpu_hour", "Price of one GPU-hour, for cost."),
        Flag(
            "--failure-rate",
            "cluster.failure_rate_per_1000_node_days",
            "Job-interrupting failures per 1,000 node-days.",
        ),
        Flag("--tp", "parallelism.tp", "Tensor-parallel degree."),
        Flag("--pp", "parallelism.pp", "Pipeline-parallel degree."),
        Flag("--dp", "parallelism.dp", "Data-parallel degree."),
        Flag("--cp", "parallelism.cp", "Context-parallel degree."),
        Flag("--ep", "parallelism.ep", "Expert-parallel degree."),
        Flag("--vpp", "parallelism.vpp", "Virtual pipeline stages per rank (interleaved schedule)."),
        Flag("--first-stage-layers", "parallelism.first_stage_layers", "Layers on the first pipeline stage."),
        Flag("--last-stage-layers", "parallelism.last_stage_layers", "Layers on the last pipeline stage."),
        Flag(
            "--sequence-parallel",
            "parallelism.sequence_parallel",
            "Megatron sequence parallelism.",
            boolean=True,
        ),
        Flag("--recompute", "parallelism.recompute", "Activation recompute.", ("none", "selective", "full")),
        Flag(
            "--zero",
            "parallelism.zero",
            "ZeRO stage (1 = Megatron distributed optimizer).",
            ("0", "1", "2", "3"),
        ),
        Flag("--fsdp", "parallelism.fsdp", "FSDP sharding.", ("none", "full", "hybrid")),
        Flag("--failure-model", "ft.failure_model", "Failure-rate preset."),
        Flag("--checkpoint-interval", "ft.checkpoint_interval", 'e.g. "30min" or "500steps".'),
        Flag(
            "--checkpoint-mode",
            "ft.checkpoint_mode",
            "sync (every rank writes its shard), async (snapshot to host memory, persist in the "
            "background) or single (one rank writes the gathered state).",
            ("sync", "async", "single"),
        ),
        Flag(
            "--checkpoint-state",
            "ft.checkpoint_state",
            "Whose resumable state sets the bytes per parameter (auto: fsdp when FSDP is used, else megatron).",
            ("auto", "fsdp", "megatron", "deepspeed"),
        ),
        Flag("--checkpoint-blocking", "ft.checkpoint_blocking", 'Blocking time of one save, e.g. "1s".'),
        Flag("--restart", "ft.restart", 'Time from failure to resumed training, e.g. "5min".'),
        Flag("--hot-spares", "ft.hot_spares", "Spare nodes ready to replace a failed one."),
        Flag("--detection", "ft.detection", 'Failure to detection (watchdog/heartbeat), e.g. "100s".'),
        Flag(
            "--replacement",
            "ft.replacement",
            'Getting a replacement node when no spare is free, e.g. "5min".',
        ),
        Flag("--repair", "ft.repair", 'A failed node back in the spare pool, e.g. "24h" (default: never).'),
        Flag("--init", "ft.init", 'Process start, rendezvous and NCCL init after a failure, e.g. "5min".'),
        Flag("--fast-forward", "ft.fast_forward", 'Data-loader fast-forward after a load, e.g. "30s".'),
        Flag(
            "--failure-distribution",
            "ft.failure_distribution",
            "Time between failures.",
            ("exponential", "weibull"),
        ),
        Flag(
            "--weibull-shape", "ft.weibull_shape", "Weibull shape k (< 1: failures cluster after restarts)."
        ),
        Flag("--step-time", "ft.step_time", 'Failure-free time of one optimizer step, e.g. "6.5s".'),
        Flag("--mfu", "ft.mfu", "MFU that derives the step time when --step-time is not given."),
        Flag("--work", "ft.work", 'Failure-free training time, e.g. "48d" (default: from --tokens).'),
        Flag(
            "--straggler-rate",
            "ft.straggler_rate_per_1000_node_days",
            "Straggler episodes per 1,000 node-days.",
        ),
        Flag("--straggler-slowdown", "ft.straggler_slowdown", 'Throughput lost during one, e.g. "30%".'),
        Flag("--straggler-duration", "ft.straggler_duration", 'Until a straggler is removed, e.g. "20min".'),
        Flag(
            "--goodput",
            "ft.goodput",
            'Flat goodput allowance when no failure model is used, e.g. 0.9 or "90%".',
        ),
    )
}


def scenario_options(*names: str) -> Callable[[F], F]:
    """Add the named scenario flags; the command receives them as ``overrides: dict[dotted field, value]``."""
    unknown = [name for name in names if name not in SCENARIO_FLAGS]
    if unknown:
        raise KeyError(f"no scenario flag {unknown}")

    def decorate(function: F) -> F:
        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            overrides: dict[str, Any] = {}
            for name in names:
                value = kwargs.pop(name)
                if value is not None:
                    flag = SCENARIO_FLAGS[name]
                    overrides[flag.field] = value
            try:
                return function(*args, overrides=overrides, **kwargs)
            except InputError as error:
                raise blame_flag(error, overrides) from None

        command: Any = wrapper
        for name in reversed(names):
            flag = SCENARIO_FLAGS[name]
            if flag.boolean:
                decls = [f"{flag.option}/--no-{flag.option.removeprefix('--')}", name]
                command = click.option(*decls, default=None, help=flag.help)(command)
            else:
                kind = click.Choice(flag.choices) if flag.choices else str
                command = click.option(flag.option, name, type=kind, default=None, help=flag.help)(command)
        return command  # type: ignore[no-any-return]

    return decorate


def blame_flag(error: InputError, overrides: dict[str, Any]) -> InputError:
    """``error`` located on the command line when its field is one a flag set: a flag overrides the
    scenario file, so a bad value it gave is not the file's."""
    field = error.field or ""
    given = [flag for flag in SCENARIO_FLAGS.values() if flag.field in overrides]
    flag = next((f for f in given if field == f.field or field.startswith(f.field + ".")), None)
    if flag is not None:
        error.source = "command line"
        error.field = f"{flag.option} ({field})"
    return error


def scenario_argument(function: F) -> F:
    return click.argument(
        "scenario_path",
        metavar="[SCENARIO]",
        required=False,
        type=click.Path(dir_okay=False, path_type=Path),
    )(function)


DEFAULT_SYSTEM = "dgx-h100"


def cluster_from_flags(
    overrides: dict[str, Any], scenario_path: Path | None = None, *, default_nodes: int | None = None
) -> Cluster:
    """The cluster of ``--system/--gpu/--gpus/--nodes/--nics-per-node/--nic-rate`` (over ``[cluster]`` of a
    scenario file when given), for commands that need hardware but no model. Without a size it is
    ``default_nodes`` nodes, or an InputError when that is None."""
    from mfukit.catalog import resolve
    from mfukit.core.scenario import ClusterSection, by_section, load_scenario
    from mfukit.core.schema import validate_as

    if scenario_path is not None:
        return resolve.cluster(load_scenario(scenario_path, overrides).cluster, source=str(scenario_path))
    fields = by_section(overrides).get("cluster", {})
    fields.setdefault("system", DEFAULT_SYSTEM)
    if "num_gpus" not in fields and "num_nodes" not in fields:
        if default_nodes is None:
            raise InputError("needs --nodes or --gpus", field="--nodes", hint="e.g. --nodes 128")
        fields["num_nodes"] = default_nodes
    section = validate_as(ClusterSection, fields, source="command line", prefix="cluster")
    return resolve.cluster(section, source="command line")
