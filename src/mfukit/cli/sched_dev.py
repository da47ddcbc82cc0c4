"""``mfukit sched dev-cluster``: a throw-away multi-node Slurm on this machine, and the simulator
checked against jobs replayed on it."""

from __future__ import annotations

import tempfile
from pathlib import Path

import click

from mfukit.cli.common import emit, format_option, progress
from mfukit.cli.render import Format
from mfukit.core.results import Output, Table
from mfukit.errors import InputError

DEFAULT_WORKDIR = Path(tempfile.gettempdir()) / "mfukit-slurm-dev"


@click.group("dev-cluster")
def dev_cluster() -> None:
    """A throw-away multi-node Slurm on this machine (root; Debian slurm-wlm)."""


@dev_cluster.command("up")
@click.option(
    "--workdir", type=click.Path(file_okay=False, path_type=Path), default=DEFAULT_WORKDIR, show_default=True
)
@click.option("--nodes", "num_nodes", type=click.IntRange(1, 64), default=4, show_default=True)
@click.option("--gpus-per-node", type=click.IntRange(1, 16), default=8, show_default=True)
@click.option("--with-db", is_flag=True, help="Also run slurmdbd + MariaDB so sacct works.")
@format_option
def dev_cluster_up(workdir: Path, num_nodes: int, gpus_per_node: int, with_db: bool, fmt: Format) -> int:
    """Start slurmctld, NODES slurmd with fake GPUs (and slurmdbd + MariaDB with --with-db)."""
    from mfukit.sched.slurm import devcluster

    cluster = devcluster.up(workdir, num_nodes=num_nodes, gpus_per_node=gpus_per_node, with_db=with_db)
    table = Table("dev Slurm cluster", ["item", "value"])
    for item, value in (
        ("SLURM_CONF", str(cluster.conf_path)),
        ("nodes", f"{len(cluster.nodes)} ({cluster.nodes[0]}..{cluster.nodes[-1]}) x {gpus_per_node} GPUs"),
        ("accounting (sacct)", "slurmdbd + MariaDB" if with_db else "off (jobcomp file only)"),
        ("stop with", f"mfukit sched dev-cluster down --workdir {cluster.workdir}"),
    ):
        table.add(item, value)
    output = Output(
        schema="sched.dev-cluster.up/1",
        inputs={
            "workdir": str(workdir),
            "nodes": num_nodes,
            "gpus_per_node": gpus_per_node,
            "with_db": with_db,
        },
        result={
            "workdir": str(cluster.workdir),
            "slurm_conf": str(cluster.conf_path),
            "nodes": cluster.nodes,
            "gpus_per_node": gpus_per_node,
            "with_db": with_db,
            "pids": cluster.pids,
            "ports": cluster.ports,
        },
        tables=[table],
        notes=[f"export SLURM_CONF={cluster.conf_path}"],
    )
    return emit(output, fmt)


@dev_cluster.command("down")
@click.option(
    "--workdir", type=click.Path(file_okay=False, path_type=Path), default=DEFAULT_WORKDIR, show_default=True
)
@format_option
def dev_cluster_down(workdir: Path, fmt: Format) -> int:
    """Stop the processes `up` started in WORKDIR (by recorded PID only)."""
    from mfukit.sched.slurm import devcluster

    stopped = devcluster.down(workdir)
    table = Table("stopped", ["process"])
    for name in stopped:
        table.add(name)
    output = Output(
        schema="sched.dev-cluster.down/1",
        inputs={"workdir": str(workdir)},
        result={"stopped": stopped},
        tables=[table],
    )
    return emit(output, fmt)


@dev_cluster.command("replay")
@click.argument("out_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--workdir", type=click.Path(file_okay=False, path_type=Path), default=DEFAULT_WORKDIR, show_default=True
)
@click.option("--seed", type=int, default=7, show_default=True, help="Seed of the 40-job mixed trace.")
@format_option
def dev_cluster_replay(out_dir: Path, workdir: Path, seed: int, fmt: Format) -> int:
    """Replay the 40-job mixed trace on a running dev cluster, write OUT_DIR, check the simulator.

    Needs `dev-cluster up --nodes 8 --gpus-per-node 8 --with-db`. OUT_DIR gets trace.json, sacct -P
    and --json output and the slurmctld log lines the check reads; then the `slurm` policy replays
    every pass and the whole trace against them (as `dev-cluster check`). Exits 1 on any difference.
    """
    from mfukit.sched.slurm import devcluster, replay
    from mfukit.sched.slurm.agreement import agreement_output

    cluster = devcluster.DevCluster.load(workdir)
    shape = (len(cluster.nodes), cluster.gpus_per_node)
    if shape != (replay.MIXED_TRACE_NODES, replay.MIXED_TRACE_GPUS_PER_NODE) or not cluster.with_db:
        raise InputError(
            f"the mixed trace needs 8 nodes x 8 GPUs with accounting; this cluster has {shape[0]} x {shape[1]}"
            + ("" if cluster.with_db else " without --with-db"),
            source=str(workdir),
            hint="mfukit sched dev-cluster up --nodes 8 --gpus-per-node 8 --with-db",
        )
    with progress("replaying on Slurm (about a minute)"):
        replay.run(cluster, replay.mixed_trace(seed), out_dir)
    return emit(agreement_output(out_dir, "sched.dev-cluster.replay/1"), fmt)


@dev_cluster.command("check")
@click.argument("replay_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@format_option
def dev_cluster_check(replay_dir: Path, fmt: Format) -> int:
    """Check the `slurm` policy against a replay directory written by `dev-cluster replay`.

    Every logged pass is re-run from the real state before it (jobs started, planned starts and
    reservations, nodes), and the whole trace is simulated open loop on the controller's clock
    (every job must start in the same pass on the same nodes). Exits 1 on any difference.
    """
    from mfukit.sched.slurm.agreement import agreement_output

    return emit(agreement_output(replay_dir, "sched.dev-cluster.check/1"), fmt)
