"""Efficiency profiles: every accelerator has one, borrowing is said, provenance matches the data."""

from __future__ import annotations

import pytest

from mfukit import catalog
from mfukit.core.hardware import Accelerator, AchievedGemm, Dtype
from mfukit.errors import InputError
from mfukit.perf.calibration_data import data_files, file_digests, highest_measured_mfu, load_cases
from mfukit.perf.efficiency import (
    DEFAULT_FRAMEWORK,
    FRAMEWORK_FIELDS,
    Efficiency,
    beyond_measured,
    efficiency_file,
    efficiency_for,
    measured_part,
    model_gemm_curve,
)


@pytest.fixture(scope="module")
def measured_accelerators() -> set[str]:
    return {case.accelerator.name for case in load_cases()}


@pytest.mark.parametrize("name", sorted(catalog.entries("accelerators")))
def test_every_catalog_accelerator_has_a_profile(name: str, measured_accelerators: set[str]) -> None:
    """A profile calls itself calibrated only for a part the calibration data measured."""
    accelerator = catalog.accelerator(name)
    efficiency = efficiency_for(accelerator)
    assert "is in no efficiency profile" not in " ".join(efficiency.notes)
    assert 0.2 < efficiency.gemm_peak_fraction <= 1 and 0 < efficiency.attention_peak_fraction <= 1
    if efficiency.calibrated:
        assert name in measured_accelerators
    else:
        assert any("uncalibrated" in note for note in efficiency.notes)


def test_borrowed_framework_constants_are_named() -> None:
    """A stack that runs another's code says whose constants it has; a constant no run of a stack could
    show is the default stack's, named as such, and never one the stack (or the stack it runs) has."""
    h100 = catalog.accelerator("h100-sxm")
    content = efficiency_file()
    titan = efficiency_for(h100, "torchtitan")  # FSDP2 underneath: FSDP's fitted host costs, its own facts
    assert "the constants of fsdp" in " ".join(titan.notes) and titan.eager_elementwise == "composite"
    reference = efficiency_for(h100, DEFAULT_FRAMEWORK)
    assert reference.attention_speedup == 1.0 and "not shown" not in " ".join(reference.notes)
    gap = next(p for p in content.framework if p.name == "fsdp" and not p.borrows and p.p2p_overhead_s)
    without_p2p = content.model_copy(
        update={
            "framework": [
                p.model_copy(update={"p2p_overhead_s": None}) if p is gap else p for p in content.framework
            ]
        }
    )
    stacks = {p.name: p for p in without_p2p.framework}
    for profile in without_p2p.framework:
        efficiency = efficiency_for(h100, profile.name, file=without_p2p)
        shown = stacks[profile.borrows] if profile.borrows else profile
        framework_note = next(n for n in efficiency.notes if n.startswith("framework "))
        gaps = framework_note.partition("; ")[2].partition(" not shown by its data")[0]
        for name in FRAMEWORK_FIELDS:
            own = getattr(profile, name) if getattr(profile, name) is not None else getattr(shown, name)
            if own is not None:
                assert name not in gaps and getattr(efficiency, name) == own, (profile.name, name)
            elif name != "attention_speedup" or shown.name != DEFAULT_FRAMEWORK:
                assert name in gaps and getattr(efficiency, name) == getattr(reference, name), (
                    profile.name,
                    name,
                )
    assert "p2p_overhead_s" in efficiency_for(h100, "torchtitan", file=without_p2p).notes[1]


