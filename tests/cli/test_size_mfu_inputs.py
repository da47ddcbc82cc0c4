"""`size`, `mfu` and `estimate`: realistic questions get answers, flags override the file, impossible inputs
are bad input that says where they came from."""

from __future__ import annotations

from pathlib import Path

from mfukit import catalog
from mfukit.comm.topology import scale_out_switch
from mfukit.core.hardware import System

EXAMPLE = str(Path(__file__).parents[2] / "examples" / "llama-65b_a100_14d.toml")
LLAMA_A100 = ["--model", "llama-65b", "--gpu", "a100-80gb-sxm"]


def test_a_cluster_past_three_tiers_of_the_default_switch_is_sized_with_a_network_warning(mfukit) -> None:  # type: ignore[no-untyped-def]
    # (with the example's 4M-token batch no count meets 3 days: the batch caps data parallelism)
    run = mfukit("size", EXAMPLE, "--deadline", "2.5d", "--global-batch-tokens", "16M", "--format", "json")
    assert run.exit_code == 0, run.stderr
    envelope = run.json()
    result = envelope["result"]
    assert result["gpus"] > 16_000 and result["meets_deadline"] is True
    network = [w for w in envelope["warnings"] if w.startswith("network:")]
    assert len(network) == 1 and "more than a 3-tier" in network[0] and "fabric modelled with" in network[0]


def test_the_default_switch_is_kept_while_three_tiers_of_it_suffice() -> None:
    system = catalog.system("dgx-a100-80gb")
    assert isinstance(system, System)
    switch, note = scale_out_switch(system, 16_000, rail_groups=8)
    assert switch is not None and switch.name == "qm8790" and note is None
    switch, note = scale_out_switch(system, 16_008, rail_groups=8)
    assert switch is not None and switch.name == "qm9700" and note is not None and "16,000" in note


def test_failure_model_flag_replaces_the_files_flat_goodput(mfukit) -> None:  # type: ignore[no-untyped-def]
    flat = mfukit("size", EXAMPLE, "--format", "json").json()["result"]
    assert flat["goodput"] == 0.9 and "ft.goodput in" in flat["goodput_source"]
    run = mfukit("size", EXAMPLE, "--failure-model", "llama3", "--format", "json")
    assert run.exit_code == 0, run.stderr
    result = run.json()["result"]
    assert "expected ETTR" in result["goodput_source"] and "flat" not in result["goodput_source"]
    assert 0.9 < result["goodput"] < 1.0


def test_goodput_and_failure_model_flags_together_are_a_contradiction(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("size", EXAMPLE, "--failure-model", "llama3", "--goodput", "0.8")
    assert run.exit_code == 2 and "command line: --goodput" in run.stderr


def test_a_bad_flag_value_is_blamed_on_the_command_line_not_the_file(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("size", EXAMPLE, "--failure-model", "llama4")
    assert run.exit_code == 2
    assert run.stderr.startswith("error: command line: --failure-model") and "llama3" in run.stderr
    assert "examples/" not in run.stderr
    tp = mfukit("size", EXAMPLE, "--tp", "3")
    assert tp.exit_code == 2 and "command line: --tp (parallelism.tp)" in tp.stderr
    assert "use tp = 1, 2, 4, 8 (within the 8-GPU" in tp.stderr


def test_estimate_with_a_tp_that_does_not_divide_the_heads_is_bad_input(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("estimate", *LLAMA_A100, "--gpus", "64", "--tp", "3", "--global-batch-tokens", "4M")
    assert run.exit_code == 2
    assert "command line: --tp (parallelism.tp): 3:" in run.stderr
    assert "use tp = 1, 2, 4, 8 (within the 8-GPU scale-up domain)" in run.stderr
    assert "set dp = 21" not in run.stderr and "tp <= 64" not in run.stderr
    assert "tp x pp x cp = 3 does not divide 64 GPUs" in run.stderr


def test_estimate_world_size_fix_names_a_dp_that_differs(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit(
        "estimate", *LLAMA_A100, "--gpus", "64", "--tp", "8", "--dp", "4", "--global-batch-size", "2048"
    )
    assert run.exit_code == 2 and "set dp = 8" in run.stderr


def test_an_mfu_above_100_percent_is_bad_input(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("mfu", *LLAMA_A100, "--tokens-per-s-per-gpu", "3800")
    assert run.exit_code == 2
    assert "command line: --tokens-per-s-per-gpu: '3800'" in run.stderr and "494.8 %" in run.stderr
    assert "--tokens-per-s with --gpus" in run.stderr and "--gpu" in run.stderr
    total = mfukit("mfu", *LLAMA_A100, "--tokens-per-s", "778k", "--gpus", "200")
    assert total.exit_code == 2 and "check --gpus (200 given)" in total.stderr


def test_an_mfu_above_the_gemm_ceiling_warns(mfukit) -> None:  # type: ignore[no-untyped-def]
    from mfukit import catalog
    from mfukit.perf.efficiency import efficiency_for, large_gemm_fraction

    normal = mfukit("mfu", *LLAMA_A100, "--tokens-per-s-per-gpu", "380", "--format", "json")
    assert normal.json()["warnings"] == []
    # MFU is proportional to the rate: 5 % above what a large GEMM reaches on the model's curve warns, 5 % below
    # does not
    a100 = catalog.accelerator("a100-80gb-sxm")
    ceiling = large_gemm_fraction(a100, efficiency_for(a100), "bf16")
    for factor, warned in ((1.05, True), (0.95, False)):
        rate = 380 * factor * ceiling / normal.json()["result"]["mfu"]
        run = mfukit("mfu", *LLAMA_A100, "--tokens-per-s-per-gpu", f"{rate:.0f}", "--format", "json")
        assert run.exit_code == 0
        assert any("GEMM curve" in w for w in run.json()["warnings"]) is warned


def test_mfu_lists_the_default_sequence_length(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("mfu", *LLAMA_A100, "--tokens-per-s-per-gpu", "380")
    assert "sequence length 2048 tokens (the default" in run.stdout


def test_gpus_the_deadline_needs_is_a_whole_count(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("size", EXAMPLE, "--mfu", "0.45", "--format", "csv")
    row = next(line for line in run.stdout.splitlines() if line.startswith("GPUs the deadline needs"))
    table = mfukit("size", EXAMPLE, "--mfu", "0.45").stdout
    shown = next(line for line in table.splitlines() if "GPUs the deadline needs" in line).split()[-1]
    assert "." not in shown and int(shown.replace(",", "")) >= float(row.split(",")[1])


def test_size_at_a_given_mfu_keeps_the_attention_kernel_and_dropout_it_is_told(mfukit) -> None:  # type: ignore[no-untyped-def]
    args = ("size", EXAMPLE, "--mfu", "0.45", "--gpus", "2048", "--recompute", "none")
    plain, eager = (
        mfukit(*args, *extra, "--format", "json").json()
        for extra in ((), ("--attention", "eager", "--attention-dropout", "0.1", "--hidden-dropout", "0.1"))
    )
    memory = " ".join(a for a in eager["assumptions"] if a.startswith("memory:"))
    assert "eager attention (s^2 scores stored), attention and hidden dropout masks" in memory
    assert "flash attention, no dropout masks" in " ".join(plain["assumptions"])
    assert eager["result"]["memory_per_gpu_bytes"] > plain["result"]["memory_per_gpu_bytes"]
