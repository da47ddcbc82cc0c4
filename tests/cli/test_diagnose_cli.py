"""``mfukit diagnose`` end to end: table, JSON envelope, exit codes, report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mfukit import units

DATA = Path(__file__).parents[1] / "data" / "diagnose"
TRACE = str(DATA / "kineto" / "resnet50_num_workers_0.pt.trace.json.gz")


def test_json_envelope_and_exit_1_on_error_finding(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("diagnose", TRACE, "--format", "json")
    assert run.exit_code == 1
    envelope = run.json()
    assert envelope["schema"] == "diagnose/1"
    result = envelope["result"]
    assert {"findings", "gates", "mfu", "time_breakdown", "post_mortem"} <= set(result)
    top = result["findings"][0]
    assert top["id"] == "dataloader_stall" and top["severity"] == "error"
    assert {"evidence", "impact", "fix", "prevention", "mfu_after_fix"} <= set(top)
    assert [g["id"] for g in result["gates"]] == [
        "mfu_baseline",
        "network",
        "failure_rate",
        "scheduling",
        "storage",
    ]
    assert all(g["status"] in ("pass", "fail", "unknown") for g in result["gates"])
    assert 0.6 < result["time_breakdown"]["overall"]["compute_fraction"] < 0.7
    assert any("MFU not measured" in w for w in envelope["warnings"])


def test_table_fits_and_names_the_fix(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("diagnose", TRACE)
    assert run.exit_code == 1
    assert "dataloader_stall" in run.stdout and "num_workers" in run.stdout and "Post-mortem" in run.stdout
    assert max(len(line) for line in run.stdout.splitlines()) <= 100


def test_mfu_from_flags_and_report(mfukit, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    log = tmp_path / "metrics.jsonl"
    log.write_text(
        "".join(
            json.dumps({"step": s, "loss": 2.0, "step_time_s": 2.0, "tokens_per_s": 2_000_000.0}) + "\n"
            for s in range(1, 30)
        )
    )
    run = mfukit(
        "diagnose", str(log), TRACE, "--model", "llama-65b", "--gpu", "h100-sxm", "--gpus", "1024",
        "--seq-len", "2048", "--format", "json", "--report", str(tmp_path / "report"),
    )  # fmt: skip
    mfu = run.json()["result"]["mfu"]
    # 2e6 tokens/s over 1,024 GPUs at 6N + 12Lhs FLOPs per token against 989.4 TFLOP/s
    assert mfu["measured"] == mfu["steady_state"] and 0.7 < mfu["measured"] < 0.9
    assert mfu["expected"] == 0.40
    html = (tmp_path / "report" / "report.html").read_text()
    assert "data:image/png;base64," in html and "timeline.png" in html and "dataloader_stall" in html


def test_missing_path_is_bad_input(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("diagnose", "/no/such/trace.json")
    assert run.exit_code == 2 and "no such file" in run.stderr and "Traceback" not in run.stderr


def metrics_log(tmp_path: Path, *, step_s: float, tokens_per_step: float) -> Path:
    """An ``mfukit train`` metrics.jsonl of 29 steps of ``step_s`` each."""
    log = tmp_path / "metrics.jsonl"
    log.write_text(
        "".join(
            json.dumps({"step": s, "step_time_s": step_s, "tokens_per_s": tokens_per_step / step_s}) + "\n"
            for s in range(1, 30)
        )
    )
    return log


def test_expected_mfu_is_the_performance_models_for_the_layout(mfukit, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """With the model, batch, layout and cluster known, the expected MFU is `mfukit estimate`'s for that
    layout; without the layout it is the GPU's typical MFU, and a warning says why."""
    log = metrics_log(tmp_path, step_s=9.0, tokens_per_step=4e6)
    job = ["--model", "llama-65b", "--gpu", "h100-sxm", "--gpus", "1024", "--seq-len", "2048",
           "--global-batch-size", "1024"]  # fmt: skip
    layout = ["--tp", "8", "--pp", "4"]
    estimate = mfukit("estimate", *job, *layout, "--format", "json").json()["result"]
    mfu = mfukit("diagnose", str(log), *job, *layout, "--format", "json").json()["result"]["mfu"]
    assert mfu["expected_basis"] == "performance_model"
    assert mfu["expected"] == pytest.approx(estimate["mfu"], rel=1e-9)
    assert "TP 8 x PP 4 x DP 32" in mfu["expected_source"]
    typical = mfukit("diagnose", str(log), *job, "--format", "json").json()
    assert typical["result"]["mfu"]["expected_basis"] == "typical_mfu"
    assert typical["result"]["mfu"]["expected"] == 0.40
    assert any("typical MFU" in w and "no the parallel layout" in w for w in typical["warnings"])
    broken = mfukit("diagnose", str(log), *job, "--tp", "3", "--format", "json").json()
    assert broken["result"]["mfu"]["expected_basis"] == "typical_mfu"
    assert any("cannot be built" in w and "heads" in w for w in broken["warnings"])