def test_framework_facts_follow_the_code_they_cite() -> None:
    h100 = catalog.accelerator("h100-sxm")
    nanotron = efficiency_for(h100, "nanotron")  # fp32 buckets reduced in the backward; gather after step
    assert (nanotron.grad_reduce_overlap, nanotron.param_gather_overlap) == (1.0, 0.0)
    assert nanotron.grad_reduce_bytes == 4 and nanotron.grad_bucket_params == pytest.approx(25 * 2**20 / 2)
    deepspeed = efficiency_for(h100, "megatron-deepspeed")  # local DDP: one fp16 all-reduce after backward
    assert (deepspeed.grad_reduce_overlap, deepspeed.grad_reduce_bytes, deepspeed.grad_bucket_params) == (
        0.0,
        2.0,
        None,
    )
    megatron = efficiency_for(h100, "megatron")  # the alias of Megatron-Core: both overlaps, 40M buckets
    assert megatron.framework == "megatron-core"
    assert (megatron.grad_reduce_overlap, megatron.param_gather_overlap) == (1.0, 1.0)
    assert megatron.tp_comm_overlap == 1.0 and megatron.zero3_gathers == "per-layer"
    ds = efficiency_for(h100, "deepspeed")  # ZeRO-3 fetches per submodule, prefetches 5e7 parameters
    assert ds.zero3_gathers == "per-matrix" and ds.zero3_prefetch_params == 5e7
    assert ds.host_layer_s == deepspeed.host_layer_s  # the DeepSpeed engine's host costs
    nemo = efficiency_for(h100, "nemo")  # Megatron-Core underneath, its Transformer Engine FP8 path too
    assert nemo.host_layer_s == megatron.host_layer_s and nemo.fp8_fused_input_casts == 1.0
    assert megatron.fp8_input_cast_bytes == 4  # delayed scaling: read 2 B, write 1 + 1 B


def test_fitted_network_profile_reaches_only_its_own_network() -> None:
    from mfukit.perf.step_time import machine_for

    h100 = catalog.accelerator("h100-sxm")
    efa = machine_for(catalog.system("p5-48xlarge"), h100, 64)
    ib = machine_for(catalog.system("dgx-h100"), h100, 64)
    profile = next(p for p in efficiency_file().network if p.name == "efa-v2")
    assert efa.topology.net_efficiency == profile.efficiency
    assert efa.topology.net_step_latency_s == profile.step_latency_s
    assert any("network profile efa-v2" in note for note in efa.assumptions)
    assert ib.topology.net_step_latency_s == 0.0 and ib.topology.net_efficiency > 0.9


def test_unknown_framework_is_bad_input_with_a_suggestion() -> None:
    with pytest.raises(InputError) as raised:
        efficiency_for(catalog.accelerator("h100-sxm"), "megatorn")
    assert "megatron" in raised.value.render()


def test_fit_subset_is_deterministic_and_capped_per_group() -> None:
    from mfukit.perf.calibrate import MAX_ROWS_PER_GROUP, fit_subset

    cases = load_cases(sources=("vtrain_single", "torchtitan"))
    chosen = fit_subset(cases)
    assert {(c.source, c.row_id) for c in chosen} == {
        (c.source, c.row_id) for c in fit_subset(list(reversed(cases)))
    }
    assert sum(c.source == "vtrain_single" for c in chosen) == MAX_ROWS_PER_GROUP
    titan = [c for c in cases if c.source == "torchtitan"]  # two groups (GPU types), each under the cap
    assert sum(c.source == "torchtitan" for c in chosen) == len(titan) < 2 * MAX_ROWS_PER_GROUP


def test_profiles_record_the_data_they_were_fitted_on() -> None:
    provenance = efficiency_file().provenance
    from mfukit.perf.calibration_data import calibration_dir

    folder = calibration_dir()
    assert sorted(provenance.files) == sorted(data_files(folder))
    assert all(len(digest) == 64 for digest in provenance.files.values())
    assert file_digests(folder) == provenance.files, "the data changed: run python -m mfukit.perf.calibrate"


