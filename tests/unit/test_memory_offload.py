"""Offload to host memory: what leaves the GPU (memory model, both paths) and what the step pays for it."""

from __future__ import annotations

import numpy as np
import pytest

from mfukit import catalog
from mfukit.catalog.resolved import resolve_scenario
from mfukit.core.parallelism import Parallelism
from mfukit.core.scenario import TrainingSection, load_scenario
from mfukit.errors import InputError
from mfukit.perf.inputs import perf_inputs, training_workload
from mfukit.perf.layouts import SHARDINGS, Workload, grid_of, step_shape
from mfukit.perf.memory import estimate_memory
from mfukit.perf.memory_grid import grid_memory
from mfukit.perf.model_states import ADAM_STEP_BYTES_PER_PARAM
from mfukit.perf.offload import gpu_stepped_state_bytes, host_rates, offload_time
from mfukit.perf.step_time import estimate_steps, machine_for

MODEL = catalog.model("llama3.1-8b")
DGX = catalog.system("dgx-h100")
H100 = catalog.accelerator("h100-sxm")


def _workload(**offload: float | str) -> Workload:
    return Workload(model=MODEL, seq_len=4096, global_batch_sequences=64, **offload)  # type: ignore[arg-type]


def _stage(workload: Workload, layout: Parallelism, micro_batches: int = 8):  # type: ignore[no-untyped-def]
    """The first pipeline stage (the whole model without a pipeline)."""
    shape = step_shape(workload, layout, micro_batch_size=1, num_microbatches=micro_batches, gpus_per_node=8)
    return estimate_memory(MODEL, layout, shape).first


@pytest.mark.parametrize(
    ("layout", "gradients_left"),
    [
        (Parallelism(dp=8, zero=1), 1.0),  # Megatron keeps its gradient buffer on the GPU
        (Parallelism(dp=8, zero=2), 0.0),  # ZeRO-Offload streams the reduced gradients to the host
        (Parallelism(dp=8, zero=3), 0.0),
    ],
)
def test_optimizer_offload_moves_the_optimizer_states(layout: Parallelism, gradients_left: float) -> None:
    kept, moved = _stage(_workload(), layout), _stage(_workload(offload_optimizer=1.0), layout)
    assert moved.optimizer_states_bytes == 0 and kept.optimizer_states_bytes > 0
    assert moved.weights_bytes == pytest.approx(kept.weights_bytes)
    assert moved.gradients_bytes == pytest.approx(gradients_left * kept.gradients_bytes)
    half = _stage(_workload(offload_optimizer=0.5), layout)
    assert half.optimizer_states_bytes == pytest.approx(kept.optimizer_states_bytes / 2)
    # states the GPU steps (DeepCompile offload_adam_states) leave every gradient where it was
    on_gpu = _stage(_workload(offload_optimizer=1.0, offload_optimizer_step="gpu"), layout)
    assert on_gpu.optimizer_states_bytes == 0
    assert on_gpu.gradients_bytes == pytest.approx(kept.gradients_bytes)


def test_parameter_offload_needs_sharded_parameters() -> None:
    sharded, whole = Parallelism(dp=8, fsdp="full"), Parallelism(dp=8, zero=1)
    assert _stage(_workload(offload_params=1.0), sharded).weights_bytes == 0
    assert _stage(_workload(offload_params=1.0), whole).weights_bytes == pytest.approx(
        _stage(_workload(), whole).weights_bytes
    )


def test_activation_offload_moves_that_share_of_the_stored_activations() -> None:
    layout = Parallelism(tp=2, pp=2, dp=2, sequence_parallel=True, zero=1)
    full, quarter = _stage(_workload(), layout), _stage(_workload(offload_activations=0.75), layout)
    assert quarter.activations_bytes == pytest.approx(full.activations_bytes / 4)


@pytest.mark.parametrize(
    "offload",
    [
        {"offload_optimizer": 1.0},
        {"offload_optimizer": 1.0, "offload_optimizer_step": "gpu"},
        {"offload_params": 0.5},
        {"offload_activations": 0.5},
    ],
)
def test_the_grid_agrees_with_the_scalar_model_under_offload(offload: dict[str, float | str]) -> None:
    workload = _workload(**offload)
    layouts = [
        Parallelism(dp=8, zero=2),
        Parallelism(dp=8, fsdp="full"),
        Parallelism(tp=2, pp=2, dp=2, zero=1),
    ]
    grid = grid_of(layouts, model=MODEL, micro_batch_size=[1, 1, 1], num_microbatches=[8, 8, 16])
    peaks = grid_memory(workload, grid, gpus_per_node=8).peak_bytes
    scalar = [
        estimate_memory(
            MODEL,
            layout,
            step_shape(workload, layout, micro_batch_size=1, num_microbatches=m, gpus_per_node=8),
        ).peak_bytes
        for layout, m in zip(layouts, [8, 8, 16], strict=True)
    ]
    np.testing.assert_allclose(peaks, scalar, rtol=1e-9)


