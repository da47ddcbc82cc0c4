"""``mfukit diagnose`` end to end: table, JSON envelope, exit codes, report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

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


def test_expected_mfu_is_the_performance_models_for_the_layout(mfukit, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """With the model, batch, layout and cluster known, the expected MFU is `mfukit estimate`'s for that
    layout; without the layout it is the GPU's typical MFU, and a warning says why."""
    log = tmp_path / "metrics.jsonl"
    log.write_text(
        "".join(
            json.dumps({"step": s, "step_time_s": 9.0, "tokens_per_s": 4e6 / 9.0}) + "\n"
            for s in range(1, 30)
        )
    )
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
