"""A resolved cluster: which node, which accelerator, how many, which storage."""

from __future__ import annotations

import math
from dataclasses import dataclass

from mfukit.core.hardware import Accelerator, StorageTier, System


@dataclass(frozen=True)
class Cluster:
    system: System
    accelerator: Accelerator
    num_gpus: int
    storage: StorageTier | None = None
    node_failure_rate_per_s: float | None = None
    """``[cluster] failure_rate_per_1000_node_days`` in failures per second per node"""

    @property
    def gpus_per_node(self) -> int:
        return self.system.gpus_per_node

    @property
    def num_nodes(self) -> int:
        return math.ceil(self.num_gpus / self.system.gpus_per_node)

    @property
    def scale_out_bytes_per_s_per_gpu(self) -> float:
        """The node's NIC bandwidth shared by its GPUs, per direction."""
        return self.system.scale_out_bytes_per_s_per_node / self.system.gpus_per_node