def test_optimizer_offload_exposes_the_cpu_step_and_the_copy_back() -> None:
    """ZeRO-Offload without delayed updates: the gradient copy hides under the backward it overlaps, the CPU
    Adam step and the 16-bit parameters coming back do not. The step is bound by the GPU's share of the host
    cores at the stack's rate per core, not by the DRAM traffic, which is ~10x shorter on a DGX H100."""
    workload = _workload(offload_optimizer=1.0)
    grid = grid_of([Parallelism(dp=8, zero=1)], model=MODEL, micro_batch_size=[1], num_microbatches=[8])
    params = np.asarray([1e9])
    backward = np.asarray([1.0])  # long enough to hide the gradients (4 GB at 64 GB/s = 62.5 ms)
    rate = 14e6
    time = offload_time(workload, grid, DGX, H100, [params, params], [(backward / 2, backward)] * 2, rate)
    link, per_gpu_memory, per_gpu_cores = 64e9, 614.4e9 / 8, 112 / 8
    cpu = 1e9 / (per_gpu_cores * rate)
    assert cpu > 10 * 1e9 * ADAM_STEP_BYTES_PER_PARAM / per_gpu_memory
    assert time.cpu_optimizer_s[0] == pytest.approx(cpu)
    assert time.exposed_s[0] == pytest.approx(cpu + 1e9 * 2 / link)
    assert time.transfer_s[0] == pytest.approx(1e9 * (4 + 2) / link)
    short = offload_time(
        workload, grid, DGX, H100, [params, params], [(backward / 2000, backward / 1000)] * 2, rate
    )
    assert short.exposed_s[0] == pytest.approx(cpu + 1e9 * 2 / link + 1e9 * 4 / link - 1e-3)
    # cores fast enough that DRAM binds: the step streams Adam's bytes at the GPU's share of the bandwidth
    fast = offload_time(workload, grid, DGX, H100, [params, params], [(backward / 2, backward)] * 2, 1e12)
    assert fast.cpu_optimizer_s[0] == pytest.approx(1e9 * ADAM_STEP_BYTES_PER_PARAM / per_gpu_memory)


def test_states_stepped_on_the_gpu_cost_only_their_unhidden_copies() -> None:
    """DeepCompile offload_adam_states: the fp32 master, m and v leave under the forwards and come back under
    the backwards; no CPU step, no gradient or weight copies."""
    workload = _workload(offload_optimizer=1.0, offload_optimizer_step="gpu")
    grid = grid_of([Parallelism(dp=8, zero=3)], model=MODEL, micro_batch_size=[1], num_microbatches=[2])
    params = np.asarray([1e9])
    states_s = 1e9 * 12 / 64e9  # the fp32 master, m and v: 187.5 ms each way
    forward, backward = np.asarray([0.05]), np.asarray([0.25])  # two micro-batches: 0.1 s and 0.5 s
    time = offload_time(workload, grid, DGX, H100, [params, params], [(forward, backward)] * 2, 14e6)
    assert time.cpu_optimizer_s[0] == 0
    assert time.transfer_s[0] == pytest.approx(2 * states_s)
    assert time.exposed_s[0] == pytest.approx(states_s - 0.1)  # the way back hides under 0.5 s of backward
    # activations offloaded too share the link with the states: out under the same forwards, back under
    # the same backwards, so the window hides their sum once
    both = _workload(offload_optimizer=1.0, offload_optimizer_step="gpu", offload_activations=1.0)
    shared = offload_time(both, grid, DGX, H100, [params, params], [(forward, backward)] * 2, 14e6)
    acts_s = (shared.transfer_s[0] - 2 * states_s) / 4  # one micro-batch's activations, one way
    assert acts_s > 0
    assert shared.exposed_s[0] == pytest.approx(
        max(states_s + 2 * acts_s - 0.1, 0.0) + max(states_s + 2 * acts_s - 0.5, 0.0)
    )


def test_states_stepped_on_the_gpu_are_what_the_memory_model_holds() -> None:
    """The fp32 master, m and v (12 B) for Megatron and ZeRO; m and v alone (8 B) for FSDP, whose fp32
    parameter shard is the master; the master and Adam's states alike in fp32 training."""
    by_sharding = dict(zip(SHARDINGS, gpu_stepped_state_bytes(_workload()), strict=True))
    assert by_sharding["zero-3"] == by_sharding["none"] == 12.0
    assert by_sharding["fsdp-full"] == by_sharding["fsdp-hybrid"] == 8.0
    assert all(b == 8.0 for b in gpu_stepped_state_bytes(_workload(precision="fp32")))