def test_expected_mfu_never_comes_from_a_layout_that_does_not_fit(mfukit, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Llama-2-7B, plain DDP, 4 x 4,096-token sequences per GPU: `mfukit estimate` says it needs more than 80
    GiB per GPU even with full recompute, so the job as described cannot have run. The expected MFU is the best layout that fits (the planner's, at
    the same GPUs and global batch), and a warning says the scenario's layout does not fit."""
    log = metrics_log(tmp_path, step_s=9.0, tokens_per_step=2.1e6)
    job = ["--model", "llama2-7b", "--gpu", "a100-80gb-sxm", "--gpus", "128", "--seq-len", "4096",
           "--global-batch-size", "512", "--micro-batch-size", "4", "--tp", "1", "--pp", "1", "--dp", "128"]  # fmt: skip
    estimate = mfukit("estimate", *job, "--format", "json")
    assert estimate.exit_code == 1 and estimate.json()["result"]["fits"] is False
    plan = mfukit("plan", *job[:10], "--format", "json").json()["result"]
    envelope = mfukit("diagnose", str(log), *job, "--format", "json").json()
    mfu = envelope["result"]["mfu"]
    assert mfu["expected_basis"] == "best_fitting_layout"
    assert mfu["expected"] != pytest.approx(estimate.json()["result"]["mfu"], rel=1e-6)
    assert mfu["expected"] == pytest.approx(plan["plans"][0]["mfu"], rel=1e-9)
    assert "best layout that fits" in mfu["expected_source"]
    (warning,) = [w for w in envelope["warnings"] if "does not fit" in w]
    # recompute not given: even the layout's lightest-memory mode (full recompute) does not fit
    needed = units.format_bytes(estimate.json()["result"]["memory_per_gpu_bytes"])
    assert needed in warning and "80.0 GiB" in warning and "recompute full, sharding none" in warning


def test_empty_directory_is_nothing_to_diagnose(mfukit, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / ".hidden").write_text("x")
    run = mfukit("diagnose", str(tmp_path))
    assert run.exit_code == 2 and "Traceback" not in run.stderr
    assert "no artifacts" in run.stderr and "Kineto" in run.stderr and str(tmp_path) in run.stderr


def test_single_gpu_trace_has_no_network_verdict(mfukit) -> None:  # type: ignore[no-untyped-def]
    gates = {g["id"]: g for g in mfukit("diagnose", TRACE, "--format", "json").json()["result"]["gates"]}
    assert gates["network"]["status"] == "unknown" and gates["network"]["value"] is None
    assert "not applicable" in gates["network"]["why"] and "one GPU" in gates["network"]["why"]
    assert "applicable:" in mfukit("diagnose", TRACE).stdout  # the table says why, not only what decides


def test_a_directory_where_nothing_parses_is_bad_input(mfukit, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "notes.txt").write_text("nothing a training stack prints\n")
    (tmp_path / "nvidia-smi_node007.txt").write_text("hello\n")
    run = mfukit("diagnose", str(tmp_path))
    assert run.exit_code == 2 and "Traceback" not in run.stderr
    text = " ".join(run.stderr.split())
    assert (
        "notes.txt" in text and "nvidia-smi_node007.txt" in text and "not a recognised artifact kind" in text
    )
    assert "Megatron-LM" in text and "Nsight Systems" in text  # the kinds it looked for


def test_the_job_and_where_each_value_came_from(mfukit) -> None:  # type: ignore[no-untyped-def]
    case = Path(__file__).parents[1] / "data" / "diagnose" / "cases" / "megatron_a100x128"
    out = mfukit("diagnose", str(case), "--format", "json").json()
    job = {entry["name"]: entry for entry in out["result"]["job"]}
    assert job["seq_len"]["value"] == 4096 and job["seq_len"]["origin"] == "log"
    assert "seq_length" in job["seq_len"]["where"]
    mfu = out["result"]["mfu"]
    assert mfu["expected_basis"] == "performance_model" and "expected_interval" in mfu
    assert mfu["measured"] < mfu["after_top_fix"] <= mfu["expected"]
    assert out["result"]["post_mortem"]["impact"]["gpu_hours_wasted_per_day"] > 0
    table = mfukit("diagnose", str(case), "--format", "table").stdout
    assert "where each value came from" in table and "Root cause" in table and "Prevention" in table
