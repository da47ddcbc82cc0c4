"""Invariants of the collective model: monotone in size, bounded by its tiers, vectorised = scalar."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mfukit import catalog
from mfukit.comm.collectives import COLLECTIVES
from mfukit.comm.model import collective_time_s, predict
from mfukit.comm.topology import CommTopology, from_system


def topology(name: str, nodes: int) -> CommTopology:
    system = catalog.system(name)
    return from_system(system, catalog.accelerator(system.accelerator), num_nodes=nodes)[0]


SYSTEMS = st.sampled_from(["dgx-h100", "dgx-a100-80gb"])
SIZES = st.lists(st.floats(min_value=1.0, max_value=2.0**34), min_size=1, max_size=12)
NODES = st.integers(min_value=1, max_value=64)


@settings(max_examples=60, deadline=None)
@given(SYSTEMS, NODES, st.sampled_from([c for c in COLLECTIVES if c != "send_recv"]), SIZES)
def test_time_grows_with_size_and_busbw_stays_under_the_scale_up_ceiling(
    name: str, nodes: int, collective: str, sizes: list[float]
) -> None:
    topo = topology(name, nodes)
    ordered = np.sort(np.asarray(sizes))
    prediction = predict(collective, ordered, topo, nodes * topo.gpus_per_node)  # type: ignore[arg-type]
    assert np.all(np.diff(prediction.time_s) >= -1e-15)
    assert np.all(prediction.time_s > 0)
    ceiling = topo.intra_bytes_per_s * 2.0 if collective == "all_reduce" else topo.intra_bytes_per_s
    assert np.all(prediction.busbw_bytes_per_s <= ceiling * (1 + 1e-9))


@settings(max_examples=60, deadline=None)
@given(SYSTEMS, st.integers(min_value=2, max_value=64), SIZES)
def test_ring_never_beats_the_node_nics(name: str, nodes: int, sizes: list[float]) -> None:
    topo = topology(name, nodes)
    prediction = predict("all_reduce", np.asarray(sizes), topo, nodes * topo.gpus_per_node, algorithm="ring")
    node_nics = topo.nic_bytes_per_s_per_gpu * topo.gpus_per_node
    assert np.all(prediction.busbw_bytes_per_s <= min(node_nics, topo.intra_bytes_per_s) * (1 + 1e-9))


@settings(max_examples=40, deadline=None)
@given(SYSTEMS, st.lists(st.integers(min_value=1, max_value=32), min_size=1, max_size=6), SIZES)
def test_vectorised_equals_scalar(name: str, node_counts: list[int], sizes: list[float]) -> None:
    topo = topology(name, 32)
    groups = np.asarray([n * topo.gpus_per_node for n in node_counts])
    grid_sizes, grid_groups = np.meshgrid(np.asarray(sizes), groups)
    vectorised = collective_time_s("all_reduce", grid_sizes, topo, grid_groups)
    for (i, j), value in np.ndenumerate(vectorised):
        scalar = predict("all_reduce", grid_sizes[i, j], topo, int(grid_groups[i, j])).time_s[0]
        assert value == scalar


@settings(max_examples=40, deadline=None)
@given(SYSTEMS, st.floats(min_value=2.0**20, max_value=2.0**34), st.integers(min_value=2, max_value=32))
def test_a_larger_ring_is_never_faster(name: str, size: float, nodes: int) -> None:
    topo = topology(name, 64)
    smaller = predict("all_reduce", size, topo, nodes * 8, algorithm="ring").time_s[0]
    larger = predict("all_reduce", size, topo, (nodes + 1) * 8, algorithm="ring").time_s[0]
    assert larger >= smaller


@settings(max_examples=30, deadline=None)
@given(st.floats(min_value=1.0, max_value=16.0), st.integers(min_value=33, max_value=256))
def test_oversubscription_never_speeds_all_to_all(ratio: float, nodes: int) -> None:
    system = catalog.system("dgx-h100")
    accel = catalog.accelerator(system.accelerator)
    flat = from_system(system, accel, num_nodes=nodes)[0]
    thin = flat.with_options(oversubscription=ratio)  # same leaf groups, thinner uplinks
    gpus = nodes * 8
    slow = predict("all_to_all", 2.0**30, thin, gpus).time_s[0]
    assert slow >= predict("all_to_all", 2.0**30, flat, gpus).time_s[0]
