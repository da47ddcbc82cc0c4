"""``mfukit comm``: what collectives cost on a cluster, and judges for nccl-tests output and NCCL logs."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
import numpy as np

from mfukit import catalog, units
from mfukit.cli.common import (
    cluster_from_flags,
    emit,
    format_option,
    report_option,
    scenario_argument,
    scenario_options,
)
from mfukit.cli.render import Format
from mfukit.comm.check import SLOW_BELOW, check_run
from mfukit.comm.collectives import COLLECTIVES, collective_named
from mfukit.comm.model import ALGORITHMS, predict
from mfukit.comm.nccl_log import analyse_nccl_log
from mfukit.comm.nccl_tests import parse_nccl_tests
from mfukit.comm.topology import CommTopology, from_system
from mfukit.comm.tuning import PROTOCOLS
from mfukit.comm.views import check_output, nccl_log_output, predict_output, sweep_output
from mfukit.core.cluster import Cluster
from mfukit.errors import InputError

F = TypeVar("F", bound=Callable[..., Any])
CLUSTER_FLAGS = ("system", "gpu", "gpus", "nodes", "nics_per_node", "nic_rate")


def topology_options(function: F) -> F:
    """Fabric flags every comm command shares."""
    options = [
        click.option(
            "--switch", default=None, help="Leaf switch SKU (default: the catalog switch of the NIC link)."
        ),
        click.option(
            "--oversubscription",
            type=float,
            default=1.0,
            show_default=True,
            help="Leaf down:up bandwidth ratio (1 = non-blocking).",
        ),
        click.option(
            "--rail-optimized/--top-of-rack",
            "rail_optimized",
            default=True,
            show_default=True,
            help="NIC i of every node on leaf i (NVIDIA SuperPOD), or all NICs of a node on one leaf.",
        ),
        click.option("--sharp", is_flag=True, help="In-network reduction (CollNet/SHARP) is enabled."),
        click.option(
            "--cpu",
            type=click.Choice(["intel", "amd"]),
            default="intel",
            show_default=True,
            help="Host CPU vendor (NCCL's LL ceiling across nodes depends on it).",
        ),
    ]
    for option in reversed(options):
        function = option(function)
    return function


def _topology(cluster: Cluster, options: dict[str, Any]) -> tuple[CommTopology, list[str]]:
    switch = catalog.switch(options["switch"], field="--switch") if options["switch"] else None
    return from_system(
        cluster.system,
        cluster.accelerator,
        num_nodes=cluster.num_nodes,
        switch=switch,
        rail_optimized=options["rail_optimized"],
        oversubscription=options["oversubscription"],
        sharp=options["sharp"],
        cpu=options["cpu"],
    )


@click.group()
def comm() -> None:
    """Collective cost model, nccl-tests judge and NCCL log analyser."""


@comm.command("predict")
@scenario_argument
@click.option(
    "--collective", required=True, help=f"One of {', '.join(COLLECTIVES)} (nccl-tests names work too)."
)
@click.option("--bytes", "size", required=True, help='Message size in nccl-tests terms, e.g. "1GiB".')
@click.option("--algo", type=click.Choice(["auto", *ALGORITHMS]), default="auto", show_default=True)
@click.option("--proto", type=click.Choice(["auto", *PROTOCOLS]), default="auto", show_default=True)
@click.option("--gpus-per-node", type=int, default=None, help="Ranks per node (default: packed).")
@scenario_options(*CLUSTER_FLAGS)
@topology_options
@format_option
def predict_command(
    scenario_path: Path | None,
    collective: str,
    size: str,
    algo: str,
    proto: str,
    gpus_per_node: int | None,
    overrides: dict[str, Any],
    fmt: Format,
    **options: Any,
) -> int:
    """Time, algbw and busbw of one collective on a cluster, the algorithm NCCL would use and what limits it.

    \b
    mfukit comm predict --collective all_reduce --bytes 1GiB --system dgx-h100 --nodes 16
    """
    name = collective_named(collective, field="--collective")
    message_bytes = units.parse_bytes(size, field="--bytes")
    cluster = cluster_from_flags(overrides, scenario_path, default_nodes=1)
    topology, assumptions = _topology(cluster, options)
    kwargs: dict[str, Any] = {"gpus_per_domain": gpus_per_node, "algorithm": algo, "protocol": proto}
    prediction = predict(name, message_bytes, topology, cluster.num_gpus, **kwargs)
    echo = {"collective": name, "bytes": size, "system": cluster.system.name, "num_gpus": cluster.num_gpus,
            "algorithm": algo, "protocol": proto, **options}  # fmt: skip
    output = predict_output(name, message_bytes, prediction, topology, cluster, assumptions, kwargs, echo)
    return emit(output, fmt)


def _sizes(minimum: str, maximum: str, factor: int) -> np.ndarray[Any, np.dtype[np.float64]]:
    low = units.parse_bytes(minimum, field="--min-bytes")
    high = units.parse_bytes(maximum, field="--max-bytes")
    if low <= 0 or high < low:
        raise InputError("needs 0 < --min-bytes <= --max-bytes", field="--max-bytes", value=maximum)
    if factor < 2:
        raise InputError("must be at least 2", field="--factor", value=factor)
    steps = math.floor(math.log(high / low, factor) + 1e-9) + 1
    if steps > 200:
        raise InputError(f"{steps} sizes is too many", field="--factor", value=factor, hint="raise --factor")
    return np.asarray([low * factor**k for k in range(steps)], dtype=np.float64)


@comm.command("sweep")
@scenario_argument
@click.option("--collective", required=True, help=f"One of {', '.join(COLLECTIVES)}.")
@click.option("--min-bytes", default="8B", show_default=True, help="Smallest size (nccl-tests -b).")
@click.option("--max-bytes", default="8GiB", show_default=True, help="Largest size (nccl-tests -e).")
@click.option("--factor", type=int, default=2, show_default=True, help="Size step factor (nccl-tests -f).")
@click.option("--algo", type=click.Choice(["auto", *ALGORITHMS]), default="auto", show_default=True)
@click.option("--gpus-per-node", type=int, default=None, help="Ranks per node (default: packed).")
@scenario_options(*CLUSTER_FLAGS)
@topology_options
@report_option
@format_option
def sweep_command(
    scenario_path: Path | None,
    collective: str,
    min_bytes: str,
    max_bytes: str,
    factor: int,
    algo: str,
    gpus_per_node: int | None,
    overrides: dict[str, Any],
    report_dir: Path | None,
    fmt: Format,
    **options: Any,
) -> int:
    """An nccl-tests-style table of predicted time, algbw and busbw from 8 B to 8 GiB (and a plot with --report)."""
    name = collective_named(collective, field="--collective")
    sizes = _sizes(min_bytes, max_bytes, factor)
    cluster = cluster_from_flags(overrides, scenario_path, default_nodes=1)
    topology, assumptions = _topology(cluster, options)
    kwargs: dict[str, Any] = {"gpus_per_domain": gpus_per_node, "algorithm": algo}
    prediction = predict(name, sizes, topology, cluster.num_gpus, **kwargs)
    echo = {"collective": name, "system": cluster.system.name, "num_gpus": cluster.num_gpus,
            "min_bytes": min_bytes, "max_bytes": max_bytes, "factor": factor, "algorithm": algo,
            **options}  # fmt: skip
    output = sweep_output(name, prediction, topology, cluster, assumptions, echo)
    table = output.tables[0]
    if report_dir is not None:
        from mfukit.comm.plots import write_sweep_report

        output.files.append(
            write_sweep_report(prediction, table, cluster.system.name, assumptions, report_dir)
        )
    return emit(output, fmt)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        raise InputError("file not found", source=str(path), hint="check the path") from None
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"cannot read file: {error}", source=str(path)) from None


@comm.command("check")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--collective", default=None, help="When the output does not name it.")
@click.option(
    "--slow-below",
    type=float,
    default=SLOW_BELOW,
    show_default=True,
    help="A size is slow below this fraction of the modelled busbw; so is the peak.",
)
@scenario_options(*CLUSTER_FLAGS)
@topology_options
@format_option
def check_command(
    file: Path,
    collective: str | None,
    slow_below: float,
    overrides: dict[str, Any],
    fmt: Format,
    **options: Any,
) -> int:
    """Judge nccl-tests output (any era, or its -J JSON) against the model: ok / slow / broken per size.

    Exit 1 when a size is broken or the peak busbw is below --slow-below of what the cluster should reach.
    """
    if not 0 < slow_below <= 1:
        raise InputError("must be in (0, 1]", field="--slow-below", value=slow_below)
    run = parse_nccl_tests(_read(file), name_hint=file.name, source=str(file))
    name = collective_named(collective, field="--collective") if collective else None
    given_nodes = overrides.get("cluster.num_nodes")
    if run.hosts and (given_nodes or "cluster.num_gpus" not in overrides):
        overrides["cluster.num_nodes"] = len(run.hosts)  # the file names its hosts: check_run judges on them
    elif not given_nodes and "cluster.num_gpus" not in overrides and run.num_ranks:
        overrides["cluster.num_gpus"] = run.num_ranks  # no device list: the header or busbw/algbw says
    elif not given_nodes and "cluster.num_gpus" not in overrides:
        overrides["cluster.num_nodes"] = 1
    cluster = cluster_from_flags(overrides, default_nodes=1)
    topology, assumptions = _topology(cluster, options)
    report = check_run(
        run,
        topology,
        num_nodes=units.parse_int_count(given_nodes, field="--nodes") if given_nodes else cluster.num_nodes,
        collective=name,
        num_ranks=overrides.get("cluster.num_gpus") and cluster.num_gpus,
        slow_below=slow_below,
    )
    assumptions.append(f"slow below {slow_below:.0%} of the modelled busbw (peak and each size)")
    inputs = {"system": cluster.system.name, "nodes": cluster.num_nodes, **options}
    return emit(check_output(report, file, assumptions, inputs), fmt)


@comm.command("nccl-log")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--system", default=None, help="Node preset: its NIC count is the rails each host should use.")
@click.option("--nodes", type=int, default=None, help="Nodes the job spans, when the log shows fewer hosts.")
@format_option
def nccl_log_command(file: Path, system: str | None, nodes: int | None, fmt: Format) -> int:
    """Analyse NCCL_DEBUG=INFO output: transports per peer, HCAs vs GPUs, channels, NVLS, errors, timeouts.

    Exit 1 when a finding is an error (socket fallback, NCCL WARN, watchdog timeout...).
    """
    expected = catalog.system(system, field="--system").nics_per_node if system else None
    report = analyse_nccl_log(_read(file), expected_nics_per_node=expected, num_nodes=nodes)
    if not report.nccl_lines and not report.timeouts:
        raise InputError(
            "holds no NCCL log lines",
            source=str(file),
            hint="run with NCCL_DEBUG=INFO (NCCL_DEBUG_SUBSYS=INIT,NET,GRAPH,ENV) and pass its output",
        )
    output = nccl_log_output(report, {"file": str(file), "system": system, "nodes": nodes})
    return emit(output, fmt)
