"""Hardware as data: accelerators, nodes (systems), network links and switches, storage tiers.

These are the schemas of the catalog files in ``catalog/data/``. Users write quantities with units
("80GiB", "400Gbps", "989.4 TFLOPS"); the fields hold SI floats. Bandwidths are per direction unless
the name ends in ``_bidir``. Peak FLOP/s are dense, per device, keyed by dtype.
"""

from __future__ import annotations

from datetime import date
from typing import Literal

from pydantic import Field, model_validator

from mfukit.core.schema import Bytes, BytesPerSecond, FlopsPerSecond, PositiveInt, Seconds, Strict, Usd, Watts
from mfukit.errors import InputError

Dtype = Literal["fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "fp4"]
DTYPES: tuple[Dtype, ...] = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "fp4")


class Source(Strict):
    """Where a fact comes from: every catalog entry carries one."""

    url: str = Field(min_length=8)
    what: str = Field(min_length=3, description="what the source states, e.g. 'datasheet table, dense BF16'")
    retrieved: date


class SourcedFraction(Strict):
    """A 0..1 figure taken from a published measurement, with where it comes from."""

    value: float = Field(gt=0, le=1)
    url: str = Field(min_length=8)
    what: str = Field(min_length=3)
    retrieved: date


class AchievedGemm(Strict):
    """One dense GEMM (M x K) @ (K x N) and the FLOP/s the vendor's library measured on it."""

    flops_per_s: FlopsPerSecond = Field(alias="flops")
    m: PositiveInt
    n: PositiveInt
    k: PositiveInt


class MaxAchievableGemm(Strict):
    """The vendor's best measured GEMM per input type: what its libraries reach at the clock the part holds
    under dense matrix load, below the datasheet peak (which counts the boost clock). Where no training run
    calibrates a part, it sets the part's GEMM peak fractions (mfukit.perf.efficiency)."""

    bf16: AchievedGemm | None = None
    fp8: AchievedGemm | None = None
    url: str = Field(min_length=8)
    what: str = Field(min_length=3)
    retrieved: date


class Accelerator(Strict):
    """One device as the training job sees it (one GPU, one MI250X GCD, one TPU chip)."""

    name: str
    display_name: str
    vendor: Literal["nvidia", "amd", "google", "intel"]
    generation: str
    peak_flops_per_s: dict[Dtype, FlopsPerSecond] = Field(alias="peak_flops")
    sparse_peak_flops_per_s: dict[Dtype, FlopsPerSecond] = Field(
        default_factory=dict, alias="sparse_peak_flops"
    )
    hbm_bytes: Bytes = Field(alias="hbm")
    hbm_bytes_per_s: BytesPerSecond = Field(alias="hbm_bandwidth")
    scale_up_bytes_per_s: BytesPerSecond = Field(alias="scale_up_bandwidth", description="per direction")
    tdp_w: Watts | None = Field(
        default=None,
        alias="tdp",
        description="board power; None only where the vendor publishes none (TPU v5p), said in notes",
    )
    host_link_bytes_per_s: BytesPerSecond | None = Field(
        default=None,
        alias="host_link_bandwidth",
        description="device <-> host (PCIe) bandwidth per direction: bounds checkpoint staging to host memory",
    )
    compute_units: PositiveInt | None = Field(
        default=None,
        description="streaming multiprocessors (NVIDIA) or compute units (AMD): what a GEMM's output tiles "
        "are spread over, one wave of tiles at a time; None where not published (the wave model is then off)",
    )
    default_system: str | None = None
    max_achievable_gemm: MaxAchievableGemm | None = None
    typical_mfu: SourcedFraction | None = Field(
        default=None,
        description="MFU that large published runs on this generation reach: the planning MFU where the "
        "performance model cannot predict one (no global batch), and where its GPU-count searches start",
    )
    notes: str = ""
    source: Source

    def peak_flops(self, dtype: Dtype) -> float:
        """Dense peak FLOP/s for ``dtype``; an InputError if the device has no such math."""
        if dtype not in self.peak_flops_per_s:
            raise InputError(
                f"{self.name} has no {dtype} peak in the catalog",
                field="precision",
                value=dtype,
                expected=", ".join(sorted(self.peak_flops_per_s)),
            )
        return self.peak_flops_per_s[dtype]


class SourcedEnv(Strict):
    """Environment variables a node's jobs need (NCCL's HCA list, ...), with where they come from."""

    variables: dict[str, str] = Field(min_length=1)
    url: str = Field(min_length=8)
    what: str = Field(min_length=3)
    retrieved: date


