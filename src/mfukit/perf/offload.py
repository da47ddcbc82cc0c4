"""Seconds per step that offloading to host memory costs: bytes over the host link, the CPU's optimizer
step, and the part the GPU's compute does not hide.

* **Optimizer stepped by the CPU** (``offload_optimizer_step = "cpu"``; ZeRO-Offload, Ren et al., USENIX
  ATC'21, §4.1 and Fig. 5; Megatron ``--optimizer-cpu-offload``): the offloaded share of the reduced gradients
  streams to the host during the last micro-batch's backward (hidden up to that backward's length), the CPU
  runs Adam, and the updated 16-bit parameters come back before the next forward. Without the one-step
  delayed parameter update (§4.3, off by default) the CPU step and the copy back are on the critical path.
  The CPU step takes the longer of two bounds: the node's cores, shared by its GPUs, at the stack's measured
  end-to-end rate per core (``cpu_optimizer_params_per_s_per_core``, perf.efficiency), and the DRAM
  traffic of Adam (per parameter the fp32 master, m and v read and written, the gradient read, the 16-bit
  copy written: :data:`~mfukit.perf.memory.ADAM_STEP_BYTES_PER_PARAM`) at the node's host memory bandwidth. On every catalog
  node the cores bind, ~10x above the DRAM bound: a rule of thumb that calls the CPU step bandwidth-bound
  (Ren et al. §4.2) is right for Adam's kernel alone, not for the step DeepSpeed runs.
* **Optimizer stepped by the GPU** (``offload_optimizer_step = "gpu"``; DeepSpeed DeepCompile
  ``offload_adam_states``, Megatron-Core ``OptimizerStateOffloader``): the offloaded share of the fp32
  master, m and v (the Adam moments alone under FSDP, whose fp32 parameter shard is the master:
  :func:`gpu_stepped_state_bytes`) leaves for the host during the forward passes
  and comes back during the backward passes (hidden up to their compute), and the GPU steps it as it steps
  the rest; the gradients never leave the GPU.
* **Parameters** (ZeRO-Infinity, Rajbhandari et al., SC'21, §5-6; FSDP2 ``CPUOffloadPolicy``): the
  offloaded share of a GPU's parameter shard comes over the link for every forward and backward pass (and
  the recompute's forward) of every micro-batch, prefetched a layer ahead: hidden up to the compute time.
* **Activations** (Megatron/NeMo ``--cpu-offloading-num-layers``, TE ``get_cpu_offload_context``): a layer's
  stored activations go to the host during its forward and come back before its backward, one layer ahead:
  the copy out hides under the forward passes, the copy in under the backward passes.

The host link (PCIe, or NVLink-C2C on Grace superchips; the accelerator's ``host_link_bandwidth``) is full
duplex: each direction runs at its per-direction rate. The kinds share it, so within one window (the forward
passes, the backward passes) the copies of one direction add, and the window hides the longer direction once:
out under the forwards go the GPU-stepped states and the activations while the parameters come in; under the
backwards the gradients go out (under the last backward only) while the states, the activations and the
parameters for the backward and the recompute come in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mfukit.core.hardware import Accelerator, System
from mfukit.core.parallelism import Parallelism
from mfukit.errors import InputError
from mfukit.perf.layouts import SHARDINGS, Floats, LayoutGrid, Workload, sharding_fields
from mfukit.perf.memory_grid import stage_layer_kinds, stored_activation_bytes
from mfukit.perf.model_states import (
    ADAM_STEP_BYTES_PER_PARAM,
    PARAMETER_SHARDINGS,
    gradient_reduce_bytes,
    state_bytes_per_param,
    weight_bytes_per_param,
)

_PARAM_SHARDED = np.asarray([name in PARAMETER_SHARDINGS for name in SHARDINGS])


def gpu_stepped_state_bytes(workload: Workload) -> Floats:
    """Per sharding (:data:`SHARDINGS`), bytes per parameter of the optimizer states a GPU step sends out and
    takes back: what the memory model holds of them (:func:`~mfukit.perf.model_states.state_bytes_per_param`),
    unsharded; the fp32 master and Adam's m and v, or m and v alone where the fp32 shard is the master."""
    return np.asarray(
        [
            state_bytes_per_param(n, 1, workload.precision, workload.fp8_main_grads).optimizer
            for n in SHARDINGS
        ]
    )


@dataclass(frozen=True)
class OffloadTime:
    """Per layout, seconds per step: copies over the host link, the CPU optimizer step, and what is exposed."""

    transfer_s: Floats
    cpu_optimizer_s: Floats
    exposed_s: Floats


def offloads(workload: Workload) -> bool:
    return max(workload.offload_optimizer, workload.offload_params, workload.offload_activations) > 0


@dataclass(frozen=True)
class HostRates:
    """Per GPU: the host link's bytes/s per direction, and for a CPU optimizer step the host memory's bytes/s
    and the host cores (0 when the step runs on the GPU)."""

    link_bytes_per_s: float
    memory_bytes_per_s: float
    cpu_cores: float


