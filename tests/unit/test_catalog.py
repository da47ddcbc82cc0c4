"""Every catalog entry is a fact with a source: schema, plausible ranges, internal consistency."""

from __future__ import annotations

import pytest

from mfukit import catalog
from mfukit.core.hardware import Accelerator, Link, StorageTier, Switch, System
from mfukit.core.model import ModelSpec

ACCELERATORS = [e for e in catalog.entries("accelerators").values() if isinstance(e, Accelerator)]
SYSTEMS = [e for e in catalog.entries("systems").values() if isinstance(e, System)]


def test_every_entry_has_a_source() -> None:
    for kind in catalog.KINDS:
        for name, entry in catalog.entries(kind).items():
            assert entry.source is not None, f"{kind}/{name} has no [source]"


@pytest.mark.parametrize("device", ACCELERATORS, ids=lambda a: a.name)
def test_accelerator_peaks_are_plausible(device: Accelerator) -> None:
    peaks = device.peak_flops_per_s
    assert "bf16" in peaks or "fp16" in peaks
    half = peaks.get("bf16", peaks.get("fp16", 0.0))
    assert 50e12 <= half <= 5e15, "16-bit dense peak out of the plausible range"
    if "fp32" in peaks:
        assert half >= peaks["fp32"], "bf16 must not be slower than fp32"
    if "fp8" in peaks:
        assert peaks["fp8"] >= half
    for dtype, sparse in device.sparse_peak_flops_per_s.items():
        assert sparse >= peaks[dtype], f"sparse {dtype} below dense"
    assert 8 * 2**30 <= device.hbm_bytes <= 512 * 2**30
    assert 0.3e12 <= device.hbm_bytes_per_s <= 20e12
    assert 50 <= device.tdp_w <= 2000


def test_every_accelerator_default_node_exists() -> None:
    for device in ACCELERATORS:
        if device.default_system is not None:
            assert catalog.system(device.default_system).accelerator == device.name


@pytest.mark.parametrize("node", SYSTEMS, ids=lambda s: s.name)
def test_system_references_resolve(node: System) -> None:
    catalog.accelerator(node.accelerator)
    catalog.link(node.scale_up_fabric)
    catalog.link(node.scale_out_fabric)
    assert node.nic_bytes_per_s <= 200e9


def test_switches_speak_a_known_link() -> None:
    for entry in catalog.entries("fabrics").values():
        if isinstance(entry, Switch):
            catalog.link(entry.link)
            assert entry.radix_at(entry.port_configs[0].port_bytes_per_s) >= 1
        else:
            assert isinstance(entry, Link)


def test_storage_aggregate_not_below_one_client() -> None:
    for entry in catalog.entries("storage").values():
        assert isinstance(entry, StorageTier)
        if entry.aggregate_write_bytes_per_s is not None:
            assert entry.aggregate_write_bytes_per_s >= entry.per_client_write_bytes_per_s


def test_model_presets_are_valid_transformers() -> None:
    for entry in catalog.entries("models").values():
        assert isinstance(entry, ModelSpec)
        assert entry.active_params() <= entry.total_params()