def test_the_step_pays_for_offload_and_memory_drops() -> None:
    layout = Parallelism(dp=8, zero=1)
    grid = grid_of([layout], model=MODEL, micro_batch_size=[1], num_microbatches=[8])
    machine = machine_for(DGX, H100, 8)
    plain = estimate_steps(_workload(), grid, machine)
    moved = estimate_steps(_workload(offload_optimizer=1.0, offload_activations=0.5), grid, machine)
    assert plain.breakdown_s["offload"][0] == 0
    assert moved.breakdown_s["offload"][0] > 0

    # the offload adds its exposed part (and the stragglers' share of a longer step grows with it)
    def before_stragglers(estimate):  # type: ignore[no-untyped-def]
        return estimate.step_time_s[0] - estimate.breakdown_s["stragglers"][0]

    # ... and the GPU no longer steps the states the CPU steps
    assert moved.breakdown_s["optimizer"][0] < plain.breakdown_s["optimizer"][0]
    assert before_stragglers(moved) == pytest.approx(
        before_stragglers(plain)
        - plain.breakdown_s["optimizer"][0]
        + moved.breakdown_s["optimizer"][0]
        + moved.breakdown_s["offload"][0]
    )
    assert (
        _stage(_workload(offload_optimizer=1.0, offload_activations=0.5), layout).total_bytes
        < _stage(_workload(), layout).total_bytes
    )


def test_the_gpu_leaves_the_cpu_its_gradients_pass_where_the_gradients_went() -> None:
    """A CPU step of every state: ZeRO-2 streamed its gradients out, so the GPU neither steps nor reads them;
    ZeRO-1 keeps its gradients, and the GPU still takes their norm and zeroes them."""
    machine = machine_for(DGX, H100, 8)
    moved = _workload(offload_optimizer=1.0)
    kept_grid, moved_grid = (
        grid_of([Parallelism(dp=8, zero=z)], model=MODEL, micro_batch_size=[1], num_microbatches=[8])
        for z in (1, 2)
    )
    assert estimate_steps(moved, moved_grid, machine).breakdown_s["optimizer"][0] == 0
    kept = estimate_steps(moved, kept_grid, machine).breakdown_s["optimizer"][0]
    assert 0 < kept < estimate_steps(_workload(), kept_grid, machine).breakdown_s["optimizer"][0]


def test_offload_needs_the_host_link_in_the_catalog() -> None:
    scenario = load_scenario(
        None,
        {
            "model.preset": "llama3.1-8b",
            "cluster.gpu": "mi300x",
            "cluster.num_gpus": "8",
            "training.global_batch_size": "64",
            "training.offload_optimizer": "100%",
        },
    )
    with pytest.raises(InputError) as caught:
        perf_inputs(resolve_scenario(scenario, None))
    assert caught.value.field == "training.offload_optimizer" and "host_link_bandwidth" in (
        caught.value.hint or ""
    )


def test_a_cpu_step_needs_the_host_cores_in_the_catalog() -> None:
    """A node without host_cpu_cores cannot cost a CPU step; the same offload stepped on the GPU can."""
    base = {
        "model.preset": "llama3.1-8b",
        "cluster.system": "p5-48xlarge",
        "cluster.num_gpus": "8",
        "training.global_batch_size": "64",
        "training.offload_optimizer": "100%",
    }
    with pytest.raises(InputError) as caught:
        perf_inputs(resolve_scenario(load_scenario(None, base), None))
    assert caught.value.field == "training.offload_optimizer_step"
    assert "host_memory_bandwidth" in str(caught.value) and "gpu" in (caught.value.hint or "")
    gpu_step = {**base, "training.offload_optimizer_step": "gpu"}
    assert (
        perf_inputs(resolve_scenario(load_scenario(None, gpu_step), None)).workload.offload_optimizer == 1.0
    )


@pytest.mark.parametrize("missing", ["host_memory_bytes_per_s", "host_cpu_cores"])
def test_a_cpu_step_is_refused_for_either_missing_host_fact(missing: str) -> None:
    """A node with its DRAM bandwidth but not its cores (or the reverse) cannot cost a CPU step either."""
    node = DGX.model_copy(update={missing: None})
    other = "host_cpu_cores" if missing == "host_memory_bytes_per_s" else "host_memory_bandwidth"
    with pytest.raises(InputError) as caught:
        host_rates(_workload(offload_optimizer=1.0), node, H100)
    named = "host_memory_bandwidth" if missing == "host_memory_bytes_per_s" else "host_cpu_cores"
    assert caught.value.field == "training.offload_optimizer_step"
    assert named in str(caught.value) and other not in str(caught.value)
    rates = host_rates(_workload(offload_optimizer=1.0, offload_optimizer_step="gpu"), node, H100)
    assert (rates.memory_bytes_per_s, rates.cpu_cores) == (0.0, 0.0)
    assert host_rates(_workload(offload_optimizer=1.0), DGX, H100).cpu_cores == 112 / 8


def test_offload_shares_come_from_the_scenario() -> None:
    training = TrainingSection(offload_optimizer="50%", offload_activations=0.25)  # type: ignore[arg-type]
    workload = training_workload(MODEL, training, 64)
    assert (workload.offload_optimizer, workload.offload_params, workload.offload_activations) == (
        0.5,
        0.0,
        0.25,
    )