def cpu_steps(workload: Workload) -> bool:
    return workload.offload_optimizer > 0 and workload.offload_optimizer_step == "cpu"


def host_rates(workload: Workload, system: System, accelerator: Accelerator) -> HostRates:
    """What one GPU gets of its node's host link, memory and cores; a clear error when the catalog lacks what
    the workload's offload needs."""
    link = accelerator.host_link_bytes_per_s
    if link is None:
        raise InputError(
            f"offloading to host memory needs the host link bandwidth of {accelerator.name}",
            field="training.offload_optimizer",
            hint=f"add host_link_bandwidth (PCIe or C2C, per direction) to the {accelerator.name} catalog entry, "
            "or set the offload shares to 0",
        )
    if not cpu_steps(workload):
        return HostRates(link, 0.0, 0.0)
    memory, cores = system.host_memory_bytes_per_s, system.host_cpu_cores
    if memory is None or cores is None:
        fact = "host_memory_bandwidth" if memory is None else "host_cpu_cores"
        raise InputError(
            f"an optimizer step on the CPU needs the {fact} of {system.name}",
            field="training.offload_optimizer_step",
            hint=f'add {fact} to the {system.name} catalog entry, set offload_optimizer_step = "gpu" if the '
            "states are stepped on the GPU, or set offload_optimizer = 0",
        )
    return HostRates(link, memory / system.gpus_per_node, cores / system.gpus_per_node)


def offload_time(
    workload: Workload,
    grid: LayoutGrid,
    system: System,
    accelerator: Accelerator,
    local_params: Sequence[Floats],
    passes_s: Sequence[tuple[Floats, Floats]],
    cpu_optimizer_params_per_s_per_core: float,
) -> OffloadTime:
    """Offload seconds per step of every layout of ``grid``: ``local_params`` are the parameters whose optimizer
    states one GPU holds on its first and last stage, ``passes_s`` the forward and backward seconds of one
    micro-batch on those stages, the rate the stack's CPU optimizer steps parameters at; the slower stage sets
    the step."""
    zero = np.zeros(len(grid))
    if not offloads(workload):
        return OffloadTime(zero, zero, zero)
    rates = host_rates(workload, system, accelerator)
    link = rates.link_bytes_per_s
    on_cpu = cpu_steps(workload)
    w = weight_bytes_per_param(workload.precision)
    grad_bytes = np.asarray(
        [
            gradient_reduce_bytes(
                Parallelism.model_validate(sharding_fields(n)), workload.precision, workload.fp8_main_grads
            )
            for n in SHARDINGS
        ]
    )[grid.sharding]
    m = grid.num_microbatches.astype(np.float64)
    states_bytes = gpu_stepped_state_bytes(workload)[grid.sharding]
    results: list[tuple[Floats, Floats, Floats]] = []
    for kind, (params, (forward, backward)) in enumerate(zip(local_params, passes_s, strict=True)):
        o = workload.offload_optimizer * params
        # passes over the parameters inside the backward window: the backward, and the recompute's forward
        dense_layers, moe_layers = stage_layer_kinds(workload, grid, kind)
        backward_passes = 1.0 + grid.recomputed_share(dense_layers + moe_layers)
        # a CPU step: gradients out under the last backward, weights back before the next forward;
        # a GPU step: the states out under the forwards, back under the backwards
        grads_out = o * grad_bytes / link if on_cpu else zero
        params_back = o * w / link if on_cpu else zero
        states_way = zero if on_cpu else o * states_bytes / link
        cpu = (
            np.maximum(
                o * ADAM_STEP_BYTES_PER_PARAM / rates.memory_bytes_per_s,
                o / (rates.cpu_cores * cpu_optimizer_params_per_s_per_core),
            )
            if on_cpu
            else zero
        )
        fetch_pass = (
            np.where(_PARAM_SHARDED[grid.sharding], workload.offload_params * params * w, 0.0) * m / link
        )
        acts = (
            m
            * workload.offload_activations
            * stored_activation_bytes(workload, grid, kind, system.gpus_per_node)
            / link
            if workload.offload_activations > 0
            else zero
        )
        forward_s, backward_s = m * forward, m * backward
        forward_out, forward_in = states_way + acts, fetch_pass
        backward_in = states_way + acts + backward_passes * fetch_pass
        exposed = (
            np.maximum(np.maximum(forward_out, forward_in) - forward_s, 0.0)
            + np.maximum(np.maximum(grads_out - backward, 0.0), backward_in - backward_s)
            + cpu
            + params_back
        )
        transfer = grads_out + params_back + forward_out + forward_in + backward_in
        results.append((transfer, cpu, exposed))
    slower = np.argmax(np.stack([exposed for _, _, exposed in results]), axis=0)
    pick = np.arange(len(grid))
    return OffloadTime(*(np.stack([result[i] for result in results])[slower, pick] for i in range(3)))
