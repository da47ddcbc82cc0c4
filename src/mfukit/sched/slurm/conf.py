"""The dev cluster's configuration files, rendered from one :class:`ClusterOptions` — the same
options the simulator's ``slurm`` policy is built from, so a replay compares like with like."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import hostlist

from mfukit.sched.engine import ClusterSpec, Partition, Qos
from mfukit.sched.policies.base import PriorityWeights
from mfukit.sched.policies.slurm import Controller, SlurmPolicy

CLUSTER_NAME = "mfukitdev"
CPUS_PER_NODE = 16  # declared, not real: SlurmdParameters=config_overrides
REAL_MEMORY_MB = 16000
DEF_MEM_PER_CPU_MB = 100  # without a default, CR_Core_Memory gives a job the whole node's memory


@dataclass(frozen=True)
class ClusterOptions:
    """Scheduler knobs (slurm.conf names) shared by the dev cluster and the simulator."""

    bf_interval_s: int = 1
    # a cycle takes ~10 ms; with the default bf_max_time (= bf_interval) one that crosses a second is
    # cut wherever the kernel's coarse clock ticks over, which no log can tell to the millisecond
    bf_max_time_s: int = 30
    bf_resolution_s: int = 60
    bf_window_min: int = 1440
    bf_max_job_test: int = 500
    sched_interval_s: int = 2
    weight_partition: int = 1000
    weight_job_size: int = 0
    weight_qos: int = 0
    partitions: tuple[Partition, ...] = (Partition("batch", 1), Partition("prio", 10))
    qos: tuple[Qos, ...] = (Qos("normal", 0), Qos("high", 100, ("normal",)))
    nodes_per_leaf: int = 0  # > 0: topology/tree with leaf switches of this many nodes

    def weights(self) -> PriorityWeights:
        return PriorityWeights(
            job_size=self.weight_job_size, partition=self.weight_partition, qos=self.weight_qos
        )

    def policy(self, controller: Controller | None = None, *, clock_origin_s: int = 0) -> SlurmPolicy:
        """The ``slurm`` policy with these knobs (on slurmctld's own timers unless ``controller``)."""
        return SlurmPolicy(
            self.weights(),
            bf_interval_s=self.bf_interval_s,
            bf_resolution_s=self.bf_resolution_s,
            bf_window_s=self.bf_window_min * 60.0,
            bf_max_job_test=self.bf_max_job_test,
            bf_max_time_s=self.bf_max_time_s,
            sched_interval_s=self.sched_interval_s,
            clock_origin_s=clock_origin_s,
            controller=controller,
        )

    def spec(self, num_nodes: int, gpus_per_node: int) -> ClusterSpec:
        return ClusterSpec(
            num_nodes, gpus_per_node, self.nodes_per_leaf, partitions=self.partitions, qos=self.qos
        )


def node_names(count: int) -> list[str]:
    width = max(2, len(str(count)))
    return [f"gpu{index:0{width}d}" for index in range(1, count + 1)]


def _hostlist(names: list[str]) -> str:
    """``gpu01 gpu02 gpu03`` -> ``gpu[01-03]``, by python-hostlist (what Slurm sites use to collect)."""
    return str(hostlist.collect_hostlist(names))


def render(
    workdir: Path,
    names: list[str],
    gpus_per_node: int,
    ports: dict[str, int],
    *,
    with_db: bool,
    options: ClusterOptions,
) -> dict[str, str]:
    """File name (relative to ``workdir``) -> contents."""
    w = workdir
    hosts = _hostlist(names)
    first_port = ports["slurmd"]
    sched = (
        f"bf_interval={options.bf_interval_s},bf_max_time={options.bf_max_time_s},"
        f"bf_resolution={options.bf_resolution_s},"
        f"bf_window={options.bf_window_min},bf_max_job_test={options.bf_max_job_test},"
        f"sched_interval={options.sched_interval_s}"
    )
    auth = "AuthType=auth/munge\n"
    lines = [
        f"ClusterName={CLUSTER_NAME}",
        "SlurmctldHost=localhost(127.0.0.1)",
        f"SlurmctldPort={ports['slurmctld']}",
        auth.strip(),
        "CredType=cred/munge",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"StateSaveLocation={w}/state",
        f"SlurmdSpoolDir={w}/spool/%n",
        f"SlurmctldPidFile={w}/run/slurmctld.pid",
        f"SlurmdPidFile={w}/run/slurmd-%n.pid",
        f"SlurmctldLogFile={w}/log/slurmctld.log",
        # what mfukit.sched.slurm.ctldlog reads: every pass, start, plan and release, to the millisecond
        "SlurmctldDebug=debug",
        "DebugFlags=Backfill,TraceJobs",
        "LogTimeFormat=iso8601_ms",
        f"SlurmdLogFile={w}/log/slurmd-%n.log",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "MpiDefault=none",
        "SlurmdParameters=config_overrides",
        "ReturnToService=2",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core_Memory",
        f"DefMemPerCPU={DEF_MEM_PER_CPU_MB}",
        "GresTypes=gpu",
        "SchedulerType=sched/backfill",
        f"SchedulerParameters={sched}",
        "PriorityType=priority/multifactor",
        f"PriorityWeightPartition={options.weight_partition}",
        f"PriorityWeightJobSize={options.weight_job_size}",
        f"PriorityWeightQOS={options.weight_qos}",
        "PriorityWeightAge=0",
        "PriorityWeightFairshare=0",
        "JobRequeue=1",
        "MinJobAge=600",
        "KillWait=5",
        "InactiveLimit=0",
        "JobCompType=jobcomp/filetxt",
        f"JobCompLoc={w}/log/jobcomp.txt",
        "JobAcctGatherType=jobacct_gather/none",
    ]
    if with_db:
        lines += [
            "AccountingStorageType=accounting_storage/slurmdbd",
            "AccountingStorageHost=127.0.0.1",
            f"AccountingStoragePort={ports['slurmdbd']}",
            "AccountingStorageTRES=gres/gpu",
            "PreemptType=preempt/qos",
            "PreemptMode=REQUEUE",
        ]
    if options.nodes_per_leaf:
        lines.append("TopologyPlugin=topology/tree")
    lines.append(
        f"NodeName={hosts} NodeHostname=localhost NodeAddr=127.0.0.1 "
        f"Port=[{first_port}-{first_port + len(names) - 1}] CPUs={CPUS_PER_NODE} Sockets=2 "
        f"CoresPerSocket={CPUS_PER_NODE // 2} ThreadsPerCore=1 RealMemory={REAL_MEMORY_MB} "
        f"Gres=gpu:h100:{gpus_per_node} State=UNKNOWN"
    )
    for index, part in enumerate(options.partitions):
        lines.append(
            f"PartitionName={part.name} Nodes={hosts} {'Default=YES ' if index == 0 else ''}"
            f"MaxTime=INFINITE State=UP PriorityJobFactor={part.job_factor} PriorityTier={part.tier}"
        )
    files = {
        "etc/slurm.conf": "\n".join(lines) + "\n",
        "etc/gres.conf": (
            f"AutoDetect=off\nNodeName={hosts} Name=gpu Type=h100 File={w}/fakedev/nvidia[0-{gpus_per_node - 1}]\n"
        ),
    }
    if options.nodes_per_leaf:
        leaves = [names[i : i + options.nodes_per_leaf] for i in range(0, len(names), options.nodes_per_leaf)]
        topo = [f"SwitchName=leaf{i} Nodes={_hostlist(group)}" for i, group in enumerate(leaves)]
        topo.append(f"SwitchName=spine Switches=leaf[0-{len(leaves) - 1}]")
        files["etc/topology.conf"] = "\n".join(topo) + "\n"
    if with_db:
        files["etc/slurmdbd.conf"] = (
            f"{auth}DbdHost=localhost\nDbdAddr=127.0.0.1\nDbdPort={ports['slurmdbd']}\nSlurmUser=root\n"
            f"LogFile={w}/log/slurmdbd.log\nPidFile={w}/run/slurmdbd.pid\n"
            "StorageType=accounting_storage/mysql\nStorageHost=127.0.0.1\n"
            f"StoragePort={ports['mariadb']}\nStorageUser=slurm\nStoragePass=mfukit\nStorageLoc=slurm_acct_db\n"
        )
    return files


def sacctmgr_commands(options: ClusterOptions) -> str:
    """One ``sacctmgr -i`` session: the cluster, an account, root in it, and the QOS with preemption."""
    commands = [f"add cluster {CLUSTER_NAME}", "add account research Cluster=" + CLUSTER_NAME]
    for qos in options.qos:
        if qos.name != "normal":
            commands.append(f"add qos {qos.name}")
        preempt = f" Preempt={','.join(qos.preempts)} PreemptMode=requeue" if qos.preempts else ""
        commands.append(f"modify qos {qos.name} set Priority={qos.priority}{preempt}")
    names = ",".join(q.name for q in options.qos)
    commands.append(f"add user root Account=research Cluster={CLUSTER_NAME} QOS={names} DefaultQOS=normal")
    return "\n".join(commands) + "\nexit\n"
