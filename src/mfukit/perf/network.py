"""The network check of a layout: the data-parallel traffic each GPU moves per step, the NIC rate that
hides it behind compute, and what the node's NICs provide (:mod:`mfukit.perf.traffic` does the counting)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mfukit.core.model import ModelSpec
from mfukit.perf.memory import StepShape
from mfukit.perf.planner import Plan
from mfukit.perf.step_time import COMPUTE_STREAM_PARTS, Machine
from mfukit.perf.traffic import model_gradient_traffic, nics_to_hide

COMM_PARTS = ("tp_comm", "cp_comm", "ep_comm", "fsdp_comm", "pp_comm", "dp_comm")


@dataclass(frozen=True)
class NetworkCheck:
    pattern: str
    inter_node_algorithm: str
    bytes_per_step: float
    inter_node_bytes_per_step: float
    required_bytes_per_s: float  # per GPU, to hide the DP traffic completely
    available_bytes_per_s: float  # per GPU: the node's NICs shared by its GPUs
    nics_to_hide: int
    exposed_comm_s: float  # every exposed communication part of the modelled step

    def as_json(self) -> dict[str, Any]:
        return {
            "gradient_traffic_pattern": self.pattern,
            "gradient_inter_node_algorithm": self.inter_node_algorithm,
            "gradient_bytes_per_step_per_gpu": self.bytes_per_step,
            "inter_node_bytes_per_step_per_gpu": self.inter_node_bytes_per_step,
            "inter_node_bytes_per_s_required": self.required_bytes_per_s,
            "inter_node_bytes_per_s_available": self.available_bytes_per_s,
            "nics_to_hide_fully": self.nics_to_hide,
            "exposed_comm_s_per_step": self.exposed_comm_s,
        }


def network_check(model: ModelSpec, plan: Plan, shape: StepShape, machine: Machine) -> NetworkCheck:
    m = plan.num_microbatches
    compute = sum(plan.breakdown_s[name] for name in COMPUTE_STREAM_PARTS) / m
    traffic = model_gradient_traffic(
        model, plan.layout, shape, machine.topology, microbatch_compute_s=compute
    )
    system = machine.system
    return NetworkCheck(
        pattern=traffic.pattern,
        inter_node_algorithm=traffic.inter_node_algorithm,
        bytes_per_step=traffic.bytes_per_step,
        inter_node_bytes_per_step=traffic.inter_node_bytes_per_step,
        required_bytes_per_s=traffic.inter_node_bytes_per_s_required,
        available_bytes_per_s=system.scale_out_bytes_per_s_per_node / system.gpus_per_node,
        nics_to_hide=nics_to_hide(
            traffic, gpus_per_node=system.gpus_per_node, nic_bytes_per_s=system.nic_bytes_per_s
        ),
        exposed_comm_s=sum(plan.breakdown_s[name] for name in COMM_PARTS),
    )
