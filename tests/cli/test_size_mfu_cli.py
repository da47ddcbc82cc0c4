"""`mfukit size` and `mfukit mfu` through the real entry point."""

from __future__ import annotations

from pathlib import Path

EXAMPLE = str(Path(__file__).parents[2] / "examples" / "llama-65b_a100_14d.toml")
SIZE_KEYS = {
    "total_train_flops",
    "gpus",
    "nodes",
    "mfu",
    "mfu_source",
    "days",
    "gpu_hours",
    "layout",
    "memory_per_gpu_bytes",
    "fits",
    "inter_node_bytes_per_s_required",
    "recommended_nics_per_node",
    "energy_kwh",
}


def test_size_example_table_fits_the_console(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("size", EXAMPLE)
    assert run.exit_code == 0, run.stderr
    assert "GPUs the deadline needs" in run.stdout and "memory per GPU" in run.stdout
    assert max(len(line) for line in run.stdout.splitlines()) <= 100


def test_size_json_keys_and_layout_rules(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("size", EXAMPLE, "--format", "json")
    envelope = run.json()
    assert envelope["schema"] == "size/1"
    result = envelope["result"]
    assert set(result) >= SIZE_KEYS
    assert set(result["layout"]) >= {"tp", "pp", "dp", "cp", "ep"}
    layout = result["layout"]
    # "4M" tokens are 1,953 sequences; the layout runs the nearest whole number of micro-batches per DP rank
    # the example leaves the micro-batch to the planner; the inputs echo the size it chose
    sequences = layout["dp"] * result["num_microbatches"] * envelope["inputs"]["micro_batch_size"]
    assert abs(sequences - 1953) <= 0.1 * 1953
    assert layout["tp"] <= 8 and result["gpus"] % 8 == 0 and result["gpus"] >= result["gpus_min"]
    assert result["days"] <= 14 and result["fits"] is True
    # no --mfu: the planner's predicted MFU at the count it chose (LLaMA reached 49.6 % on A100-80GB)
    assert result["mfu_source"].startswith("performance model") and 0.35 < result["mfu"] < 0.65
    assert "flat goodput allowance 0.9" in result["goodput_source"]


def test_size_cost_and_mfu_override(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("size", EXAMPLE, "--mfu", "40%", "--usd-per-gpu-hour", "2", "--format", "json")
    result = run.json()["result"]
    assert result["mfu"] == 0.4 and result["mfu_source"] == "--mfu (given)"
    assert result["cost_usd"] == result["gpu_hours"] * 2


def test_size_csv_is_si(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("size", EXAMPLE, "--format", "csv")
    lines = run.stdout.splitlines()
    assert lines[0] == "quantity,value"
    flops = next(line for line in lines if line.startswith("total training FLOPs [FLOP],"))
    assert float(flops.split(",")[1]) > 5e23
    memory = next(line for line in lines if line.startswith("memory per GPU (peak) [bytes],"))
    assert float(memory.split(",")[1]) > 2**30


def test_size_report(mfukit, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("size", EXAMPLE, "--report", str(tmp_path))
    assert run.exit_code == 0
    html = (tmp_path / "report.html").read_text()
    assert "data:image/png;base64," in html and (tmp_path / "memory.png").exists()
    assert f"wrote {tmp_path / 'report.html'}" in run.stdout.replace("\n", "")


def test_tp_that_does_not_divide_heads_exits_2(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("size", EXAMPLE, "--tp", "3")
    assert run.exit_code == 2
    assert "parallelism.tp" in run.stderr and "num_attention_heads=64" in run.stderr and "fix:" in run.stderr
    assert "Traceback" not in run.stderr


def test_negative_tokens_exit_2(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit(
        "size", "--model", "llama-65b", "--tokens", "-5T", "--deadline", "14d", "--gpu", "a100-80gb-sxm"
    )
    assert run.exit_code == 2 and "training.tokens" in run.stderr and "negative" in run.stderr


def test_unknown_gpu_suggests(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("size", "--model", "llama-65b", "--tokens", "1T", "--deadline", "14d", "--gpu", "h100")
    assert run.exit_code == 2 and "did you mean" in run.stderr and "h100-sxm" in run.stderr


def test_size_needs_deadline_or_count(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("size", "--model", "llama-65b", "--tokens", "1T", "--gpu", "a100-80gb-sxm")
    assert run.exit_code == 2 and "--deadline" in run.stderr


def test_missed_deadline_exits_1(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("size", EXAMPLE, "--gpus", "1008", "--format", "json")
    assert run.exit_code == 1 and run.json()["result"]["meets_deadline"] is False


def test_mfu_llama_per_gpu(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("mfu", "--model", "llama-65b", "--gpu", "a100-80gb-sxm", "--tokens-per-s-per-gpu", "380")
    assert run.exit_code == 0 and "49.5 %" in run.stdout and "full s^2" in run.stdout
    assert max(len(line) for line in run.stdout.splitlines()) <= 100


def test_mfu_from_total_and_step_time_agree(mfukit) -> None:  # type: ignore[no-untyped-def]
    base = ["mfu", "--model", "llama-65b", "--gpu", "a100-80gb-sxm", "--gpus", "2048", "--format", "json"]
    total = mfukit(*base, "--tokens-per-s", str(380 * 2048)).json()["result"]
    step = mfukit(
        *base, "--step-time", f"{4_194_304 / (380 * 2048)}s", "--global-batch-tokens", "4194304"
    ).json()
    assert total["mfu"] == step["result"]["mfu"] == total["mfu_by_convention"]["full"]
    assert set(total) >= {"mfu", "hfu", "model_flops_per_s_per_gpu", "attention_convention"}
    assert total["mfu_by_convention"]["causal"] < total["mfu"]


def test_mfu_hfu_counts_recompute(mfukit) -> None:  # type: ignore[no-untyped-def]
    args = [
        "mfu",
        "--model",
        "llama-65b",
        "--gpu",
        "a100-80gb-sxm",
        "--tokens-per-s-per-gpu",
        "300",
        "--format",
        "json",
    ]
    result = mfukit(*args, "--recompute", "full").json()["result"]
    assert result["hfu"] > result["mfu"] and result["recompute"] == "full"


def test_mfu_csv(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit(
        "mfu",
        "--model",
        "llama-65b",
        "--gpu",
        "a100-80gb-sxm",
        "--tokens-per-s-per-gpu",
        "380",
        "--format",
        "csv",
    )
    assert run.stdout.splitlines()[1].startswith("MFU,0.49")


def test_mfu_bad_input_exit_2(mfukit) -> None:  # type: ignore[no-untyped-def]
    total_without_count = mfukit(
        "mfu", "--model", "llama-65b", "--gpu", "a100-80gb-sxm", "--tokens-per-s", "1M"
    )
    assert total_without_count.exit_code == 2 and "--gpus" in total_without_count.stderr
    nothing = mfukit("mfu", "--model", "llama-65b", "--gpu", "a100-80gb-sxm")
    assert nothing.exit_code == 2 and "--tokens-per-s-per-gpu" in nothing.stderr
    negative = mfukit("mfu", "--model", "llama-65b", "--gpu", "a100-80gb-sxm", "--tokens-per-s-per-gpu", "-3")
    assert negative.exit_code == 2 and "negative" in negative.stderr


def test_size_uses_expected_ettr_when_a_failure_model_is_named(mfukit) -> None:  # type: ignore[no-untyped-def]
    args = ["--model", "llama-65b", "--tokens", "1.4T", "--deadline", "14d", "--gpu", "a100-80gb-sxm"]
    args += ["--global-batch-tokens", "4M", "--failure-model", "llama3", "--storage", "lustre-generic"]
    run = mfukit("size", *args, "--format", "json")
    assert run.exit_code == 0, run.stderr
    result = run.json()["result"]
    assert "expected ETTR" in result["goodput_source"] and 0.5 < result["goodput"] < 1.0
    assert result["days"] <= 14
