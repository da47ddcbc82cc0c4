"""Checkpoint size and the time to write, read and stage it.

Size. A *resumable* mixed-precision Adam checkpoint holds the fp32 master weights and both Adam moments
(4 + 4 + 4 = 12 bytes per parameter), plus a bf16/fp16 copy of the weights where the framework keeps
one (14 B). It is not "parameters x 4" (that is an fp32 weights-only export), and not ZeRO's 16 B/param,
which is the *training memory* count 2 + 2 + 12 and includes gradients, which are never saved
(Rajbhandari et al., SC'20 §3.1). BLOOM-176B's checkpoint "with fp32 optim states and bf16+fp32 weights
is 2.3TB" (~13-14 B/param).

Time. Every rank writes its shard (DCP's FileSystemWriter, one file per rank; replicated tensors are
deduplicated across ranks), so a sharded save takes S / min(storage aggregate, nodes x per-client,
nodes x NIC) plus one file create per rank on each node. A single-writer save (the full state gathered
to one rank and written with torch.save) is limited by one client. An asynchronous save (CheckFreq,
FAST'21; DCP ``async_save``) blocks only for the device-to-host copy of a rank's shard over its PCIe link,
then persists in the background at the sharded-write rate; the next save cannot start before it is done.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from mfukit.core.cluster import Cluster
from mfukit.core.hardware import StorageTier
from mfukit.core.parallelism import Parallelism
from mfukit.core.scenario import Precision

StateConvention = Literal["fsdp", "megatron", "deepspeed"]
Mode = Literal["sync", "async", "single"]
MODES: tuple[Mode, ...] = ("single", "sync", "async")

MASTER_WEIGHT_BYTES = 4.0  # fp32 master copy (or the fp32 parameters themselves)
ADAM_MOMENT_BYTES = 4.0  # each of exp_avg and exp_avg_sq, fp32
LOW_PRECISION_WEIGHT_BYTES = 2.0  # bf16/fp16 model weights saved beside the master copy

STATE_DESCRIPTIONS: dict[StateConvention, str] = {
    "fsdp": "FSDP2/torchtitan: fp32 sharded parameters + Adam exp_avg + exp_avg_sq (bf16 is a compute cast)",
    "megatron": "Megatron-LM distributed optimizer: bf16 weights + fp32 main params + Adam m, v",
    "deepspeed": "DeepSpeed ZeRO: bf16 module states + fp32 optimizer partitions (master, m, v)",
}


def bytes_per_param(convention: StateConvention, precision: Precision) -> float:
    """Bytes per parameter of a resumable Adam checkpoint under ``convention``."""
    state = MASTER_WEIGHT_BYTES + 2 * ADAM_MOMENT_BYTES
    keeps_copy = convention in ("megatron", "deepspeed") and precision != "fp32"
    return state + (LOW_PRECISION_WEIGHT_BYTES if keeps_copy else 0.0)


def state_convention(requested: str, layout: Parallelism | None) -> StateConvention:
    if requested == "fsdp" or (requested == "auto" and layout is not None and layout.fsdp != "none"):
        return "fsdp"
    if requested == "deepspeed":
        return "deepspeed"
    return "megatron"


@dataclass(frozen=True)
class SaveCost:
    """One way of saving: how long training stalls and how long until the checkpoint is durable."""

    mode: Mode
    write_s: float
    blocking_s: float
    persist_s: float


@dataclass(frozen=True)
class CheckpointIO:
    convention: StateConvention
    bytes_per_param: float
    checkpoint_bytes: float
    per_rank_bytes: float
    per_node_bytes: float
    write_bytes_per_s: float
    read_bytes_per_s: float
    read_s: float
    host_link_bytes_per_s: float | None
    saves: dict[Mode, SaveCost]

    def save(self, mode: Mode) -> SaveCost:
        return self.saves[mode]


def _storage_rate(tier: StorageTier, clients: int, nic_bytes_per_s: float, *, read: bool) -> float:
    """Aggregate rate when ``clients`` nodes move data at once: the tier's limit and each node's NIC."""
    tier_rate = tier.read_bytes_per_s(clients) if read else tier.write_bytes_per_s(clients)
    return min(tier_rate, clients * nic_bytes_per_s)


def checkpoint_io(
    *,
    params: float,
    convention: StateConvention,
    precision: Precision,
    cluster: Cluster,
    storage: StorageTier,
) -> CheckpointIO:
    per_param = bytes_per_param(convention, precision)
    total = params * per_param
    nodes = cluster.num_nodes
    per_rank = total / cluster.num_gpus
    per_node = per_rank * cluster.gpus_per_node
    nic = cluster.system.scale_out_bytes_per_s_per_node
    write_rate = _storage_rate(storage, nodes, nic, read=False)
    read_rate = _storage_rate(storage, nodes, nic, read=True)
    sharded_write = total / write_rate + cluster.gpus_per_node * storage.open_latency_s
    single_write = total / _storage_rate(storage, 1, nic, read=False) + storage.open_latency_s
    host_link = cluster.accelerator.host_link_bytes_per_s
    staging = per_rank / host_link if host_link else sharded_write
    saves: dict[Mode, SaveCost] = {
        "single": SaveCost("single", single_write, single_write, 0.0),
        "sync": SaveCost("sync", sharded_write, sharded_write, 0.0),
        "async": SaveCost("async", sharded_write, staging, sharded_write),
    }
    return CheckpointIO(
        convention=convention,
        bytes_per_param=per_param,
        checkpoint_bytes=total,
        per_rank_bytes=per_rank,
        per_node_bytes=per_node,
        write_bytes_per_s=write_rate,
        read_bytes_per_s=read_rate,
        read_s=total / read_rate,
        host_link_bytes_per_s=host_link,
        saves=saves,
    )