def test_evaluator_predicts_measured_runs_on_catalog_systems() -> None:
    """Runs are grouped by their system, whose catalog entry may hold mappings (its NCCL environment)."""
    from mfukit.perf.evaluator import Evaluator

    cases = load_cases(sources=("torchtitan",))
    by_name = {case.accelerator.name: case.accelerator for case in cases}
    predicted = Evaluator(cases).predict(
        lambda accelerator, framework: efficiency_for(by_name[accelerator], framework)
    )
    measured = [case.measured_tokens_per_s_per_gpu for case in cases]
    assert len(predicted) == len(cases) >= 22
    assert all(0.5 < p / m < 2.0 for p, m in zip(predicted, measured, strict=True))


def test_only_the_borrowed_parts_are_warned_about() -> None:
    # h200 borrows hopper's GPU constants (nothing measured on it): the warning names only that
    efficiency = efficiency_for(catalog.accelerator("h200-sxm"), "megatron-core")
    assert not efficiency.calibrated
    assert efficiency.uncalibrated_notes and all("fitted on" not in n for n in efficiency.uncalibrated_notes)
    assert any(n.startswith("hardware hopper-variants: uncalibrated") for n in efficiency.uncalibrated_notes)
    assert efficiency_for(catalog.accelerator("h100-sxm"), "fsdp").uncalibrated_notes == ()
    # a stack that shares another's fitted constants (NeMo runs Megatron-Core) is not uncalibrated
    assert efficiency_for(catalog.accelerator("h100-sxm"), "nemo").uncalibrated_notes == ()


def test_recorded_highest_mfu_is_the_highest_measured_on_each_fitted_family() -> None:
    cases = load_cases()
    for profile in efficiency_file().hardware:
        if profile.borrows is None:
            assert profile.fit is not None
            mfu, run = highest_measured_mfu(cases, profile.accelerators)  # type: ignore[misc]
            assert (
                profile.fit.highest_mfu == pytest.approx(mfu, abs=1e-4) and profile.fit.highest_mfu_run == run
            )
    ampere = efficiency_for(catalog.accelerator("a100-80gb-sxm"))
    # BAAI FlagPerf's Megatron-Core Llama 3 8B on 8 A800s (3,698.7 tokens/s per GPU at sequence 8,192):
    # 68.7 % in mfukit's full-attention convention (FlagPerf's own 56.9 % counts 6N FLOPs per token)
    assert ampere.highest_measured_mfu == pytest.approx(0.6865, abs=1e-3)


def test_a_prediction_above_the_highest_measured_mfu_is_flagged() -> None:
    ampere = efficiency_for(catalog.accelerator("a100-80gb-sxm"))
    note = beyond_measured(ampere, 0.706, "bf16")
    assert note is not None and "beyond what was measured on this GPU: highest measured 68.7 %" in note
    assert "baai_flagperf" in note
    assert beyond_measured(ampere, 0.55, "bf16") is None and beyond_measured(ampere, 0.706, "fp8") is None
    h200 = efficiency_for(catalog.accelerator("h200-sxm"))  # borrowed: nothing measured on it, no bound
    assert beyond_measured(h200, 0.9, "bf16") is None


def test_a_leave_one_source_out_fold_starts_from_nothing_fitted() -> None:
    from mfukit.perf.calibrate import NEUTRAL, neutral_prior

    prior = neutral_prior(efficiency_file())
    for profile in [*prior.hardware, *prior.framework]:
        if profile.borrows is None:
            assert profile.fit is None
            for name, value in NEUTRAL.items():
                if name in type(profile).model_fields:
                    assert getattr(profile, name) == value, (profile.name, name)
    assert all(n.efficiency is None and n.step_latency_s is None for n in prior.network)
    # the facts read from the stacks' code are kept
    shipped = {p.name: p for p in efficiency_file().framework}
    assert all(p.grad_bucket_params == shipped[p.name].grad_bucket_params for p in prior.framework)


def _curve_rate(part: Accelerator, constants: Efficiency, dtype: Dtype, gemm: AchievedGemm) -> float:
    """FLOP/s of the measured shape of ``gemm`` on the model's GEMM curve of ``part`` under ``constants``."""
    seconds = model_gemm_curve(part, constants, dtype).one_gemm_s(gemm.m, gemm.n, gemm.k, dtype)
    return float(2 * gemm.m * gemm.n * gemm.k / seconds)


