"""Data-parallel gradient traffic per step, and the inter-node bandwidth that hides it.

The seed rule "IB bandwidth must cover gradient traffic", written once. Each GPU moves its share of the
gradients of the parameters it holds (its TP x PP slice of the model) with its data-parallel peers
(DP x CP ranks; expert parameters with their DP x CP / EP expert-data-parallel peers):

* replicated optimizer (DDP, ``zero=0``): one all-reduce per step, 2(n - 1)/n x P x g bytes (ring);
* sharded optimizer (Megatron distributed optimizer, ZeRO-1/2): reduce-scatter of gradients and
  all-gather of updated weights, (n - 1)/n x P x (g + w); ZeRO-2 (and FSDP's SHARD_GRAD_OP) reduce-scatters
  every micro-batch's gradients, (n - 1)/n x P x (m g + w);
* sharded parameters (ZeRO-3, FSDP): per micro-batch an all-gather before forward, another before
  backward (parameters are resharded after forward) and a reduce-scatter, (n - 1)/n x P x (2w + g) each;
* hybrid FSDP: the gathers and reduce-scatters stay inside the node; across nodes an all-reduce of the
  shard after each micro-batch's reduce-scatter (FSDP outside ``no_sync``), 2(k - 1)/k x P/s x g each.

What crosses the network is what NCCL runs: each collective is handed to comm's collective model, which
picks the algorithm NCCL would for its size on the cluster's topology (``comm.model.predict``), and the
bytes each GPU's NIC share carries are that algorithm's (``comm.model.nic_bytes_per_byte``). A ring over n
ranks, r of them in each node, leaves every node once per channel with a whole rank's traffic, so each NIC
carries 2(n - 1)/n x S / r for an all-reduce of S bytes ((n - 1)/n x S / r for a reduce-scatter or an
all-gather); a double binary tree S / r on 2 nodes and 2S / r beyond (the model's choice for a large
all-reduce on 2 A100 nodes; NVLS tree on Hopper). The hierarchical 2(k - 1)/k x S / r over k nodes that the seed rule
assumed is none of these: on 2 nodes of 8 a ring puts 1.9x as much through each NIC.

Overlap assumption (Megatron ``overlap_grad_reduce``/``overlap_param_gather``, PyTorch DDP buckets, FSDP
prefetch): gradients are reduced bucket by bucket while the backward pass of the *last* micro-batch is
still running, and the weight all-gather runs under the *first* micro-batch's forward; with gradient
accumulation the earlier micro-batches cannot hide it (their gradients are not final yet). So the window
is the compute of one micro-batch (two thirds of it, the backward, for a plain all-reduce), not of the
whole step as the popular rule of thumb has it: with m micro-batches per step that rule asks for m times
too little bandwidth. FSDP/ZeRO-3 traffic recurs every micro-batch and hides behind that micro-batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mfukit.comm.collectives import Collective
from mfukit.comm.model import nic_bytes
from mfukit.comm.topology import CommTopology
from mfukit.core.model import ModelSpec
from mfukit.core.parallelism import Parallelism
from mfukit.perf.memory import StepShape, parameters_per_gpu
from mfukit.perf.model_states import (
    REDUCED_EVERY_MICROBATCH,
    gathered_weight_bytes,
    gradient_reduce_bytes,
    sharding_of,
)

BACKWARD_SHARE = 2.0 / 3.0  # backward = 2 x forward (Narayanan et al. 2021, eq. 3)


def ring_factor(ranks: int) -> float:
    """(n - 1)/n: the share of a reduce-scatter or all-gather buffer each rank sends on a ring."""
    return (ranks - 1) / ranks if ranks > 1 else 0.0


@dataclass(frozen=True)
class GradientTraffic:
    """What one GPU moves for data parallelism in one training step, and the time it can hide behind."""

    pattern: str
    group_ranks: int
    ranks_per_domain: int  # of the data-parallel group, in one scale-up (NVLink) domain
    bytes_per_step: float  # sent by each GPU over all tiers (it receives as much)
    inter_node_bytes_per_step: float  # the part that crosses its NIC
    inter_node_algorithm: str  # what NCCL runs across nodes (comm's model), "none" inside one domain
    window_s: float  # compute time of one step that the inter-node part can overlap
    windows_per_step: int  # how many such windows (and transfers) a step has

    @property
    def inter_node_bytes_per_s_required(self) -> float:
        """Per GPU, per direction: the NIC rate that hides the traffic completely."""
        if self.inter_node_bytes_per_step == 0:
            return 0.0
        return self.inter_node_bytes_per_step / (self.window_s * self.windows_per_step)

    def exposed_s(self, nic_bytes_per_s_per_gpu: float) -> float:
        """Communication time per step left over when each GPU's NIC share is ``nic_bytes_per_s_per_gpu``."""
        if self.inter_node_bytes_per_step == 0:
            return 0.0
        transfer_s = self.inter_node_bytes_per_step / nic_bytes_per_s_per_gpu
        return max(0.0, transfer_s - self.window_s * self.windows_per_step)


