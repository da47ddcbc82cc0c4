"""Options every command shares: ``--format``, ``--report``, and flags that override scenario fields.

A command declares which scenario fields it takes as flags with ``@scenario_options("model", "tokens", ...)``;
the values arrive in one ``overrides`` argument keyed by dotted field, typed exactly as the user wrote them,
and are validated (units included) by the scenario schema, so a flag and a file field behave the same.
"""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from mfukit.cli.render import FORMATS, Format, render
from mfukit.cli.scenario_reference import FieldDoc, sections
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
    choices: tuple[str, ...] = ()
    boolean: bool = False


# Each scenario flag and the field it sets (dotted, as written in the file). What it means, the values it
# takes and whether it is a switch come from the schema (:mod:`mfukit.cli.scenario_reference` reads them
# off the pydantic fields), so a flag and the file field it overrides are documented once.
FLAG_FIELDS: dict[str, str] = {
    "--model": "model.preset",
    "--tokens": "training.tokens",
    "--seq-len": "training.seq_len",
    "--global-batch-tokens": "training.global_batch_tokens",
    "--global-batch-size": "training.global_batch_size",
    "--micro-batch-size": "training.micro_batch_size",
    "--precision": "training.precision",
    "--deadline": "training.deadline",
    "--attention-flops": "training.attention_flops",
    "--attention": "training.attention",
    "--attention-dropout": "training.attention_dropout",
    "--hidden-dropout": "training.hidden_dropout",
    "--norm": "training.norm",
    "--offload-optimizer": "training.offload_optimizer",
    "--offload-optimizer-step": "training.offload_optimizer_step",
    "--offload-params": "training.offload_params",
    "--offload-activations": "training.offload_activations",
    "--framework": "training.framework",
    "--compile": "training.compile",
    "--tp-comm-overlap": "training.tp_comm_overlap",
    "--fp8-recipe": "training.fp8_recipe",
    "--fp8-all-gather": "training.fp8_all_gather",
    "--system": "cluster.system",
    "--gpu": "cluster.gpu",
    "--gpus": "cluster.num_gpus",
    "--nodes": "cluster.num_nodes",
    "--storage": "cluster.storage",
    "--nics-per-node": "cluster.nics_per_node",
    "--nic-rate": "cluster.nic_rate",
    "--pue": "cluster.pue",
    "--hbm-headroom": "cluster.hbm_headroom",
    "--usd-per-gpu-hour": "cluster.usd_per_gpu_hour",
    "--failure-rate": "cluster.failure_rate_per_1000_node_days",
    "--tp": "parallelism.tp",
    "--pp": "parallelism.pp",
    "--dp": "parallelism.dp",
    "--cp": "parallelism.cp",
    "--ep": "parallelism.ep",
    "--vpp": "parallelism.vpp",
    "--first-stage-layers": "parallelism.first_stage_layers",
    "--last-stage-layers": "parallelism.last_stage_layers",
    "--sequence-parallel": "parallelism.sequence_parallel",
    "--recompute": "parallelism.recompute",
    "--recompute-layers": "parallelism.recompute_layers",
    "--zero": "parallelism.zero",
    "--fsdp": "parallelism.fsdp",
    "--failure-model": "ft.failure_model",
    "--checkpoint-interval": "ft.checkpoint_interval",
    "--checkpoint-mode": "ft.checkpoint_mode",
    "--checkpoint-state": "ft.checkpoint_state",
    "--checkpoint-blocking": "ft.checkpoint_blocking",
    "--restart": "ft.restart",
    "--hot-spares": "ft.hot_spares",
    "--detection": "ft.detection",
    "--replacement": "ft.replacement",
    "--repair": "ft.repair",
    "--init": "ft.init",
    "--fast-forward": "ft.fast_forward",
    "--failure-distribution": "ft.failure_distribution",
    "--weibull-shape": "ft.weibull_shape",
    "--step-time": "ft.step_time",
    "--mfu": "ft.mfu",
    "--work": "ft.work",
    "--straggler-rate": "ft.straggler_rate_per_1000_node_days",
    "--straggler-slowdown": "ft.straggler_slowdown",
    "--straggler-duration": "ft.straggler_duration",
    "--goodput": "ft.goodput",
}
# fields that take more spellings than their Literal lists (core.scenario folds the stacks' aliases)
ALIASED = frozenset({"training.framework"})