class System(Strict):
    """A node (or a rack-scale scale-up domain such as GB200 NVL72) as bought and cabled."""

    name: str
    display_name: str
    accelerator: str
    gpus_per_node: PositiveInt
    scale_up_domain_gpus: PositiveInt = Field(description="GPUs sharing one NVLink/xGMI domain")
    scale_up_fabric: str
    nics_per_node: int = Field(ge=0)
    nic_bytes_per_s: BytesPerSecond = Field(alias="nic_rate", description="per NIC, per direction")
    scale_out_fabric: str
    host_memory_bytes: Bytes = Field(alias="host_memory")
    host_memory_bytes_per_s: BytesPerSecond | None = Field(
        default=None,
        alias="host_memory_bandwidth",
        description="the node's CPU DRAM bandwidth (all sockets): bounds a CPU optimizer step (ZeRO-Offload)",
    )
    host_cpu_cores: PositiveInt | None = Field(
        default=None,
        description="the node's CPU cores (all sockets), shared by its GPUs' CPU optimizer steps",
    )
    node_power_w: Watts | None = Field(default=None, alias="node_power")
    nccl_env: SourcedEnv | None = Field(
        default=None, description="NCCL variables a job on this node needs (emitted into sbatch/k8s jobs)"
    )
    notes: str = ""
    source: Source

    @property
    def scale_out_bytes_per_s_per_node(self) -> float:
        """Aggregate NIC bandwidth of one node, per direction."""
        return self.nics_per_node * self.nic_bytes_per_s

    @model_validator(mode="after")
    def _domain_holds_whole_nodes(self) -> System:
        if self.scale_up_domain_gpus % self.gpus_per_node:
            raise ValueError("scale_up_domain_gpus must be a multiple of gpus_per_node")
        return self


class MeasuredNccl(Strict):
    """How NCCL's collectives ran on a scale-out link in published nccl-tests results, where NCCL's InfiniBand
    constants do not describe it: the fraction of the NICs' line rate they moved and the extra latency per
    network step, fitted to those results with the collective model (``python -m mfukit.perf.calibrate_network``).
    """

    efficiency: float = Field(gt=0, le=1, description="busbw-equivalent share of the NICs' line rate")
    step_latency_s: Seconds = Field(
        alias="step_latency", description="extra per network step of every algorithm"
    )
    fit: str = Field(
        min_length=3, description="what was fitted: collectives, node counts, sizes, the fit's error"
    )
    source: Source


class Link(Strict):
    """A link technology: an InfiniBand or Ethernet generation, or an NVLink generation."""

    type: Literal["link"] = "link"
    name: str
    display_name: str
    family: Literal["infiniband", "roce", "ethernet", "nvlink", "xgmi", "ici", "pcie"]
    port_bytes_per_s: BytesPerSecond = Field(alias="port_rate", description="per port, per direction")
    latency_s: Seconds = Field(alias="latency", description="one switch hop (or one NVLink hop)")
    encoding_efficiency: float = Field(
        default=1.0, gt=0, le=1, description="payload fraction of the signalled rate after line coding"
    )
    notes: str = ""
    source: Source
    nccl: MeasuredNccl | None = Field(
        default=None,
        description="NCCL measured on this link (nccl-tests), where its InfiniBand constants do not hold",
    )


class PortConfig(Strict):
    ports: PositiveInt
    port_bytes_per_s: BytesPerSecond = Field(alias="rate")


class Switch(Strict):
    """A switch SKU: its radix at each supported port speed, power and (optionally) price."""

    type: Literal["switch"] = "switch"
    name: str
    display_name: str
    link: str = Field(description="the link technology it speaks (a Link name)")
    port_configs: list[PortConfig] = Field(min_length=1)
    latency_s: Seconds = Field(alias="latency")
    power_w: Watts | None = Field(
        default=None,
        alias="power",
        description="typical with all ports populated, without optics; None where the cited source gives "
        "no figure (said in notes)",
    )
    rack_units: PositiveInt = 1
    price_usd: Usd | None = Field(default=None, alias="price")
    notes: str = ""
    source: Source

    @property
    def switching_capacity_bytes_per_s(self) -> float:
        return max(c.ports * c.port_bytes_per_s for c in self.port_configs)

    def radix_at(self, port_bytes_per_s: float) -> int:
        """Ports available at ``port_bytes_per_s`` (a split port counts as several)."""
        fitting = [c for c in self.port_configs if c.port_bytes_per_s >= port_bytes_per_s * 0.999]
        if not fitting:
            return 0
        return max(c.ports for c in fitting if c.port_bytes_per_s == min(f.port_bytes_per_s for f in fitting))


class StorageTier(Strict):
    """A storage tier with default bandwidths a site should override with its own measurements."""

    name: str
    display_name: str
    kind: Literal["parallel-fs", "flash-fs", "local-nvme", "object-store"]
    per_client_write_bytes_per_s: BytesPerSecond = Field(alias="per_client_write")
    per_client_read_bytes_per_s: BytesPerSecond = Field(alias="per_client_read")
    aggregate_write_bytes_per_s: BytesPerSecond | None = Field(
        default=None, alias="aggregate_write", description="None: scales with clients (local NVMe)"
    )
    aggregate_read_bytes_per_s: BytesPerSecond | None = Field(default=None, alias="aggregate_read")
    open_latency_s: Seconds = Field(alias="open_latency", description="metadata cost per file created")
    notes: str = ""
    source: Source

    def write_bytes_per_s(self, num_clients: int) -> float:
        """Sustained write bandwidth when ``num_clients`` nodes write at once."""
        per_clients = num_clients * self.per_client_write_bytes_per_s
        if self.aggregate_write_bytes_per_s is None:
            return per_clients
        return min(per_clients, self.aggregate_write_bytes_per_s)

    def read_bytes_per_s(self, num_clients: int) -> float:
        per_clients = num_clients * self.per_client_read_bytes_per_s
        if self.aggregate_read_bytes_per_s is None:
            return per_clients
        return min(per_clients, self.aggregate_read_bytes_per_s)