def ranks_per_domain(group: int, stride: int, domain_gpus: int) -> int:
    """Ranks of a group whose members are ``stride`` ranks apart that share one scale-up domain (Megatron
    orders ranks tp, cp, dp, pp from fastest to slowest, so DP x CP ranks are ``tp`` apart)."""
    return max(1, min(group, domain_gpus // max(1, stride)))


def gradient_traffic(
    layout: Parallelism,
    *,
    dense_params_per_gpu: float,
    expert_params_per_gpu: float,
    grad_bytes: float,
    weight_bytes: float,
    topology: CommTopology,
    num_microbatches: int,
    microbatch_compute_s: float,
) -> GradientTraffic:
    """Data-parallel traffic of one GPU per step under ``layout``'s sharding, on ``topology``.

    ``*_params_per_gpu`` are the parameters this GPU computes with before any ZeRO/FSDP sharding;
    ``microbatch_compute_s`` is the forward + backward time of one micro-batch on it.
    """
    group = layout.dp * layout.cp
    expert_group = max(1, group // layout.ep)
    domain = topology.domain_gpus
    per_domain = ranks_per_domain(group, layout.tp, domain)
    expert_per_domain = ranks_per_domain(expert_group, layout.tp * layout.ep, domain)
    m = max(1, num_microbatches)
    reductions = m if sharding_of(layout) in REDUCED_EVERY_MICROBATCH else 1
    w, g = weight_bytes, grad_bytes
    algorithms: list[str] = []

    def across(collective: Collective, size: float, ranks: int, local: int) -> float:
        """Bytes through each GPU's NIC share for one collective, as comm's model runs it. A group that does
        not fill its domains evenly (DP 217 of TP 2 on 8-GPU nodes: 4 ranks in most nodes) is priced padded
        to whole domains: each rank's NIC share is that of a full domain, and the ring factor moves by < 1/n."""
        if ranks <= local or size <= 0:
            return 0.0
        padded = -(-ranks // local) * local
        sent, algorithm = nic_bytes(collective, size, topology, padded, gpus_per_domain=local)
        if algorithm not in algorithms:
            algorithms.append(algorithm)
        return sent

    def moved(params: float, ranks: int, local: int) -> tuple[float, float]:
        if layout.fsdp == "hybrid":
            shard = local
            intra = m * 3 * ring_factor(shard) * params * max(w, g)
            replicas = max(1, ranks // shard)
            inter = reductions * across("all_reduce", params / shard * g, replicas, 1)
            return intra + reductions * 2 * ring_factor(replicas) * params / shard * g, inter
        if layout.shards_parameters:
            total = m * ring_factor(ranks) * params * (2 * w + g)
            inter = 2 * across("all_gather", params * w, ranks, local)
            return total, m * (inter + across("reduce_scatter", params * g, ranks, local))
        if layout.zero >= 1:
            inter = reductions * across("reduce_scatter", params * g, ranks, local) + across(
                "all_gather", params * w, ranks, local
            )
            return ring_factor(ranks) * params * (w + reductions * g), inter
        return 2 * ring_factor(ranks) * params * g, across("all_reduce", params * g, ranks, local)

    dense_total, dense_inter = moved(dense_params_per_gpu, group, per_domain)
    expert_total, expert_inter = moved(expert_params_per_gpu, expert_group, expert_per_domain)
    if layout.fsdp == "hybrid":
        pattern = "intra-node reduce-scatter + all-gather, inter-node all-reduce, every micro-batch"
        window, windows = BACKWARD_SHARE * microbatch_compute_s, reductions
    elif layout.shards_parameters:
        pattern = "all-gather (forward) + all-gather (backward) + reduce-scatter, every micro-batch"
        window, windows = microbatch_compute_s, m
    elif reductions > 1:
        pattern = "reduce-scatter gradients every micro-batch + all-gather weights once per step"
        window, windows = BACKWARD_SHARE * microbatch_compute_s, reductions
    elif layout.zero >= 1:
        pattern = "reduce-scatter gradients + all-gather weights, once per step"
        window, windows = microbatch_compute_s, 1
    else:
        pattern = "all-reduce gradients, once per step"
        window, windows = BACKWARD_SHARE * microbatch_compute_s, 1
    return GradientTraffic(
        pattern=pattern,
        group_ranks=group,
        ranks_per_domain=per_domain,
        bytes_per_step=dense_total + expert_total,
        inter_node_bytes_per_step=dense_inter + expert_inter,
        inter_node_algorithm=" + ".join(algorithms) or "none",
        window_s=window,
        windows_per_step=windows,
    )


def model_gradient_traffic(
    model: ModelSpec,
    layout: Parallelism,
    shape: StepShape,
    topology: CommTopology,
    *,
    microbatch_compute_s: float,
) -> GradientTraffic:
    """:func:`gradient_traffic` of ``model`` under ``layout`` on ``topology``: the parameters one GPU holds
    (the more loaded pipeline stage), gradients reduced in the precision the framework reduces them in,
    ``shape``'s micro-batches (1 when it leaves them open). Every caller (``size``, ``plan``'s network check,
    ``diagnose``) goes through here."""
    dense, expert = parameters_per_gpu(model, layout, shape)
    return gradient_traffic(
        layout,
        dense_params_per_gpu=dense,
        expert_params_per_gpu=expert,
        grad_bytes=gradient_reduce_bytes(layout, shape.precision, shape.fp8_main_grads),
        weight_bytes=gathered_weight_bytes(shape.precision, shape.fp8_weights),
        topology=topology,
        num_microbatches=shape.num_microbatches or 1,
        microbatch_compute_s=microbatch_compute_s,
    )


def nics_to_hide(
    traffic: GradientTraffic, *, gpus_per_node: int, nic_bytes_per_s: float, allowed_exposed_s: float = 0.0
) -> int:
    """NICs of ``nic_bytes_per_s`` one node needs so that its GPUs' gradient traffic leaves at most
    ``allowed_exposed_s`` per step uncovered (0: hidden completely)."""
    if traffic.inter_node_bytes_per_step == 0:
        return 0
    cover_s = traffic.window_s * traffic.windows_per_step + allowed_exposed_s
    return math.ceil(traffic.inter_node_bytes_per_step * gpus_per_node / (nic_bytes_per_s * cover_s) - 1e-9)