def _help(doc: FieldDoc) -> str:
    """A flag's help: the field's meaning, then its unit when it carries one."""
    first = doc.meaning.split(" ", 1)[0]
    text = doc.meaning[0].upper() + doc.meaning[1:] if first.isalpha() else doc.meaning
    text += "" if text.endswith(".") else "."
    return f"{text} {doc.type[0].upper()}{doc.type[1:]}, {doc.unit}." if doc.unit else text


def _flags() -> dict[str, Flag]:
    docs = {doc.key: doc for _, _, fields in sections() for doc in fields}
    flags = {}
    for option, field in FLAG_FIELDS.items():
        doc = docs[field]
        choices = () if field in ALIASED else doc.choices
        flag = Flag(option, field, _help(doc), choices, doc.boolean)
        flags[option.removeprefix("--").replace("-", "_")] = flag
    return flags


SCENARIO_FLAGS: dict[str, Flag] = _flags()


class ScenarioOption(click.Option):
    """A flag generated from :data:`SCENARIO_FLAGS` (so a test can tell it from a command's own options)."""


def scenario_options(*names: str) -> Callable[[F], F]:
    """Add the named scenario flags; the command receives them as ``overrides: dict[dotted field, value]``.
    An error's text names fields; it reaches the user with these flags shown beside them (:func:`show_flags`)."""
    unknown = [name for name in names if name not in SCENARIO_FLAGS]
    if unknown:
        raise KeyError(f"no scenario flag {unknown}")
    offered = {SCENARIO_FLAGS[name].field: SCENARIO_FLAGS[name].option for name in names}

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
                raise show_flags(blame_flag(error, overrides), offered) from None

        command: Any = wrapper
        for name in reversed(names):
            flag = SCENARIO_FLAGS[name]
            if flag.boolean:
                decls = [f"{flag.option}/--no-{flag.option.removeprefix('--')}", name]
                command = click.option(*decls, default=None, help=flag.help, cls=ScenarioOption)(command)
            else:
                kind = click.Choice(flag.choices) if flag.choices else str
                command = click.option(
                    flag.option, name, type=kind, default=None, help=flag.help, cls=ScenarioOption
                )(command)
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


def show_flags(error: InputError, flags: Mapping[str, str]) -> InputError:
    """``error`` with each field its message, expectation and fix name shown with the flag that sets it on
    this command (``flags``: field -> flag), as ``--gpus (cluster.num_gpus)``: the library names fields, and
    this is the one place they become flags."""
    if not flags:
        return error
    named = re.compile(
        r"(?<![\w.-])(" + "|".join(map(re.escape, sorted(flags, key=len, reverse=True))) + r")(?!\w|\.\w)"
    )

    def shown(text: str | None) -> str | None:
        return named.sub(lambda found: f"{flags[found[1]]} ({found[1]})", text) if text else text

    error.message = shown(error.message) or error.message
    error.expected, error.hint = shown(error.expected), shown(error.hint)
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
    if "gpu" not in fields:  # --gpu alone picks its own default node (resolve.cluster)
        fields.setdefault("system", DEFAULT_SYSTEM)
    if "num_gpus" not in fields and "num_nodes" not in fields:
        if default_nodes is None:
            raise InputError("needs --nodes or --gpus", field="--nodes", hint="e.g. --nodes 128")
        fields["num_nodes"] = default_nodes
    section = validate_as(ClusterSection, fields, source="command line", prefix="cluster")
    return resolve.cluster(section, source="command line")
