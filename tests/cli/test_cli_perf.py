"""`mfukit estimate` and `mfukit plan` through the real entry point."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

EXAMPLE = str(Path(__file__).parents[2] / "examples" / "llama3-70b_h100x1024.toml")
GPT3 = ["--model", "gpt3-175b", "--gpu", "a100-80gb-sxm", "--gpus", "1024", "--global-batch-size", "1536"]
# torchtitan's 2024 A100 runs: FSDP over 64 A100s, 4,096-token sequences, micro-batches of 2
FSDP_ON_64_A100 = ("--gpu", "a100-80gb-sxm", "--gpus", "64", "--seq-len", "4096", "--global-batch-size", "128",
                   "--micro-batch-size", "2", "--fsdp", "full")  # fmt: skip
ESTIMATE_KEYS = {
    "step_time_s",
    "mfu",
    "hfu",
    "model_tflops_per_gpu",
    "tokens_per_s",
    "memory_per_gpu_bytes",
    "fits",
    "breakdown_s",
    "memory_breakdown_bytes",
    "attention_flops_convention",
}
GPT3_ON_8 = ["--model", "gpt3-175b", "--gpu", "a100-80gb-sxm", "--gpus", "8", "--global-batch-size", "8"]
SMALL_PLAN = ["--model", "llama2-7b", "--gpu", "h100-sxm", "--gpus", "64", "--global-batch-size", "256"]


def test_estimate_json_has_the_issue_keys(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit(
        "estimate",
        *GPT3,
        "--tp",
        "8",
        "--pp",
        "8",
        "--sequence-parallel",
        "--recompute",
        "selective",
        "--zero",
        "1",
        "--format",
        "json",
    )
    assert run.exit_code == 0, run.stderr
    envelope = run.json()
    assert envelope["schema"] == "estimate/1"
    result = envelope["result"]
    assert set(result) >= ESTIMATE_KEYS
    assert sum(result["breakdown_s"].values()) == pytest.approx(result["step_time_s"], rel=1e-9)
    assert 0 < result["mfu"] <= result["hfu"] < 1
    assert result["layout"]["dp"] == 16  # filled in from 1,024 GPUs / (8 x 8)
    assert result["fits"] is True and result["attention_flops_convention"] == "full"
    assert result["memory_breakdown_bytes"]["weights"] > 0


def test_estimate_table_fits_the_console(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("estimate", *GPT3, "--tp", "8", "--pp", "8", "--zero", "1")
    assert run.exit_code == 0, run.stderr
    table = run.stdout.split("Assumptions:")[0]
    assert "step-time breakdown" in table and "pipeline bubble" in table
    assert max(len(line) for line in table.splitlines()) <= 100


def test_estimate_says_which_attention_kernel_the_step_runs(mfukit) -> None:  # type: ignore[no-untyped-def]
    layout = ["--tp", "8", "--pp", "8", "--zero", "1", "--format", "json"]
    flash, eager = (
        mfukit("estimate", *GPT3, *layout, "--attention", kernel) for kernel in ("flash", "eager")
    )
    notes = [" ".join(run.json()["assumptions"]) for run in (flash, eager)]
    assert "runs flash attention's causal half" in notes[0] and "eager" not in notes[0]
    assert "runs eager attention: the full s^2 scores" in notes[1] and "causal half" not in notes[1]
    assert eager.json()["result"]["step_time_s"] > flash.json()["result"]["step_time_s"]


def test_gpt3_style_dropout_keeps_masks_and_slows_eager_attention(mfukit) -> None:  # type: ignore[no-untyped-def]
    layout = ["--tp", "8", "--pp", "8", "--zero", "1", "--recompute", "none", "--attention", "eager", "--format", "json"]  # fmt: skip
    dropout = ["--attention-dropout", "0.1", "--hidden-dropout", "10%"]
    plain, dropped = (mfukit("estimate", *GPT3, *layout, *extra).json() for extra in ([], dropout))
    assert dropped["result"]["memory_per_gpu_bytes"] > plain["result"]["memory_per_gpu_bytes"]
    assert dropped["result"]["step_time_s"] > plain["result"]["step_time_s"]
    assert "attention and hidden dropout masks" in " ".join(dropped["assumptions"])
    assert "no dropout masks" in " ".join(plain["assumptions"])
    refused = mfukit("estimate", *GPT3, *layout, "--attention-dropout", "1")
    assert refused.exit_code == 2 and "training.attention_dropout" in refused.stderr


def test_estimate_says_exactly_why_a_layout_cannot_be_built(mfukit) -> None:  # type: ignore[no-untyped-def]
    # an interleaved pipeline whose chunks cannot hold equal layers, by no split Megatron makes itself
    run = mfukit("estimate", *GPT3, "--tp", "8", "--pp", "7", "--vpp", "5", "--format", "json")
    assert run.exit_code == 2  # the user chose the layout: bad input, not a negative answer
    assert "command line: --pp (parallelism.pp): 7:" in run.stderr
    assert "does not divide num_hidden_layers=96" in run.stderr and "1024 GPUs" in run.stderr
    assert "choose pp x vpp among 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 96" in run.stderr


def test_estimate_splits_layers_that_do_not_divide_as_megatron_does(mfukit) -> None:  # type: ignore[no-untyped-def]
    # 96 layers on 7 stages: (96 + 2) / 7 = 14, one fewer on the first and the last (embedding and loss)
    run = mfukit("estimate", *GPT3, "--tp", "8", "--pp", "7", "--gpus", "896", "--format", "json")
    assert run.exit_code in (0, 1), run.stderr
    layout = run.json()["result"]["layout"]
    assert (layout["first_stage_layers"], layout["last_stage_layers"]) == (13, 13)


def test_estimate_exits_1_when_the_layout_does_not_fit(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit(
        "estimate",
        *GPT3_ON_8,
        "--tp",
        "8",
        "--pp",
        "1",
    )
    assert run.exit_code == 1
    assert "fits in HBM" in run.stdout and "NO" in run.stdout and "--zero" in run.stdout


def test_estimate_without_a_layout_or_with_a_bad_framework_is_bad_input(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("estimate", *GPT3)
    assert run.exit_code == 2 and "needs a parallel layout" in run.stderr and "mfukit plan" in run.stderr
    run = mfukit("estimate", *GPT3, "--tp", "8", "--pp", "8", "--framework", "megatronn")
    assert run.exit_code == 2 and "megatron" in run.stderr
    run = mfukit("estimate", "--model", "gpt3-175b", "--gpu", "a100-80gb-sxm", "--gpus", "64", "--tp", "8")
    assert run.exit_code == 2 and "global batch" in run.stderr


def test_plan_json_ranks_layouts_and_counts_rejections(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("plan", *SMALL_PLAN, "--top", "3", "--format", "json")
    assert run.exit_code == 0, run.stderr
    result = run.json()["result"]
    assert set(result) >= {"plans", "configs_evaluated", "rejected", "search_s"}
    plans = result["plans"]
    # ranked conservatively: on the lower bound of each plan's 80 % interval, not on its estimate
    lows = [p["mfu_interval"]["low"] for p in plans]
    assert len(plans) == 3 and lows == sorted(lows, reverse=True)
    assert all(set(plan) >= ESTIMATE_KEYS and plan["fits"] for plan in plans)
    assert set(result["rejected"]) == {
        "divisibility",
        "batch",
        "schedule",
        "compatibility",
        "memory",
        "headroom",
    }
    assert result["configs_evaluated"] > 100 and result["search_s"] > 0


def test_plan_csv_options_name_the_recompute_mode_and_sharding(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("plan", *SMALL_PLAN, "--top", "3", "--format", "csv")
    assert run.exit_code == 0, run.stderr
    first_table = run.stdout.split("\n\n")[0].splitlines()
    header, *rows = list(csv.reader(first_table))
    options = [row[header.index("options")] for row in rows]
    assert options and all(option.startswith("recompute ") for option in options), options
    assert all(option.split(",")[0].split()[1] in {"none", "selective", "full"} for option in options)


def test_plan_with_a_deadline_finds_the_cluster(mfukit) -> None:  # type: ignore[no-untyped-def]
    args = ["--model", "llama2-7b", "--gpu", "h100-sxm", "--global-batch-size", "512", "--tokens", "200G"]
    run = mfukit("plan", *args, "--deadline", "2d", "--tp", "1", "--pp", "1", "--format", "json")
    assert run.exit_code == 0, run.stderr
    result = run.json()["result"]
    assert result["plans"][0]["time_to_train_s"] <= 2 * 86400 and result["meets_deadline"] is True
    assert result["num_gpus"] % 8 == 0


def test_plan_reports_when_nothing_fits(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit(
        "plan",
        *GPT3_ON_8,
        "--format",
        "json",
    )
    assert run.exit_code == 1
    result = run.json()["result"]
    assert result["plans"] == [] and result["rejected"]["memory"] > 0


def test_plan_report_has_every_section(mfukit, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    args = [*SMALL_PLAN, "--tokens", "2T", "--tp", "2", "--storage", "lustre-generic"]
    run = mfukit("plan", *args, "--report", str(tmp_path))
    assert run.exit_code == 0, run.stderr
    html = (tmp_path / "report.html").read_text()
    for title in (
        "Top layouts",
        "Step-time breakdown",
        "Memory per GPU",
        "Scaling with GPU count",
        "Network check",
        "Fault tolerance",
    ):
        assert f"<h2>{title}</h2>" in html
    assert {path.name for path in tmp_path.glob("*.png")} >= {
        "step_breakdown.png",
        "memory.png",
        "scaling.png",
    }
    assert "data:image/png;base64," in html


def test_example_plan_is_the_main_job(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("plan", EXAMPLE, "--top", "3", "--format", "json")
    assert run.exit_code == 0, run.stderr
    best = run.json()["result"]["plans"][0]
    assert best["num_gpus"] == 1024 and best["fits"]
    assert 0.3 < best["mfu"] < 0.7


LLAMA_EXAMPLE = str(Path(__file__).parents[2] / "examples" / "llama-65b_a100_14d.toml")


def test_size_rounds_a_batch_in_tokens_for_the_llama_paper_cluster(mfukit) -> None:  # type: ignore[no-untyped-def]
    # "4M" tokens / 2,048 = 1,953 sequences, which no DP of 2,048 GPUs divides; the paper ran 2^22 tokens
    run = mfukit("size", LLAMA_EXAMPLE, "--gpus", "2048", "--format", "json")
    envelope = run.json()
    assert envelope["result"]["gpus"] == 2048 and envelope["result"]["feasible"] is True, run.stdout
    assert any("global batch 1,953 -> 2,048 sequences (+4.9 %)" in line for line in envelope["warnings"])
    assert "performance model" in envelope["result"]["mfu_source"]


def test_size_with_an_exact_batch_nothing_divides_says_why(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("size", LLAMA_EXAMPLE, "--gpus", "2048", "--global-batch-size", "1953", "--format", "json")
    assert run.exit_code == 1
    text = " ".join(run.json()["warnings"])
    assert "layouts considered were rejected" in text and "--global-batch-size" in text
    assert "no layout of 0" not in text


def test_estimate_recomputes_the_layers_it_is_told_and_refuses_a_count_without_full_recompute(mfukit) -> None:  # type: ignore[no-untyped-def]
    layout = ("--tp", "8", "--pp", "8", "--sequence-parallel", "--zero", "1", "--format", "json")
    full, partial = (
        mfukit("estimate", *GPT3, *layout, "--recompute", "full", *extra).json()["result"]
        for extra in ((), ("--recompute-layers", "3"))
    )
    assert partial["layout"]["recompute_layers"] == 3 and full["layout"]["recompute_layers"] is None
    assert partial["step_time_s"] < full["step_time_s"]
    assert partial["hfu"] / partial["mfu"] < full["hfu"] / full["mfu"]  # fewer FLOPs run again
    run = mfukit("estimate", *GPT3, *layout, "--recompute-layers", "3")
    assert run.exit_code == 2 and "set recompute = full" in run.stderr


def test_a_fused_norm_keeps_less_and_moves_less_than_torchtitans_composite_one(mfukit) -> None:  # type: ignore[no-untyped-def]
    layout = ("--model", "llama2-13b", *FSDP_ON_64_A100, "--framework", "torchtitan", "--recompute", "none")
    layout = (*layout, "--format", "json")
    composite, fused = (
        mfukit("estimate", *layout, *norm).json()["result"] for norm in ((), ("--norm", "fused"))
    )
    # the norm's input kept, not also its output: 2 of 4 bytes per element of its two norms a layer
    assert fused["memory_per_gpu_bytes"] < composite["memory_per_gpu_bytes"]
    assert fused["breakdown_s"]["memory_bound"] < composite["breakdown_s"]["memory_bound"]


def test_an_unset_recompute_is_read_as_the_fewest_layers_that_fit(mfukit) -> None:  # type: ignore[no-untyped-def]
    # Llama 2 70B under FSDP on 64 A100s at micro-batches of 2 (torchtitan's 2024 run): storing every layer
    # does not fit, recomputing all 80 wastes forwards; a tuned run recomputes as many as fitting takes
    run = ("--model", "llama2-70b", *FSDP_ON_64_A100, "--framework", "fsdp")
    tuned = mfukit("estimate", *run, "--format", "json").json()["result"]
    every = mfukit("estimate", *run, "--recompute", "full", "--format", "json").json()["result"]
    assert tuned["layout"]["recompute"] == "full" and 0 < tuned["layout"]["recompute_layers"] < 80
    assert every["layout"]["recompute_layers"] is None and tuned["step_time_s"] < every["step_time_s"]
    assert tuned["fits"]


def test_an_eager_norm_on_a_fused_stack_keeps_and_moves_more(mfukit) -> None:  # type: ignore[no-untyped-def]
    layout = ("--tp", "8", "--pp", "8", "--sequence-parallel", "--zero", "1", "--format", "json")
    fused, eager = (
        mfukit("estimate", *GPT3, *layout, *norm).json()["result"] for norm in ((), ("--norm", "eager"))
    )
    assert eager["memory_per_gpu_bytes"] > fused["memory_per_gpu_bytes"]
    assert eager["breakdown_s"]["memory_bound"] > fused["breakdown_s"]["memory_bound"]


def test_mfu_counts_the_recomputed_layers_it_is_told_in_hfu(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = ("mfu", "--model", "llama2-70b", "--gpu", "a100-80gb-sxm", "--seq-len", "4096")
    given = ("--tokens-per-s-per-gpu", "353", "--recompute", "full", "--format", "json")
    full, half = (
        mfukit(*run, *given, *extra).json()["result"] for extra in ((), ("--recompute-layers", "40"))
    )
    assert half["mfu"] == full["mfu"]
    assert half["hfu"] - half["mfu"] == pytest.approx((full["hfu"] - full["mfu"]) / 2, rel=1e-9)


def test_estimate_rejects_an_interleaved_pipeline_with_too_few_micro_batches(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit(
        "estimate", "--model", "llama3.1-405b", "--gpu", "h100-sxm", "--gpus", "16384", "--seq-len", "8192",
        "--tp", "8", "--pp", "2", "--vpp", "7", "--global-batch-size", "1024",
    )  # fmt: skip
    assert run.exit_code == 2
    assert "parallelism.vpp" in run.stderr and "multiple of pp" in run.stderr and "2,048" in run.stderr


def test_estimate_refuses_virtual_stages_on_a_stack_without_an_interleaved_schedule(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit(
        "estimate", "--model", "llama3.1-70b", "--gpu", "h100-sxm", "--gpus", "64", "--seq-len", "4096",
        "--tp", "8", "--pp", "4", "--vpp", "2", "--global-batch-size", "256", "--framework", "nanotron",
    )  # fmt: skip
    assert run.exit_code == 2
    assert "parallelism.vpp" in run.stderr and "nanotron" in run.stderr and "megatron-core" in run.stderr
    assert "Traceback" not in run.stderr


def test_plan_ranks_on_the_lower_bound_and_marks_what_no_run_measured(mfukit) -> None:  # type: ignore[no-untyped-def]
    # LLaMA-65B on 2,048 A100s (the paper measured 49.6 % MFU): Megatron-Core searches what it implements
    # (no DeepSpeed ZeRO-3), ranks on the lower bound of each layout's 80 % interval, and marks a top plan
    # above every measured run of its GPU family and stack
    run = mfukit(
        "plan", "--model", "llama-65b", "--gpus", "2048", "--gpu", "a100-80gb-sxm", "--global-batch-size", "2048",
        "--top", "5", "--format", "json",
    )  # fmt: skip
    plans = run.json()["result"]["plans"]
    assert all(plan["layout"]["zero"] in (0, 1) for plan in plans)
    lower = [plan["mfu_interval"]["low"] for plan in plans]
    assert lower == sorted(lower, reverse=True)
    for plan in plans:
        interval = plan["mfu_interval"]
        assert interval["low"] <= plan["mfu"] <= interval["high"]
        highest = interval["highest_measured_mfu"]
        assert interval["beyond_measured"] == (
            interval["extrapolated"] or highest is None or plan["mfu"] > highest
        )


def test_size_at_a_given_mfu_also_rounds_a_batch_in_tokens(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("size", LLAMA_EXAMPLE, "--gpus", "2048", "--mfu", "0.5", "--format", "json")
    envelope = run.json()
    result = envelope["result"]
    assert result["feasible"] is True and result["gpus"] == 2048
    sequences = result["layout"]["dp"] * result["num_microbatches"]  # micro-batch 1
    assert sequences == 2048  # the nearest whole number of micro-batches per rank to 1,953
    assert any("global batch 1,953 -> 2,048 sequences (+4.9 %)" in line for line in envelope["warnings"])


def test_estimate_takes_the_micro_batch_a_tuned_run_uses_and_says_so(mfukit) -> None:  # type: ignore[no-untyped-def]
    zero3 = [*GPT3, "--tp", "8", "--zero", "3", "--recompute", "full", "--format", "json"]
    assumed = mfukit("estimate", *zero3)
    given = mfukit("estimate", *zero3, "--micro-batch-size", "1")
    assert assumed.exit_code == 0 and given.exit_code == 0, assumed.stderr + given.stderr
    size = assumed.json()["inputs"]["micro_batch_size"]
    assert size > 1 and given.json()["inputs"]["micro_batch_size"] == 1
    assert any(f"micro-batch not given: {size}" in line for line in assumed.json()["assumptions"])
    assert not any("micro-batch not given" in line for line in given.json()["assumptions"])
    # one gather of the weights per micro-batch: fewer, larger micro-batches are faster
    assert assumed.json()["result"]["step_time_s"] < given.json()["result"]["step_time_s"]


def test_estimate_names_the_scale_up_link_the_part_has(mfukit) -> None:  # type: ignore[no-untyped-def]
    # an MI300X node's ranks talk over Infinity Fabric, not NVLink; an uncalibrated part says where its GEMM
    # fractions come from
    llama_8b_on_mi300x = ["--model", "llama3.1-8b", "--gpu", "mi300x", "--gpus", "8", "--global-batch-size", "64"]  # fmt: skip
    fsdp = ["--framework", "torchtitan", "--tp", "1", "--pp", "1", "--fsdp", "full"]
    run = mfukit("estimate", *llama_8b_on_mi300x, *fsdp)
    assert run.exit_code == 0, run.stderr
    text = " ".join(run.stdout.split())
    assert "xGMI (inside the scale-up domain)" in text and "NVLink" not in text
    assert "max-achievable GEMM" in text
