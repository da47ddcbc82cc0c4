"""A job as the simulator and the analytics see it: what it asked for, and what happened to it.

A request is ``num_nodes`` nodes with ``gpus_per_node`` GPUs each, all-or-nothing (what DL papers call
gang scheduling; Slurm's "gang scheduling" is time-slicing, which this is not). ``run_s`` is how long
the job runs when left alone; ``limit_s`` its time limit: a job whose ``run_s`` exceeds its limit is
killed at the limit (TIMEOUT), as Slurm does. The outcome fields (``start_s``, ``end_s``, ``state``,
``nodes``) are set by the simulator, or read from a real cluster's accounting by the ``sacct`` readers.
"""

from __future__ import annotations

import math
from typing import Final

# Final states, named as sacct names them.
PENDING: Final = "PENDING"
RUNNING: Final = "RUNNING"
COMPLETED: Final = "COMPLETED"
FAILED: Final = "FAILED"
TIMEOUT: Final = "TIMEOUT"
CANCELLED: Final = "CANCELLED"
NODE_FAIL: Final = "NODE_FAIL"
PREEMPTED: Final = "PREEMPTED"
OUT_OF_MEMORY: Final = "OUT_OF_MEMORY"
ENDED_STATES: Final = frozenset({COMPLETED, FAILED, TIMEOUT, CANCELLED, NODE_FAIL, PREEMPTED, OUT_OF_MEMORY})
FAILURE_STATES: Final = frozenset({FAILED, NODE_FAIL, OUT_OF_MEMORY})

# GPU-count classes for wait-time percentiles: single GPU, one node, a few nodes, a rack, larger.
SIZE_CLASSES: Final[tuple[tuple[str, int, float], ...]] = (
    ("1 GPU", 1, 1),
    ("2-8 GPUs", 2, 8),
    ("9-64 GPUs", 9, 64),
    ("65-512 GPUs", 65, 512),
    (">512 GPUs", 513, math.inf),
)


def size_class(num_gpus: int) -> str:
    for name, low, high in SIZE_CLASSES:
        if low <= num_gpus <= high:
            return name
    return SIZE_CLASSES[0][0]


def shape_for_gpus(num_gpus: int, gpus_per_node: int) -> tuple[int, int]:
    """(nodes, GPUs per node) for a request of ``num_gpus`` GPUs on ``gpus_per_node``-GPU nodes.

    Up to one node's worth stays on one node; more is spread evenly over the fewest nodes
    (12 GPUs on 8-GPU nodes -> 2 nodes x 6), as ``--gpus=12`` with ``--gpus-per-node`` unset would be.
    """
    if num_gpus <= gpus_per_node:
        return 1, max(1, num_gpus)
    nodes = math.ceil(num_gpus / gpus_per_node)
    return nodes, math.ceil(num_gpus / nodes)


class Job:
    """One job. Plain slots, not a dataclass: the simulator touches millions of these."""

    __slots__ = (
        "attempt",
        "backfilled",
        "eligible_s",
        "end_s",
        "exit_state",
        "first_start_s",
        "gpus_per_node",
        "job_id",
        "limit_s",
        "lost_gpu_s",
        "max_switches",
        "name",
        "nice",
        "node_fail_requeues",
        "node_names",
        "nodes",
        "num_nodes",
        "partition",
        "qos",
        "restarts",
        "run_s",
        "shape",
        "start_s",
        "state",
        "submit_s",
        "switch_wait_s",
        "user",
    )

    def __init__(
        self,
        job_id: int,
        submit_s: float,
        run_s: float,
        limit_s: float,
        num_nodes: int,
        gpus_per_node: int,
        *,
        partition: str = "batch",
        qos: str = "normal",
        user: str = "",
        name: str = "",
        nice: int = 0,
        max_switches: int = 0,
        switch_wait_s: float = 0.0,
        exit_state: str = COMPLETED,
    ) -> None:
        self.job_id = job_id
        self.submit_s = submit_s
        self.run_s = run_s
        self.limit_s = limit_s
        self.num_nodes = num_nodes
        self.gpus_per_node = gpus_per_node
        self.partition = partition
        self.qos = qos
        self.user = user
        self.name = name
        self.nice = nice
        self.max_switches = max_switches
        self.switch_wait_s = switch_wait_s
        self.exit_state = exit_state  # how the job ends when it runs to completion (COMPLETED or FAILED)
        self.shape = num_nodes * 1024 + gpus_per_node  # one int per request shape, for fast grouping
        self.reset()

    def reset(self) -> None:
        """Forget any outcome: the job is as submitted."""
        self.eligible_s = self.submit_s
        self.start_s: float | None = None
        self.first_start_s: float | None = None
        self.end_s: float | None = None
        self.state = PENDING
        self.nodes: tuple[int, ...] = ()
        self.node_names: tuple[str, ...] = ()
        self.restarts = 0
        self.node_fail_requeues = 0
        self.attempt = 0
        self.lost_gpu_s = 0.0
        self.backfilled = False

    @property
    def num_gpus(self) -> int:
        return self.num_nodes * self.gpus_per_node

    @property
    def wait_s(self) -> float | None:
        """Queue wait: first start minus submission (what the user perceives)."""
        first = self.first_start_s if self.first_start_s is not None else self.start_s
        return None if first is None else first - self.submit_s

    def __repr__(self) -> str:
        return (
            f"Job({self.job_id}, submit={self.submit_s}, run={self.run_s}, limit={self.limit_s}, "
            f"{self.num_nodes}x{self.gpus_per_node}, {self.partition}/{self.qos}, {self.state})"
        )
