"""The network check of a layout: the data-parallel traffic each GPU moves per step, the NIC rate that
hides it behind compute, and what the node's NICs provide (:mod:`mfukit.comm.traffic` does the counting)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mfukit.comm.traffic import GradientTraffic, gradient_traffic, nics_to_hide
from mfukit.core.hardware import System
from mfukit.core.model import ModelSpec
from mfukit.core.parallelism import Parallelism
from mfukit.core.scenario import Precision
from mfukit.perf.memory import StepShape, gradient_reduce_bytes, parameters_per_gpu, weight_bytes_per_param
from mfukit.perf.planner import Plan

COMM_PARTS = ("tp_comm", "cp_comm", "ep_comm", "fsdp_comm", "pp_comm", "dp_comm")


def layout_traffic(
    model: ModelSpec,
    layout: Parallelism,
    shape: StepShape,
    *,
    precision: Precision,
    gpus_per_node: int,
    num_microbatches: int,
    microbatch_compute_s: float,
) -> GradientTraffic:
    """Data-parallel gradient traffic of ``layout`` per GPU and step, with the parameters it holds."""
    dense, expert = parameters_per_gpu(model, layout, shape)
    return gradient_traffic(
        layout,
        dense_params_per_gpu=dense,
        expert_params_per_gpu=expert,
        grad_bytes=gradient_reduce_bytes(layout, precision),
        weight_bytes=weight_bytes_per_param(precision),
        gpus_per_node=gpus_per_node,
        num_microbatches=num_microbatches,
        microbatch_compute_s=microbatch_compute_s,
    )


@dataclass(frozen=True)
class NetworkCheck:
    pattern: str
    bytes_per_step: float
    inter_node_bytes_per_step: float
    required_bytes_per_s: float  # per GPU, to hide the DP traffic completely
    available_bytes_per_s: float  # per GPU: the node's NICs shared by its GPUs
    nics_to_hide: int
    exposed_comm_s: float  # every exposed communication part of the modelled step

    def as_json(self) -> dict[str, Any]:
        return {
            "gradient_traffic_pattern": self.pattern,
            "gradient_bytes_per_step_per_gpu": self.bytes_per_step,
            "inter_node_bytes_per_step_per_gpu": self.inter_node_bytes_per_step,
            "inter_node_bytes_per_s_required": self.required_bytes_per_s,
            "inter_node_bytes_per_s_available": self.available_bytes_per_s,
            "nics_to_hide_fully": self.nics_to_hide,
            "exposed_comm_s_per_step": self.exposed_comm_s,
        }


def network_check(
    model: ModelSpec, plan: Plan, shape: StepShape, system: System, precision: Precision
) -> NetworkCheck:
    m = plan.num_microbatches
    compute = sum(plan.breakdown_s[name] for name in ("compute", "memory_bound", "recompute")) / m
    traffic = layout_traffic(
        model,
        plan.layout,
        shape,
        precision=precision,
        gpus_per_node=system.gpus_per_node,
        num_microbatches=m,
        microbatch_compute_s=compute,
    )
    return NetworkCheck(
        pattern=traffic.pattern,
        bytes_per_step=traffic.bytes_per_step,
        inter_node_bytes_per_step=traffic.inter_node_bytes_per_step,
        required_bytes_per_s=traffic.inter_node_bytes_per_s_required,
        available_bytes_per_s=system.scale_out_bytes_per_s_per_node / system.gpus_per_node,
        nics_to_hide=nics_to_hide(
            traffic, gpus_per_node=system.gpus_per_node, nic_bytes_per_s=system.nic_bytes_per_s
        ),
        exposed_comm_s=sum(plan.breakdown_s[name] for name in COMM_PARTS),
    )
