"""What a collective costs on a given cluster: time, algbw and busbw (nccl-tests semantics), the algorithm
NCCL would pick, and which tier limits it.

The model is alpha-beta per algorithm, ``t = latency + S / algbw``:

* **bandwidth** comes from the tiers of :class:`~mfukit.comm.topology.CommTopology` (effective NVLink per
  GPU, NIC share per GPU, leaf oversubscription) and the traffic each algorithm puts on them. A ring moves
  ``2(P-1)/P S`` through every GPU and one GPU's worth per node through the NICs, so its busbw is
  ``min(NVLink, node NICs)`` (Patarasuk & Yuan 2009; 192 GB/s for 8x HDR, nccl#1576). A double binary
  tree moves ``S`` per node each way on 2 nodes and ``2S`` on more (each node is interior in one tree and
  a leaf in the other); NVLS moves ``S`` per GPU each way through the NVSwitch, which reduces in flight;
  CollNet/SHARP moves ``S`` per node each way whatever the node count. What each GPU's NIC share carries
  per byte of message is one function, :func:`nic_bytes_per_byte`; the network term of those algorithms
  is the NIC share's bandwidth over it, and ``perf.traffic`` uses the same bytes for the gradient traffic.
* **protocol factors and latencies** are NCCL's own (``comm/data/nccl.toml``, src/graph/tuning.cc):
  LL keeps half of each 8-byte word for flags and is capped by llMaxBw, LL128 keeps 120 of 128 bytes,
  Simple moves full lines but pays more per step; each step costs NCCL's hwLat on NVLink, PCI or the
  network, plus our extra switch hops beyond the first.
* **selection** (``algorithm="auto"``) takes the fastest of what NCCL itself considers (ring, tree, NVLS,
  NVLSTree, CollNet when SHARP is on, point-to-point), per size, which yields the ring/tree crossover.
  Recursive halving-doubling (Rabenseifner; Thakur et al. 2005), hierarchical all-reduce and Bruck
  all-to-all are MPI-style alternatives, priced per step with NCCL's LL step latency.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Literal

import numpy as np
import numpy.typing as npt

from mfukit.comm.collectives import Collective, busbw_factor
from mfukit.comm.topology import CommTopology, spread, switch_hops
from mfukit.comm.tuning import PROTOCOLS, LatencyTable, NcclAlgorithm, NcclConstants, Protocol, constants
from mfukit.errors import InputError, UnknownNameError

Algorithm = Literal[
    "ring", "tree", "nvls", "nvls_tree", "collnet", "rhd", "hierarchical", "pairwise", "bruck", "p2p"
]
ALGORITHMS: Final[tuple[Algorithm, ...]] = (
    "ring",
    "tree",
    "nvls",
    "nvls_tree",
    "collnet",
    "rhd",
    "hierarchical",
    "pairwise",
    "bruck",
    "p2p",
)
# Algorithms NCCL itself chooses from; the others are what-if alternatives chosen only by name.
NCCL_CHOICES: Final[frozenset[Algorithm]] = frozenset(
    {"ring", "tree", "nvls", "nvls_tree", "collnet", "pairwise", "p2p"}
)
APPLIES: Final[dict[Algorithm, tuple[Collective, ...]]] = {
    "ring": ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce"),
    "tree": ("all_reduce",),
    "nvls": ("all_reduce", "reduce_scatter", "all_gather"),
    "nvls_tree": ("all_reduce",),
    "collnet": ("all_reduce",),
    "rhd": ("all_reduce",),
    "hierarchical": ("all_reduce",),
    "pairwise": ("all_to_all",),
    "bruck": ("all_to_all",),
    "p2p": ("send_recv",),
}
Floats = npt.NDArray[np.float64]
NicAlgorithm = Literal["ring", "tree", "nvls", "nvls_tree", "collnet", "hierarchical"]
NIC_ALGORITHMS: Final[tuple[NicAlgorithm, ...]] = (
    "ring",
    "tree",
    "nvls",
    "nvls_tree",
    "collnet",
    "hierarchical",
)


@dataclass(frozen=True)
class Group:
    """Where the ranks of one communicator sit."""

    num_gpus: int
    gpus_per_domain: int
    num_domains: int
    num_nodes: int
    switch_hops: int
    smallest_domain_gpus: int
    """GPUs in the least-populated domain: fewer than ``gpus_per_domain`` when the last node is partial"""

    @property
    def partial(self) -> bool:
        return self.smallest_domain_gpus < self.gpus_per_domain


@dataclass(frozen=True)
class Estimate:
    """One algorithm with one protocol: its latency, its algbw per message size, and what limits it."""

    algorithm: Algorithm
    protocol: Protocol
    latency_s: float
    algbw_bytes_per_s: Floats
    bottleneck: str

    def time_s(self, message_bytes: Floats) -> Floats:
        return np.asarray(self.latency_s + message_bytes / self.algbw_bytes_per_s, dtype=np.float64)


@dataclass(frozen=True)
class Prediction:
    """The model's answer per message size, in nccl-tests' terms (GB/s are 1e9 bytes/s)."""

    collective: Collective
    group: Group
    message_bytes: Floats
    time_s: Floats
    algbw_bytes_per_s: Floats
    busbw_bytes_per_s: Floats
    latency_s: Floats
    algorithm: list[str]
    protocol: list[str]
    bottleneck: list[str]


def nic_bytes_per_byte(algorithm: NicAlgorithm, collective: Collective, group: Group) -> float:
    """Bytes each GPU sends through its share of its domain's NICs, per direction, per byte of message
    (nccl-tests' size: the whole buffer for all-reduce, reduce-scatter and all-gather); 0 inside one domain.

    * ring: each of the node's rings leaves it once (NCCL places one channel per NIC), and a ring rank sends
      nccl-tests' busbw factor x S, so the domain's NICs carry that, shared by its ``g`` GPUs:
      2(P-1)/P x S / g for an all-reduce of P ranks, (P-1)/P x S / g for reduce-scatter and all-gather;
    * tree and NVLS tree (double binary tree between nodes): S per node on 2 nodes, 2S beyond;
    * CollNet (SHARP): S per node, reduced in the switch;
    * hierarchical: intra-node reduce-scatter, an all-reduce of each GPU's 1/g shard across the D domains
      on g parallel rings, intra-node all-gather: 2(D-1)/D x S / g;
    * NVLS: inside one domain only.
    """
    p, g, d = group.num_gpus, group.gpus_per_domain, group.num_domains
    if d == 1 or algorithm == "nvls":
        return 0.0
    if algorithm == "ring":
        return float(busbw_factor(collective, p)) / g
    if algorithm in ("tree", "nvls_tree"):
        return (1.0 if d == 2 else 2.0) / g
    if algorithm == "collnet":
        return 1.0 / g
    return 2.0 * (d - 1) / d / g


class _Costs:
    """The per-algorithm formulas for one collective on one group of one topology. Locals follow the
    formulas' notation: ``p`` GPUs in the group, ``g`` of them per scale-up domain, ``d`` domains."""

    def __init__(self, collective: Collective, topology: CommTopology, group: Group, tuning: NcclConstants):
        self.collective = collective
        self.topology = topology
        self.group = group
        self.tuning = tuning
        g, d = group.gpus_per_domain, group.num_domains
        self.intra_bw = topology.intra_bytes_per_s if g > 1 else math.inf
        self.net_bw = g * topology.nic_bytes_per_s_per_gpu if d > 1 else math.inf
        leaf = topology.nodes_per_leaf
        beyond_leaf = leaf is not None and group.num_nodes > leaf
        # A ring or tree crosses a leaf group's uplinks with one node's worth of traffic; the uplinks carry
        # nodes_per_leaf nodes' worth / oversubscription, so only oversubscription beyond that slows it.
        self.ring_oversub = max(1.0, topology.oversubscription / leaf) if beyond_leaf and leaf else 1.0
        # All-to-all sends the fraction of its traffic bound outside the leaf group through the uplinks.
        remote = (group.num_nodes - leaf) / (group.num_nodes - 1) if beyond_leaf and leaf else 0.0
        self.a2a_oversub = max(1.0, remote * topology.oversubscription)
        self.intra_lat: LatencyTable = (
            tuning.latency_us.nvlink if topology.scale_up_kind == "nvlink" else (tuning.latency_us.pci)
        )
        self.extra_hop_s = max(0, group.switch_hops - 1) * topology.switch_latency_s
        self.ll_max = tuning.ll_max_bytes_per_s(topology.arch, group.num_domains, topology.cpu)
        self.nvls_eff = topology.nvls_efficiency * (tuning.nvls.channels - 1) / tuning.nvls.channels

    # ---------------------------------------------------------------- helpers

    def base(self, algorithm: NcclAlgorithm, protocol: Protocol) -> float:
        return self.tuning.latency_us.base.of(algorithm, protocol)

    def intra(self, algorithm: NcclAlgorithm, protocol: Protocol) -> float:
        return self.intra_lat.of(algorithm, protocol)

    def inter(self, algorithm: NcclAlgorithm, protocol: Protocol) -> float:
        return (
            self.tuning.latency_us.net.of(algorithm, protocol)
            + self.extra_hop_s
            + self.topology.net_step_latency_s
        )

    def network(self, oversub: float) -> tuple[str, float]:
        name = "leaf uplinks (oversubscribed)" if oversub > 1.0 else "network (NICs)"
        return name, self.net_bw / oversub

    def network_algbw(self, algorithm: NicAlgorithm) -> tuple[str, float]:
        """The algbw the NICs allow ``algorithm``: each GPU's NIC share over the bytes it carries per byte
        of message (:func:`nic_bytes_per_byte`), behind the leaf uplinks' oversubscription."""
        name, _ = self.network(self.ring_oversub)
        share = nic_bytes_per_byte(algorithm, self.collective, self.group)
        # Every domain moves the same bytes through its NICs, and a partial domain has only its GPUs' NICs:
        # NCCL builds the same channels on every node (nChannels is the minimum over ranks; NVLS trees have
        # minLocalRanks heads, one NIC each), so the least-populated domain bounds the whole collective.
        nic = self.topology.nic_bytes_per_s_per_gpu / self.ring_oversub
        nic *= self.group.smallest_domain_gpus / self.group.gpus_per_domain
        if self.group.partial and self.ring_oversub == 1.0:
            name = f"network (NICs of the {self.group.smallest_domain_gpus}-GPU partial node)"
        return name, nic / share if share > 0 else math.inf

    def scale_up(self) -> tuple[str, float]:
        return self.topology.scale_up_link, self.intra_bw

    def sizes(self, message_bytes: Floats, value: float) -> Floats:
        return np.full_like(message_bytes, value, dtype=np.float64)

    # ---------------------------------------------------------------- NCCL algorithms

    def ring(self, protocol: Protocol, s: Floats) -> Estimate | None:
        p, g, d = self.group.num_gpus, self.group.gpus_per_domain, self.group.num_domains
        factor = float(busbw_factor(self.collective, p))
        net_name, net_algbw = self.network_algbw("ring")
        name, busbw = min([self.scale_up(), (net_name, net_algbw * factor)], key=lambda x: x[1])
        if protocol == "ll":
            multi = d > 1 or self.collective in ("all_reduce", "reduce")
            busbw *= self.tuning.protocol.ring_ll if multi else self.tuning.protocol.ring_ll_single_node
            if busbw > self.ll_max:
                name, busbw = "LL protocol ceiling (llMaxBw)", self.ll_max
        elif protocol == "ll128":
            if self.topology.scale_up_kind != "nvlink":
                return None
            busbw *= (
                self.tuning.protocol.ring_ll128
                if g >= 2
                else self.tuning.protocol.ring_ll128_one_gpu_per_node
            )
        algbw = busbw / factor
        if self.collective in ("broadcast", "reduce"):
            # NCCL prices a pipelined chain at nRanks steps; Simple steps at the Tree/Simple step cost.
            step_algorithm: NcclAlgorithm = "tree" if protocol == "simple" else "ring"
            step = self.inter(step_algorithm, protocol) if d > 1 else self.intra(step_algorithm, protocol)
            latency = self.base("ring", protocol) + p * step
        else:
            steps = 2 * (p - 1) if self.collective == "all_reduce" else p - 1
            inter_steps = 0 if d == 1 else min(steps, 2 * d if self.collective == "all_reduce" else d - 1)
            intra_step = self.intra("ring", protocol)
            if d > 1:
                # a ring that crosses the network moves at its slowest hop: NCCL charges every step the
                # network's per-message overhead, and a transport's own extra latency with it
                overhead = self.tuning.net_overhead_us[self.topology.cpu] * (
                    3.0 if protocol == "simple" else 1.0
                )
                intra_step = max(intra_step, overhead * 1e-6 + self.topology.net_step_latency_s)
            latency = (
                self.base("ring", protocol)
                + (steps - inter_steps) * intra_step
                + inter_steps * self.inter("ring", protocol)
            )
        return Estimate("ring", protocol, latency, self.sizes(s, algbw), name)

    def tree(self, protocol: Protocol, s: Floats) -> Estimate:
        g, d = self.group.gpus_per_domain, self.group.num_domains
        net_name, net_algbw = self.network_algbw("tree")
        name, busbw = min([self.scale_up(), (net_name, 2.0 * net_algbw)], key=lambda x: x[1])
        busbw *= self.tuning.protocol.tree
        if protocol == "ll":
            busbw *= self.tuning.protocol.tree_ll
            if busbw > self.ll_max:
                name, busbw = "LL protocol ceiling (llMaxBw)", self.ll_max
        elif protocol == "ll128":
            busbw *= (
                self.tuning.protocol.tree_ll128_single_node if d == 1 else self.tuning.protocol.tree_ll128
            )
        algbw = busbw / 2.0 * self.tuning.tree_correction_factor(protocol, s)
        latency = self.base("tree", protocol) + 2.0 * (
            (g - 1) * self.intra("tree", protocol) + int(math.log2(d)) * self.inter("tree", protocol)
        )
        return Estimate("tree", protocol, latency, algbw, name)

    def nvls(self, s: Floats) -> Estimate:
        p = self.group.num_gpus
        busbw = self.intra_bw * self.nvls_eff
        algbw = busbw if self.collective == "all_reduce" else busbw / float(busbw_factor(self.collective, p))
        latency = self.intra("nvls", "simple")
        return Estimate("nvls", "simple", latency, self.sizes(s, algbw), "NVLS (NVLink SHARP)")

    def nvls_tree(self, s: Floats) -> Estimate:
        name, algbw = min(
            [("NVLS (NVLink SHARP)", self.intra_bw * self.nvls_eff), self.network_algbw("nvls_tree")],
            key=lambda x: x[1],
        )
        latency = self.intra("nvls_tree", "simple") + 2 * int(math.log2(self.group.num_domains)) * self.inter(
            "nvls_tree", "simple"
        )
        return Estimate("nvls_tree", "simple", latency, self.sizes(s, algbw), name)

    def collnet(self, s: Floats) -> Estimate:
        g = self.group.gpus_per_domain
        local = (
            ("NVLS (NVLink SHARP)", self.intra_bw * self.nvls_eff)
            if self.topology.nvls
            else (
                self.scale_up()[0],
                self.intra_bw / 2.0,
            )
        )
        net_name, net_algbw = self.network_algbw("collnet")
        name, algbw = min([local, (net_name, net_algbw * self.tuning.protocol.collnet)], key=lambda x: x[1])
        latency = (
            self.base("collnet_direct", "simple")
            + 2.0 * (min(1, g - 1) * self.intra("collnet_direct", "simple"))
            + 2.0 * (g - 1) * self.tuning.protocol.collnet_arity_us * 1e-6
            + self.inter("collnet_direct", "simple")
        )
        return Estimate("collnet", "simple", latency, self.sizes(s, algbw), name)

    def p2p(self, protocol: Protocol, s: Floats) -> Estimate | None:
        if protocol == "ll128":
            return None
        same = self.group.num_domains == 1
        name, bw = self.scale_up() if same else ("network (NICs)", self.topology.nic_bytes_per_s_per_gpu)
        if protocol == "ll":
            bw *= self.tuning.protocol.ring_ll_single_node if same else self.tuning.protocol.ring_ll
            if bw > self.ll_max:
                name, bw = "LL protocol ceiling (llMaxBw)", self.ll_max
        step = self.intra("ring", protocol) if same else self.inter("ring", protocol)
        return Estimate("p2p", protocol, self.base("ring", protocol) + step, self.sizes(s, bw), name)

    # ---------------------------------------------------------------- MPI-style alternatives

    def _steps(self, intra_steps: float, inter_steps: float) -> float:
        """Latency of a step-by-step algorithm: NCCL's LL base and per-step costs."""
        return (
            self.base("ring", "ll")
            + intra_steps * self.intra("ring", "ll")
            + inter_steps * self.inter("ring", "ll")
        )

    def _by_time(
        self, algorithm: Algorithm, latency: float, s: Floats, terms: list[tuple[str, float]]
    ) -> Estimate:
        """An estimate whose bandwidth time is a sum of ``bytes_per_byte / rate`` terms; the largest names it."""
        seconds_per_byte = sum(weight for _, weight in terms)
        name = max(terms, key=lambda x: x[1])[0] if terms else "latency"
        return Estimate(algorithm, "simple", latency, self.sizes(s, 1.0 / seconds_per_byte), name)

    def rhd(self, s: Floats) -> Estimate:
        """Rabenseifner: recursive-halving reduce-scatter then recursive-doubling all-gather over the
        largest power of two, plus a pre/post step folding the extra ranks (MPICH; Thakur et al. 2005)."""
        p, g = self.group.num_gpus, self.group.gpus_per_domain
        p2 = 2 ** int(math.log2(p))
        local = min(g, p2)
        domains = p2 // local
        net_name, net = self.network(self.a2a_oversub)
        per_gpu_net = net / local if math.isfinite(net) else math.inf
        terms = []
        if domains > 1:
            terms.append((net_name, 2.0 * (domains - 1) / domains / per_gpu_net))
        if local > 1:
            terms.append((self.scale_up()[0], 2.0 * (local - 1) / p2 / self.intra_bw))
        extra_steps = 0
        if p != p2:
            extra_steps = 2
            fold = per_gpu_net if self.group.num_domains > 1 else self.intra_bw
            terms.append((net_name if self.group.num_domains > 1 else self.scale_up()[0], 2.0 / fold))
        latency = self._steps(2 * math.log2(local), 2 * math.log2(domains) + extra_steps)
        return self._by_time("rhd", latency, s, terms)

    def hierarchical(self, s: Floats) -> Estimate:
        """Intra-domain reduce-scatter, inter-domain all-reduce of each 1/g shard on g parallel rings,
        intra-domain all-gather: ``2(g-1)/g S / B_nvlink + 2(D-1)/D S / B_node`` in sequence."""
        g, d = self.group.gpus_per_domain, self.group.num_domains
        net_name, net_algbw = self.network_algbw("hierarchical")
        terms = [(self.scale_up()[0], 2.0 * (g - 1) / g / self.intra_bw), (net_name, 1.0 / net_algbw)]
        return self._by_time("hierarchical", self._steps(2 * (g - 1), 2 * (d - 1)), s, terms)

    def pairwise(self, s: Floats) -> Estimate:
        """Every rank exchanges S/P with every other; the NVLink and NIC shares run concurrently."""
        p, g = self.group.num_gpus, self.group.gpus_per_domain
        net_name, net = self.network(self.a2a_oversub)
        intra = ((g - 1) / p / self.intra_bw) if g > 1 else 0.0
        inter = ((p - g) / p / (net / g)) if p > g else 0.0
        name = self.scale_up()[0] if intra >= inter else net_name
        latency = self._steps(g - 1, p - g)
        return Estimate("pairwise", "simple", latency, self.sizes(s, 1.0 / max(intra, inter)), name)

    def bruck(self, s: Floats) -> Estimate:
        """ceil(lg P) rounds of S/2 each (MPICH): fewer steps, more bytes than pairwise."""
        p, g = self.group.num_gpus, self.group.gpus_per_domain
        rounds = math.ceil(math.log2(p))
        local_rounds = min(rounds, math.ceil(math.log2(g)) if g > 1 else 0)
        net_name, net = self.network(self.a2a_oversub)
        terms = []
        if local_rounds:
            terms.append((self.scale_up()[0], local_rounds * 0.5 / self.intra_bw))
        if rounds > local_rounds:
            terms.append((net_name, (rounds - local_rounds) * 0.5 / (net / g)))
        return self._by_time("bruck", self._steps(local_rounds, rounds - local_rounds), s, terms)

    # ---------------------------------------------------------------- dispatch

    def unavailable(self, algorithm: Algorithm) -> str | None:
        """Why ``algorithm`` cannot run here, or None."""
        d, g, p = self.group.num_domains, self.group.gpus_per_domain, self.group.num_gpus
        if self.collective not in APPLIES[algorithm]:
            return f"{algorithm} does not implement {self.collective}"
        if algorithm == "nvls" and (d > 1 or not self.topology.nvls or g < 3):
            return (
                "nvls needs NVLink SHARP (an NVSwitch domain, Hopper or newer) and a group inside one domain"
            )
        if algorithm == "nvls_tree" and (d == 1 or not self.topology.nvls or g < 2):
            return "nvls_tree needs NVLink SHARP and a group spanning several domains"
        if algorithm == "collnet" and (d == 1 or not self.topology.sharp):
            return "collnet needs in-network reduction (--sharp) and a group spanning several nodes"
        if algorithm == "hierarchical" and (d == 1 or g == 1):
            return "hierarchical needs several GPUs per domain and several domains"
        if algorithm == "p2p" and p != 2:
            return "send_recv is between exactly 2 GPUs"
        return None

    def estimates(self, algorithm: Algorithm, protocol: Protocol | None, s: Floats) -> list[Estimate]:
        protocols = [protocol] if protocol else list(PROTOCOLS)
        found: list[Estimate | None] = []
        if algorithm in ("ring", "tree", "p2p"):
            method: Callable[[Protocol, Floats], Estimate | None] = getattr(self, algorithm)
            found = [method(proto, s) for proto in protocols]
        elif protocol in (None, "simple"):
            found = [getattr(self, algorithm)(s)]
        return [estimate for estimate in found if estimate is not None]


def group_of(topology: CommTopology, num_gpus: int, gpus_per_domain: int | None = None) -> Group:
    """The placement of ``num_gpus`` ranks: packed into domains unless ``gpus_per_domain`` is given."""
    if num_gpus < 1:
        raise InputError("must be at least 1", field="num_gpus", value=num_gpus)
    local, domains = spread(topology, num_gpus, gpus_per_domain)
    smallest = num_gpus - (domains - 1) * local
    per_node = topology.gpus_per_node
    nodes = (domains - 1) * math.ceil(local / per_node) + math.ceil(smallest / per_node)
    return Group(num_gpus, local, domains, nodes, switch_hops(topology, nodes), smallest)


def estimates(
    collective: Collective,
    message_bytes: npt.ArrayLike,
    topology: CommTopology,
    num_gpus: int,
    *,
    gpus_per_domain: int | None = None,
    algorithm: Algorithm | Literal["auto"] = "auto",
    protocol: Protocol | Literal["auto"] = "auto",
    choices: frozenset[Algorithm] = NCCL_CHOICES,
) -> list[Estimate]:
    """Every algorithm/protocol the request allows (``choices``, NCCL's own set, for ``auto``), with its costs."""
    sizes = np.atleast_1d(np.asarray(message_bytes, dtype=np.float64))
    if algorithm != "auto" and algorithm not in ALGORITHMS:
        raise UnknownNameError("algorithm", str(algorithm), [*ALGORITHMS, "auto"], field="--algo")
    costs = _Costs(collective, topology, group_of(topology, num_gpus, gpus_per_domain), constants())
    chosen = [
        name
        for name in ALGORITHMS
        if (algorithm == "auto" and name in choices and collective in APPLIES[name]) or name == algorithm
    ]
    if algorithm != "auto":
        reason = costs.unavailable(algorithm)
        if reason is not None:
            raise InputError(reason, field="--algo", value=algorithm)
    found = [
        estimate
        for name in chosen
        if costs.unavailable(name) is None
        for estimate in costs.estimates(name, None if protocol == "auto" else protocol, sizes)
    ]
    if not found:
        reasons = [reason for name in chosen if (reason := costs.unavailable(name)) is not None]
        if reasons and len(reasons) == len(chosen):
            raise InputError(reasons[0], field="cluster.num_gpus", value=num_gpus)
        raise InputError(
            f"{algorithm} has no {protocol} protocol for {collective}: NVLS, NVLSTree, CollNet and the "
            "MPI-style algorithms run with the simple protocol only",
            field="--proto",
            value=protocol,
        )
    return found


def predict(
    collective: Collective,
    message_bytes: npt.ArrayLike,
    topology: CommTopology,
    num_gpus: int,
    *,
    gpus_per_domain: int | None = None,
    algorithm: Algorithm | Literal["auto"] = "auto",
    protocol: Protocol | Literal["auto"] = "auto",
    choices: frozenset[Algorithm] = NCCL_CHOICES,
) -> Prediction:
    """Time, algbw and busbw of ``collective`` for each message size (nccl-tests' "size" column).

    ``algorithm="auto"`` picks the fastest of ``choices`` per size (NCCL's set by default).
    """
    sizes = np.atleast_1d(np.asarray(message_bytes, dtype=np.float64))
    if np.any(~np.isfinite(sizes)) or np.any(sizes < 0):
        raise InputError("message sizes must be finite and not negative", field="--bytes")
    group = group_of(topology, num_gpus, gpus_per_domain)
    if num_gpus == 1:
        zeros = np.zeros_like(sizes)
        none = ["none"] * len(sizes)
        return Prediction(
            collective, group, sizes, zeros, np.full_like(sizes, np.inf), zeros, zeros, none, none, none
        )
    options = estimates(
        collective,
        sizes,
        topology,
        num_gpus,
        gpus_per_domain=gpus_per_domain,
        algorithm=algorithm,
        protocol=protocol,
        choices=choices,
    )
    times = np.stack([option.time_s(sizes) for option in options])
    best = np.argmin(times, axis=0)
    columns = np.arange(len(sizes))
    time_s = times[best, columns]
    algbw = np.stack([option.algbw_bytes_per_s for option in options])[best, columns]
    latency = np.asarray([options[i].latency_s for i in best])
    with np.errstate(divide="ignore", invalid="ignore"):
        achieved = np.where(time_s > 0, sizes / time_s, 0.0)
    busbw = achieved * busbw_factor(collective, num_gpus)
    bottleneck = [
        "latency" if latency[j] >= sizes[j] / algbw[j] else options[i].bottleneck for j, i in enumerate(best)
    ]
    return Prediction(
        collective,
        group,
        sizes,
        time_s,
        achieved,
        np.asarray(busbw, dtype=np.float64),
        latency,
        [options[i].algorithm for i in best],
        [options[i].protocol for i in best],
        bottleneck,
    )


def nic_bytes(
    collective: Collective,
    message_bytes: float,
    topology: CommTopology,
    num_gpus: int,
    *,
    gpus_per_domain: int | None = None,
) -> tuple[float, str]:
    """Bytes each GPU sends through its NIC share for one ``collective`` of ``message_bytes``, under the
    algorithm :func:`predict` picks for it as NCCL would, and that algorithm ("none" inside one domain)."""
    prediction = predict(collective, message_bytes, topology, num_gpus, gpus_per_domain=gpus_per_domain)
    algorithm = prediction.algorithm[0]
    if prediction.group.num_domains == 1 or algorithm == "none":
        return 0.0, "none"
    chosen = next((name for name in NIC_ALGORITHMS if name == algorithm), None)
    if chosen is None:
        raise ValueError(f"{algorithm} is not one of the algorithms whose NIC traffic is modelled")
    return nic_bytes_per_byte(chosen, collective, prediction.group) * message_bytes, chosen


def collective_time_s(
    collective: Collective,
    message_bytes: npt.ArrayLike,
    topology: CommTopology,
    num_gpus: npt.ArrayLike,
    *,
    gpus_per_domain: int | None = None,
    algorithm: Algorithm | Literal["auto"] = "auto",
) -> Floats:
    """Seconds for ``collective``, broadcast over message sizes and group sizes (the planner's entry point).

    Each distinct group size is modelled once; sizes are vectorised with numpy.
    """
    sizes, groups = np.broadcast_arrays(
        np.asarray(message_bytes, dtype=np.float64), np.asarray(num_gpus, dtype=np.int64)
    )
    out = np.empty(sizes.shape, dtype=np.float64)
    for size in np.unique(groups):
        mask = groups == size
        prediction = predict(
            collective,
            sizes[mask],
            topology,
            int(size),
            gpus_per_domain=gpus_per_domain,
            algorithm=algorithm,
        )
        out[mask] = prediction.time_s
    return out
