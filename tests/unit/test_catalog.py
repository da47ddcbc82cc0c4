"""Every catalog entry is a fact with a source: schema, plausible ranges, internal consistency.

The checks are parametrized over whatever the catalog holds, so adding a GPU, node, link or model is a
data-only change that these tests check without being edited.
"""

from __future__ import annotations

import re
from datetime import date

import pytest

from mfukit import catalog
from mfukit.core.hardware import Accelerator, Link, StorageTier, Switch, System
from mfukit.core.model import ModelSpec
from mfukit.errors import UnknownNameError

ACCELERATORS = [e for e in catalog.entries("accelerators").values() if isinstance(e, Accelerator)]
SYSTEMS = [e for e in catalog.entries("systems").values() if isinstance(e, System)]
LINKS = [e for e in catalog.entries("fabrics").values() if isinstance(e, Link)]
SWITCHES = [e for e in catalog.entries("fabrics").values() if isinstance(e, Switch)]
STORAGE = [e for e in catalog.entries("storage").values() if isinstance(e, StorageTier)]
MODELS = [e for e in catalog.entries("models").values() if isinstance(e, ModelSpec)]

SCALE_UP_FAMILIES = {"nvlink", "xgmi", "ici", "pcie"}
SCALE_OUT_FAMILIES = {"infiniband", "roce", "ethernet"}


def _name(entry: object) -> str:
    return str(getattr(entry, "name", entry))


def test_every_entry_has_a_real_source() -> None:
    for kind in catalog.KINDS:
        for name, entry in catalog.entries(kind).items():
            assert re.fullmatch(r"[a-z0-9][a-z0-9.-]*", name), f"{kind}/{name}: names are lowercase-hyphen"
            assert entry.source is not None, f"{kind}/{name} has no [source]"
            assert entry.source.url.startswith("https://"), f"{kind}/{name}: source url"
            assert len(entry.source.what) >= 20, f"{kind}/{name}: say what the source states"
            assert entry.source.retrieved <= date.today()


def test_every_kind_is_populated() -> None:
    """The catalog covers the hardware generations and model families the tool is sized for."""
    assert len(ACCELERATORS) >= 17 and len(SYSTEMS) >= 8 and len(LINKS) >= 14
    assert len(SWITCHES) >= 4 and len(STORAGE) >= 5 and len(MODELS) >= 26


@pytest.mark.parametrize("device", ACCELERATORS, ids=_name)
def test_accelerator_peaks_are_plausible(device: Accelerator) -> None:
    peaks = device.peak_flops_per_s
    assert "bf16" in peaks or "fp16" in peaks
    half = peaks.get("bf16", peaks.get("fp16", 0.0))
    assert 50e12 <= half <= 5e15, "16-bit dense peak out of the plausible range"
    for wider in ("fp64", "fp32", "tf32"):
        if wider in peaks:
            assert peaks[wider] <= half, f"bf16 must not be slower than {wider}"
    if "fp64" in peaks and "fp32" in peaks:
        assert peaks["fp64"] <= peaks["fp32"]
    if "fp8" in peaks:
        assert peaks["fp8"] >= half
    if "fp4" in peaks:
        assert peaks["fp4"] >= peaks["fp8"]
    for dtype, sparse in device.sparse_peak_flops_per_s.items():
        assert dtype in peaks, f"sparse {dtype} without a dense {dtype}"
        # 2:4 structured sparsity doubles the tensor-core rate; datasheets round, hence the 3 % slack.
        assert peaks[dtype] <= sparse <= 2.03 * peaks[dtype], f"sparse {dtype} is not ~2x dense"


@pytest.mark.parametrize("device", ACCELERATORS, ids=_name)
def test_accelerator_memory_power_and_links_are_plausible(device: Accelerator) -> None:
    assert 8 * 2**30 <= device.hbm_bytes <= 512 * 2**30
    # HBM stacks are binary sizes, and vendors' "80 GB" means 80 GiB: a decimal entry would read ~7 % low
    assert device.hbm_bytes % 2**30 == 0, f"{device.name}: HBM of {device.hbm_bytes} B is not whole GiB"
    assert 0.3e12 <= device.hbm_bytes_per_s <= 20e12
    assert 10e9 <= device.scale_up_bytes_per_s <= 2e12
    if device.tdp_w is None:
        assert "TDP" in device.notes, "an unpublished TDP must be explained in notes"
    else:
        assert 50 <= device.tdp_w <= 2000
    assert device.generation


@pytest.mark.parametrize("device", ACCELERATORS, ids=_name)
def test_accelerator_has_a_sourced_typical_mfu(device: Accelerator) -> None:
    mfu = device.typical_mfu
    assert mfu is not None, "the planner needs a typical MFU per accelerator"
    assert 0.15 <= mfu.value <= 0.75
    assert mfu.url.startswith("https://") and len(mfu.what) >= 40


@pytest.mark.parametrize("device", ACCELERATORS, ids=_name)
def test_accelerator_default_node_exists_and_carries_it(device: Accelerator) -> None:
    assert device.default_system is not None
    node = catalog.system(device.default_system)
    assert node.accelerator == device.name
    # The node's scale-up link must be able to carry what the device says it sends per direction.
    assert device.scale_up_bytes_per_s <= catalog.link(node.scale_up_fabric).port_bytes_per_s * 1.001


