"""Invariants of the step-time model over layouts the planner proposes (hypothesis draws the workload and
cluster, each example checks a sample of that space's layouts at once)."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mfukit import catalog
from mfukit.core.schema import si
from mfukit.perf.layouts import LayoutGrid, Workload, step_shape, with_changes
from mfukit.perf.memory import estimate_memory
from mfukit.perf.memory_grid import grid_memory
from mfukit.perf.planner import SearchSpace, enumerate_layouts, least_recompute, recomputing_fewer
from mfukit.perf.step_time import StepEstimate, estimate_steps, machine_for

MODELS = ("gpt3-13b", "llama2-70b", "mixtral-8x7b", "llama3.1-8b", "deepseek-v3")
SYSTEMS = ("dgx-a100-80gb", "dgx-h100", "gb200-nvl72", "p5-48xlarge")
SAMPLE = 60


@st.composite
def spaces(draw: st.DrawFn) -> tuple[Workload, str, int, LayoutGrid]:
    model = catalog.model(draw(st.sampled_from(MODELS)))
    system = draw(st.sampled_from(SYSTEMS))
    nodes = draw(st.sampled_from((2, 4, 16, 64)))
    seq_len = draw(st.sampled_from((2048, 4096, 16384)))
    batch = draw(st.sampled_from((256, 512, 1024)))
    fp8 = "fp8" in catalog.accelerator(catalog.system(system).accelerator).peak_flops_per_s
    precision = draw(st.sampled_from(("bf16", "fp8") if fp8 else ("bf16",)))
    gpus = nodes * catalog.system(system).gpus_per_node
    workload = Workload(model=model, seq_len=seq_len, global_batch_sequences=batch, precision=precision)
    grid, _, _ = enumerate_layouts(
        workload, catalog.system(system), gpus, SearchSpace(micro_batch_size=(1, 2))
    )
    seed = draw(st.integers(0, 2**16))
    picked = np.random.default_rng(seed).permutation(len(grid))[:SAMPLE]
    return workload, system, gpus, grid.take(np.sort(picked))


def _estimate(workload: Workload, system: str, gpus: int, grid: LayoutGrid, **nic: float) -> StepEstimate:
    node = catalog.system(system)
    if nic:
        node = node.model_copy(update=nic)
    return estimate_steps(workload, grid, machine_for(node, catalog.accelerator(node.accelerator), gpus))


SETTINGS = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(spaces())
def test_step_time_is_at_least_the_compute_bound_and_mfu_below_the_roofline(
    case: tuple[Workload, str, int, LayoutGrid],
) -> None:
    workload, system, gpus, grid = case
    if not len(grid):
        return
    estimate = _estimate(workload, system, gpus, grid)
    assert np.all(estimate.step_time_s >= estimate.compute_bound_s)
    # MFU at the compute bound (every matmul at peak, nothing else) is the roofline MFU
    roofline = estimate.mfu * estimate.step_time_s / estimate.compute_bound_s
    assert np.all(estimate.mfu <= roofline + 1e-12)
    assert np.all((estimate.mfu > 0) & (estimate.mfu < 1))
    assert np.all(estimate.hfu >= estimate.mfu - 1e-12)


@SETTINGS
@given(spaces())
def test_recomputing_more_layers_never_makes_a_step_faster(
    case: tuple[Workload, str, int, LayoutGrid],
) -> None:
    workload, system, gpus, grid = case
    if not len(grid):
        return
    steps = [
        _estimate(workload, system, gpus, with_changes(grid, recompute=mode, recompute_layers=layers))
        for mode, layers in ((0, 0), (2, 1), (2, 2), (2, 0))
    ]
    for fewer, more in pairwise(steps):
        assert np.all(more.step_time_s >= fewer.step_time_s * (1 - 1e-12))
        assert np.all(more.hfu / more.mfu >= fewer.hfu / fewer.mfu * (1 - 1e-12))


@SETTINGS
@given(spaces(), st.sampled_from((0.5, 0.25)))
def test_a_slower_network_never_makes_a_step_faster(
    case: tuple[Workload, str, int, LayoutGrid], factor: float
) -> None:
    workload, system, gpus, grid = case
    if not len(grid):
        return
    fast = _estimate(workload, system, gpus, grid)
    rate = catalog.system(system).nic_bytes_per_s
    slow = _estimate(workload, system, gpus, grid, nic_bytes_per_s=si(rate * factor))
    assert np.all(slow.step_time_s >= fast.step_time_s * (1 - 1e-12))


@SETTINGS
@given(spaces())
def test_memory_never_rises_with_more_sharding_or_more_recompute(
    case: tuple[Workload, str, int, LayoutGrid],
) -> None:
    workload, system, _gpus, grid = case
    if not len(grid):
        return
    gpn = catalog.system(system).gpus_per_node

    def peak(**changes: object) -> np.ndarray:
        return grid_memory(workload, with_changes(grid, **changes), gpus_per_node=gpn).peak_bytes

    # recompute: none (0) >= selective (1) >= full (2); full recompute of the first layers of each chunk
    # sits between none and full, lower the more layers it covers
    none, selective, full = peak(recompute=0), peak(recompute=1), peak(recompute=2)
    assert np.all(selective <= none * (1 + 1e-12)) and np.all(full <= selective * (1 + 1e-12))
    one, two = (peak(recompute=2, recompute_layers=n) for n in (1, 2))
    assert np.all(full <= two * (1 + 1e-12)) and np.all(two <= one * (1 + 1e-12))
    assert np.all(one <= none * (1 + 1e-12))
    # sharding: the distributed optimizer never holds more than DDP, and with any convention twice the
    # data-parallel ranks (the same micro-batches in flight) never raises the peak once the data-parallel
    # communicator exists (from one rank to two, its NCCL buffers appear)
    assert np.all(peak(sharding=1) <= peak(sharding=0) * (1 + 1e-12))
    base = grid_memory(workload, grid, gpus_per_node=gpn).peak_bytes
    shared = grid.dp * grid.cp >= 2
    assert np.all(peak(dp=grid.dp * 2)[shared] <= base[shared] * (1 + 1e-12))


@SETTINGS
@given(spaces(), st.sampled_from((0, 1, 3)))
def test_the_memory_grid_is_estimate_memory_layout_by_layout(
    case: tuple[Workload, str, int, LayoutGrid], recompute_layers: int
) -> None:
    workload, system, _gpus, grid = case
    if recompute_layers:  # full recompute of the first layers of each chunk only
        grid = with_changes(grid, recompute=2, recompute_layers=recompute_layers)
    gpn = catalog.system(system).gpus_per_node
    peaks = grid_memory(workload, grid, gpus_per_node=gpn).peak_bytes
    for index in range(0, len(grid), 7):
        layout = grid.layout(index, workload.model.num_hidden_layers)
        shape = step_shape(
            workload,
            layout,
            micro_batch_size=int(grid.mbs[index]),
            num_microbatches=int(grid.num_microbatches[index]),
            gpus_per_node=gpn,
        )
        assert peaks[index] == pytest.approx(
            estimate_memory(workload.model, layout, shape).peak_bytes, rel=1e-9
        )


@SETTINGS
@given(spaces(), st.sampled_from((0.0, 4.0)))
def test_the_least_recompute_found_fits_on_every_stage_and_one_layer_fewer_would_not(
    case: tuple[Workload, str, int, LayoutGrid], headroom_gib: float
) -> None:
    workload, system, _gpus, grid = case
    node = catalog.system(system)
    hbm, headroom = catalog.accelerator(node.accelerator).hbm_bytes, headroom_gib * 2**30
    every = with_changes(grid, recompute=2, recompute_layers=0)  # the sample as full-recompute layouts
    counts = least_recompute(workload, every, node.gpus_per_node, hbm, headroom, none_searched=False)
    partial = recomputing_fewer(every, counts)
    if not len(partial):
        return
    memory = grid_memory(workload, partial, gpus_per_node=node.gpus_per_node)
    assert np.all(memory.peak_bytes <= hbm - headroom + 1.0) and np.all(memory.required_bytes <= hbm + 1.0)
    fewer = with_changes(partial, recompute_layers=partial.recompute_layers - 1)
    tighter = partial.recompute_layers > 1
    if not tighter.any():
        return
    over = grid_memory(workload, fewer.take(tighter), gpus_per_node=node.gpus_per_node)
    assert np.all((over.peak_bytes > hbm - headroom) | (over.required_bytes > hbm))