@pytest.mark.parametrize("name", ["mi300x", "mi325x", "a100-80gb-pcie"])
def test_a_borrowed_part_sits_as_far_below_its_best_gemm_as_its_lender(name: str) -> None:
    """A part no training run calibrates runs its lender's GEMM curve at the peak fractions that put its own
    measured best GEMM as far below that measurement as the lender's fitted curve puts the lender's: the
    fitted curves are whole training steps', so a kernel measurement is a ratio between parts, never the rate
    training GEMMs reach (at their own measured rate MI300X runs were predicted 25-40 % too fast)."""
    accelerator = catalog.accelerator(name)
    profile = next(p for p in efficiency_file().hardware if name in p.accelerators)
    lender_profile = next(p for p in efficiency_file().hardware if p.name == profile.borrows)
    lender = measured_part(lender_profile)
    assert lender is not None and lender.max_achievable_gemm is not None
    measured, lender_best = accelerator.max_achievable_gemm, lender.max_achievable_gemm.bf16
    assert measured is not None and measured.bf16 is not None and lender_best is not None
    lending = efficiency_for(lender, "torchtitan")
    efficiency = efficiency_for(accelerator, "torchtitan")
    assert "measured best GEMM" in " ".join(efficiency.uncalibrated_notes)

    def share(part: Accelerator, constants: Efficiency, dtype: Dtype, gemm: AchievedGemm) -> float:
        return _curve_rate(part, constants, dtype, gemm) / gemm.flops_per_s

    expected = share(lender, lending, "bf16", lender_best)
    assert 0.3 < expected < 1
    assert share(accelerator, efficiency, "bf16", measured.bf16) == pytest.approx(expected, rel=1e-6)
    if measured.fp8 is not None:
        assert share(accelerator, efficiency, "fp8", measured.fp8) == pytest.approx(expected, rel=1e-6)
    # the part holds a lower clock under matrix load: attention slows by the 16-bit GEMMs' factor
    assert efficiency.attention_peak_fraction / lending.attention_peak_fraction == pytest.approx(
        efficiency.gemm_peak_fraction / lending.gemm_peak_fraction
    )


def test_a_part_measured_as_fast_as_its_lender_runs_at_the_lenders_fractions() -> None:
    """H200's best GEMM is H100's (the same GH100 SMs and clocks): it borrows Hopper's fractions unchanged."""
    h100, h200 = catalog.accelerator("h100-sxm"), catalog.accelerator("h200-sxm")
    assert h200.max_achievable_gemm is not None and h100.max_achievable_gemm is not None
    assert h200.max_achievable_gemm.bf16 == h100.max_achievable_gemm.bf16
    ours, lenders = efficiency_for(h200), efficiency_for(h100)
    assert ours.gemm_peak_fraction == pytest.approx(lenders.gemm_peak_fraction, rel=1e-6)
    assert ours.attention_peak_fraction == pytest.approx(lenders.attention_peak_fraction, rel=1e-6)


def test_a_stack_cost_its_one_node_runs_cannot_pin_is_fitted_on_its_multi_node_runs() -> None:
    """FlagPerf's one-node Megatron-DeepSpeed runs (no pipeline) cannot pin the stack's p2p cost; BigScience's
    pipelined runs across nodes can, so the fit takes it from them instead of the default stack's."""
    from mfukit.perf.calibrate import _drop_unidentified, fit, neutral_prior

    cases = load_cases()
    one_node = [
        c for c in cases if c.source == "baai_flagperf" and c.workload.framework == "megatron-deepspeed"
    ]
    across = [c for c in cases if c.source == "bigscience_tr11_prequel"]
    assert one_node and all(c.num_gpus <= c.system.gpus_per_node and c.layout.pp == 1 for c in one_node)
    assert all(c.workload.framework == "megatron-deepspeed" and c.layout.pp > 1 for c in across)
    assert all(c.num_gpus > c.system.gpus_per_node for c in across)
    start = neutral_prior(efficiency_file())
    _, unidentified = _drop_unidentified(start, one_node)
    assert "p2p_overhead_s" in unidentified["megatron-deepspeed"]
    fitted, _ = fit([*one_node, *across], start, iterations=4)
    stacks = {p.name: p for p in fitted.framework}
    p2p_s = stacks["megatron-deepspeed"].p2p_overhead_s
    assert p2p_s is not None and p2p_s != stacks["megatron-core"].p2p_overhead_s


