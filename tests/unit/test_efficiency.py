"""Efficiency profiles: every accelerator has one, borrowing is said, provenance matches the data."""

from __future__ import annotations

import pytest

from mfukit import catalog
from mfukit.errors import InputError
from mfukit.perf.calibration_data import file_digests, in_fit_split
from mfukit.perf.efficiency import efficiency_file, efficiency_for


@pytest.mark.parametrize("name", sorted(catalog.entries("accelerators")))
def test_every_catalog_accelerator_has_a_profile(name: str) -> None:
    accelerator = catalog.accelerator(name)
    efficiency = efficiency_for(accelerator)
    assert "is in no efficiency profile" not in " ".join(efficiency.notes)
    assert 0.2 < efficiency.gemm_peak_fraction <= 1 and 0 < efficiency.attention_peak_fraction <= 1
    if efficiency.calibrated:
        assert name in {"a100-40gb-sxm", "a100-80gb-sxm", "h100-sxm"}
    else:
        assert any("uncalibrated" in note for note in efficiency.notes)


def test_borrowed_framework_constants_are_named() -> None:
    h100 = catalog.accelerator("h100-sxm")
    titan = efficiency_for(h100, "torchtitan")
    assert not titan.calibrated and "constants of fsdp" in " ".join(titan.notes)
    fsdp = efficiency_for(h100, "fsdp")  # LLM Foundry never used TP or PP: those costs are Megatron's
    assert "megatron's" in " ".join(fsdp.notes)
    assert fsdp.collective_overhead_s == efficiency_for(h100, "megatron").collective_overhead_s


def test_unknown_framework_is_bad_input_with_a_suggestion() -> None:
    with pytest.raises(InputError) as raised:
        efficiency_for(catalog.accelerator("h100-sxm"), "megatorn")
    assert "megatron" in raised.value.render()


def test_fit_split_is_deterministic_and_about_thirty_percent() -> None:
    fitted = sum(in_fit_split("vtrain_single", row) for row in range(1, 1441))
    assert 0.25 < fitted / 1440 < 0.35
    assert in_fit_split("vtrain_single", 7) == in_fit_split("vtrain_single", 7)
    assert not any(in_fit_split("torchtitan", row) for row in range(83, 105))


def test_profiles_record_the_data_they_were_fitted_on() -> None:
    provenance = efficiency_file().provenance
    assert len(provenance.files) == 3 and all(len(digest) == 64 for digest in provenance.files.values())
    try:
        from mfukit.perf.calibration_data import calibration_dir

        folder = calibration_dir()
    except InputError:
        pytest.skip("calibration data not present (shared/reference/calibration)")
    assert file_digests(folder) == provenance.files, "the data changed: run python -m mfukit.perf.calibrate"
