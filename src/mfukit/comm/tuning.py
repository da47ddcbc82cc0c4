"""NCCL's tuning constants (``comm/data/nccl.toml``): latencies per step, protocol factors, NVLink and
NIC efficiencies. Facts as data, each with its source; :mod:`mfukit.comm.model` turns them into times."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Literal

import numpy as np
import numpy.typing as npt
from pydantic import Field

from mfukit.core.hardware import Source
from mfukit.core.scenario import read_document
from mfukit.core.schema import Strict, validate_as

NcclAlgorithm = Literal["tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree"]
Protocol = Literal["ll", "ll128", "simple"]
PROTOCOLS: tuple[Protocol, ...] = ("ll", "ll128", "simple")
Arch = Literal["volta", "ampere", "hopper", "blackwell"]
CpuVendor = Literal["intel", "amd"]

DATA = Path(__file__).parent / "data" / "nccl.toml"


class PerProtocol(Strict):
    ll: float = Field(ge=0)
    ll128: float = Field(ge=0)
    simple: float = Field(ge=0)

    def of(self, protocol: Protocol) -> float:
        return float(getattr(self, protocol))


class LatencyTable(Strict):
    tree: PerProtocol
    ring: PerProtocol
    collnet_direct: PerProtocol
    collnet_chain: PerProtocol
    nvls: PerProtocol
    nvls_tree: PerProtocol

    def of(self, algorithm: NcclAlgorithm, protocol: Protocol) -> float:
        table: PerProtocol = getattr(self, algorithm)
        return table.of(protocol) * 1e-6


class Latencies(Strict):
    base: LatencyTable
    nvlink: LatencyTable
    pci: LatencyTable
    net: LatencyTable


class ProtocolFactors(Strict):
    ring_ll: float
    ring_ll_single_node: float
    ring_ll128: float
    ring_ll128_one_gpu_per_node: float
    tree: float
    tree_ll: float
    tree_ll128_single_node: float
    tree_ll128: float
    collnet: float
    collnet_arity_us: float


class NodeCountCaps(Strict):
    two_nodes: float
    more_nodes: float


class LlMaxBw(Strict):
    single_node: dict[Arch, float]
    intel: NodeCountCaps
    amd: NodeCountCaps


class ArchConstants(Strict):
    nvlink_nccl_gb_per_s_per_link: float = Field(gt=0)
    nvlink_line_gb_per_s_per_link: float = Field(gt=0)
    nvls_efficiency: float = Field(ge=0, le=1)

    @property
    def nvlink_efficiency(self) -> float:
        """Fraction of the NVLink line rate NCCL moves as busbw (20.6/25 = 0.824 on Hopper)."""
        return self.nvlink_nccl_gb_per_s_per_link / self.nvlink_line_gb_per_s_per_link


class Nvls(Strict):
    channels: int = Field(ge=2)


class ScaleUp(Strict):
    generic_efficiency: float = Field(gt=0, le=1)


class Network(Strict):
    efficiency: float = Field(gt=0, le=1)


class NcclConstants(Strict):
    source: Source
    latency_us: Latencies
    net_overhead_us: dict[CpuVendor, float]
    protocol: ProtocolFactors
    ll_max_gb_per_s: LlMaxBw
    tree_correction: dict[Protocol, list[float]]
    arch: dict[Arch, ArchConstants]
    nvls: Nvls
    scale_up: ScaleUp
    network: Network

    def ll_max_bytes_per_s(self, arch: Arch | None, num_nodes: int, cpu: CpuVendor) -> float:
        """llMaxBw: by GPU generation on one node (unknown generations: the lowest), by CPU vendor beyond."""
        caps = self.ll_max_gb_per_s
        if num_nodes <= 1:
            value = caps.single_node[arch] if arch is not None else min(caps.single_node.values())
        else:
            row = caps.intel if cpu == "intel" else caps.amd
            value = row.two_nodes if num_nodes == 2 else row.more_nodes
        return value * 1e9

    def tree_correction_factor(
        self, protocol: Protocol, message_bytes: npt.NDArray[np.float64]
    ) -> npt.NDArray[np.float64]:
        """treeCorrectionFactor at log2i(bytes >> 6), as NCCL indexes it; 1 beyond the table (256 MiB)."""
        table = np.asarray([*self.tree_correction[protocol], 1.0])
        chunks = np.maximum(np.floor(np.asarray(message_bytes, dtype=np.float64) / 64.0), 1.0)
        index = np.minimum(np.floor(np.log2(chunks)).astype(np.int64), len(table) - 1)
        return np.asarray(table[index], dtype=np.float64)


@cache
def constants() -> NcclConstants:
    """The shipped NCCL constants (validated once)."""
    return validate_as(NcclConstants, read_document(DATA), source=str(DATA))