def test_a_borrowed_part_without_a_lender_measurement_keeps_the_borrowed_fractions() -> None:
    """Nothing to compare the part's measurement with: its fractions are the lender's, said in the notes."""
    file = efficiency_file()
    hopper = next(p for p in file.hardware if p.name == "hopper")
    # the Hopper family without its measured part: a family of only the 500 W H100, which has no measurement
    unmeasured = file.model_copy(
        update={
            "hardware": [
                p.model_copy(update={"accelerators": ["h100-sxm-96gb-500w"]}) if p.name == "hopper" else p
                for p in file.hardware
            ]
        }
    )
    mi300x = catalog.accelerator("mi300x")
    efficiency = efficiency_for(mi300x, file=unmeasured)
    assert efficiency.gemm_peak_fraction == hopper.gemm_peak_fraction
    assert "no measured best GEMM in the lending family" in " ".join(efficiency.notes)


@pytest.mark.parametrize("measured_share_of_peak", [None, 1.0], ids=["as-measured", "at-the-full-peak"])
def test_a_borrowed_part_meets_its_target_or_runs_at_the_full_peak_below_it(
    measured_share_of_peak: float | None,
) -> None:
    """B200's target is its measured best GEMM times the share of H100's that Hopper's curve reaches. The
    curve meets it exactly; where even the full peak cannot (here a B200 said to reach its whole peak at its
    best shape, under a Hopper curve that reaches all of H100's measured best) the fraction is 1, the note
    says so, and the curve stays below the target (the slow side)."""
    b200, h100 = catalog.accelerator("b200"), catalog.accelerator("h100-sxm")
    file = efficiency_file()
    if measured_share_of_peak is not None:
        file = file.model_copy(
            update={
                "hardware": [
                    p.model_copy(update={"gemm_peak_fraction": 0.99}) if p.name == "hopper" else p
                    for p in file.hardware
                ]
            }
        )
    assert b200.max_achievable_gemm is not None and b200.max_achievable_gemm.bf16 is not None
    if measured_share_of_peak is not None:
        best = b200.max_achievable_gemm.bf16.model_copy(
            update={"flops_per_s": measured_share_of_peak * b200.peak_flops("bf16")}
        )
        b200 = b200.model_copy(
            update={"max_achievable_gemm": b200.max_achievable_gemm.model_copy(update={"bf16": best})}
        )
    measured, lender_measured = b200.max_achievable_gemm, h100.max_achievable_gemm
    assert measured is not None and measured.bf16 is not None
    assert lender_measured is not None and lender_measured.bf16 is not None

    share = (
        _curve_rate(h100, efficiency_for(h100, file=file), "bf16", lender_measured.bf16)
        / lender_measured.bf16.flops_per_s
    )
    efficiency = efficiency_for(b200, file=file)
    target = share * measured.bf16.flops_per_s
    reached = _curve_rate(b200, efficiency, "bf16", measured.bf16)
    capped = "beyond the curve at the full peak" in " ".join(efficiency.notes)
    assert capped == (measured_share_of_peak is not None)
    if capped:
        assert efficiency.gemm_peak_fraction == 1.0 and reached < target
    else:
        assert efficiency.gemm_peak_fraction < 1.0
        assert reached == pytest.approx(target, rel=1e-6)