@pytest.mark.parametrize("node", SYSTEMS, ids=_name)
def test_system_references_resolve(node: System) -> None:
    catalog.accelerator(node.accelerator)
    assert catalog.link(node.scale_up_fabric).family in SCALE_UP_FAMILIES
    assert catalog.link(node.scale_out_fabric).family in SCALE_OUT_FAMILIES
    assert 1 <= node.nics_per_node <= 32  # AWS p5.48xlarge: 32 EFA cards of 100 Gb/s
    assert 10e9 <= node.nic_bytes_per_s <= 200e9
    assert node.scale_up_domain_gpus % node.gpus_per_node == 0
    assert 64 * 2**30 <= node.host_memory_bytes <= 8 * 2**40


def test_rack_scale_domain_spans_trays() -> None:
    nvl72 = catalog.system("gb200-nvl72")
    assert (nvl72.gpus_per_node, nvl72.scale_up_domain_gpus) == (4, 72)


@pytest.mark.parametrize("link", LINKS, ids=_name)
def test_links_are_plausible(link: Link) -> None:
    assert 1e9 <= link.port_bytes_per_s <= 2e12
    # switch hops of 0.1-1 us; AWS EFA publishes none, its entry carries an end-to-end NCCL figure (12.9 us)
    assert 50e-9 <= link.latency_s <= 20e-6


@pytest.mark.parametrize("switch", SWITCHES, ids=_name)
def test_switches_speak_a_known_link(switch: Switch) -> None:
    link = catalog.link(switch.link)
    top = switch.port_configs[0]
    assert top.port_bytes_per_s == pytest.approx(link.port_bytes_per_s), "first config runs at the link rate"
    assert switch.radix_at(top.port_bytes_per_s) == top.ports
    for config in switch.port_configs:  # breakouts split ports; they never add capacity
        assert config.ports * config.port_bytes_per_s == pytest.approx(switch.switching_capacity_bytes_per_s)
    if switch.power_w is None:
        assert "Power" in switch.notes, "a missing power figure must be explained in notes"


@pytest.mark.parametrize("tier", STORAGE, ids=_name)
def test_storage_aggregate_not_below_one_client(tier: StorageTier) -> None:
    for per_client, aggregate in (
        (tier.per_client_write_bytes_per_s, tier.aggregate_write_bytes_per_s),
        (tier.per_client_read_bytes_per_s, tier.aggregate_read_bytes_per_s),
    ):
        assert 0.1e9 <= per_client <= 100e9
        if aggregate is not None:
            assert aggregate >= per_client
    assert tier.write_bytes_per_s(10_000) >= tier.write_bytes_per_s(1)


@pytest.mark.parametrize("tier", STORAGE, ids=_name)
def test_storage_rates_a_source_does_not_state_are_marked_assumed(tier: StorageTier) -> None:
    if "states no rates" in tier.source.what:
        assert "ASSUMED" in tier.notes and "override" in tier.notes


def test_storage_covers_each_kind() -> None:
    assert {t.kind for t in STORAGE} == {"parallel-fs", "flash-fs", "local-nvme", "object-store"}


@pytest.mark.parametrize("model", MODELS, ids=_name)
def test_model_presets_are_valid_transformers(model: ModelSpec) -> None:
    assert model.active_params() <= model.total_params()
    assert model.num_attention_heads % model.kv_heads == 0
    assert model.display_name
    if model.moe is not None:
        assert model.num_moe_layers >= 1 and model.active_params() < model.total_params()


@pytest.mark.parametrize("kind", catalog.KINDS)
def test_names_and_aliases_are_unique_once_folded(kind: catalog.Kind) -> None:
    """Every name and alias, case and punctuation folded, names exactly one entry of its kind."""
    clashes = {key: names for key, names in catalog.lookup_keys(kind).items() if len(names) > 1}
    assert not clashes


def test_models_carry_their_hub_ids_as_aliases() -> None:
    hub_ids = [alias for model in MODELS for alias in model.aliases if "/" in alias]
    assert len(hub_ids) >= 15
    for model in MODELS:
        for alias in model.aliases:
            assert catalog.model(alias).name == model.name


@pytest.mark.parametrize(
    ("typed", "name"),
    [
        ("llama-2-13b", "llama2-13b"),
        ("meta-llama/Llama-2-13b-hf", "llama2-13b"),
        ("LLAMA2_13B", "llama2-13b"),
        ("Llama 3.1 70B", "llama3.1-70b"),
        ("meta-llama/Meta-Llama-3.1-405B", "llama3.1-405b"),
        ("GPT3-1.3B", "gpt3-1.3b"),
        ("gpt3-13b", "gpt3-13b"),
        ("A100-80GB-SXM", "a100-80gb-sxm"),
    ],
)
def test_lookups_fold_case_punctuation_and_aliases(typed: str, name: str) -> None:
    kind = "accelerators" if name.startswith("a100") else "models"
    assert catalog.get(kind, typed).name == name


def test_a_true_miss_still_suggests() -> None:
    with pytest.raises(UnknownNameError) as raised:
        catalog.model("llama-2-14b")
    assert "llama2-13b" in raised.value.suggestions
