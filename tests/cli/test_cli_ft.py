"""`mfukit ft plan` and `mfukit ft simulate` through the real entry point."""

from __future__ import annotations

from pathlib import Path

import pytest

EXAMPLE = str(Path(__file__).parents[2] / "examples" / "llama3-405b_h100x16384.toml")
PLAN_KEYS = {
    "mtbf_s",
    "young_interval_s",
    "daly_interval_s",
    "interval_steps",
    "ettr",
    "expected_interruptions",
    "checkpoint_bytes",
    "checkpoint_write_s",
    "blocking_s",
}
SIMULATE_KEYS = {"ettr_p5", "ettr_p50", "ettr_p95", "interruptions_mean", "replicas"}


def test_plan_json_has_the_issue_keys(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("ft", "plan", EXAMPLE, "--format", "json")
    assert run.exit_code == 0, run.stderr
    envelope = run.json()
    result = envelope["result"]
    assert envelope["schema"] == "ft.plan/1" and set(result) >= PLAN_KEYS
    assert result["mtbf_s"] / 3600 == pytest.approx(3.093, abs=0.001)  # Table 5
    assert result["checkpoint_bytes_per_param"] == 14
    assert 0 < result["ettr"] <= 1 and result["interval_steps"] >= 1
    assert any("torchtitan" in line for line in envelope["assumptions"])
    assert {p["mode"] for p in result["policies"]} == {"sync", "async"}
    # 16M tokens / 8,192 = 1,953 sequences: rounded per layout, so the performance model answers (no typical MFU)
    assert any(
        line.startswith("step time") and "from the performance model" in line
        for line in envelope["assumptions"]
    )


def test_plan_table_fits_and_names_categories(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("ft", "plan", EXAMPLE, "--checkpoint-interval", "500steps", "--rate", "faulty-gpu=0.05")
    assert run.exit_code == 0, run.stderr
    assert "faulty-gpu *" in run.stdout and "Young interval" in run.stdout
    assert max(len(line) for line in run.stdout.splitlines()) <= 100


def test_plan_csv_is_si(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("ft", "plan", EXAMPLE, "--format", "csv")
    header, first, *_ = run.stdout.splitlines()
    assert header == "quantity,value_si" and first.startswith("job MTBF (unplanned),11135")


def test_simulate_json_and_report(mfukit, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    run = mfukit(
        "ft",
        "simulate",
        EXAMPLE,
        "--replicas",
        "40",
        "--seed",
        "1",
        "--work",
        "10d",
        "--checkpoint-interval",
        "15min",
        "--format",
        "json",
        "--report",
        str(tmp_path),
    )
    assert run.exit_code == 0, run.stderr
    result = run.json()["result"]
    assert set(result) >= SIMULATE_KEYS and result["replicas"] == 40
    assert result["ettr_p5"] <= result["ettr_p50"] <= result["ettr_p95"]
    assert abs(result["ettr_mean"] - result["ettr_analytic"]) < 0.02
    assert {p.name for p in tmp_path.iterdir()} == {
        "report.html",
        "ft_ettr_vs_interval.png",
        "ft_timeline.png",
    }


def test_bad_inputs_exit_2_without_traceback(mfukit) -> None:  # type: ignore[no-untyped-def]
    bad = [
        (["--failure-model", "llama"], "did you mean llama3"),
        (["--rate", "faulty-gpus=1"], "faulty-gpu"),
        (["--rate", "faulty-gpu"], "CATEGORY=RATE"),
        (["--checkpoint-interval", "30m"], "ambiguous"),
        (["--failure-distribution", "weibull"], "weibull_shape"),
    ]
    for flags, message in bad:
        run = mfukit("ft", "plan", EXAMPLE, *flags)
        assert run.exit_code == 2, (flags, run.stdout)
        assert message in run.stderr and "Traceback" not in run.stderr


def test_missed_deadline_exits_1(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("ft", "plan", EXAMPLE, "--deadline", "60d", "--format", "json")
    assert run.exit_code == 1
    assert any("deadline" in warning for warning in run.json()["warnings"])


def test_plan_without_a_scenario(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit(
        "ft",
        "plan",
        "--model",
        "llama-65b",
        "--gpus",
        "2048",
        "--gpu",
        "a100-80gb-sxm",
        "--tokens",
        "1.4T",
        "--global-batch-tokens",
        "4M",
        "--failure-model",
        "meta-rsc1",
        "--format",
        "json",
    )
    assert run.exit_code == 0, run.stderr
    envelope = run.json()
    assert any("no storage tier" in warning for warning in envelope["warnings"])
    assert envelope["result"]["mtbf_s"] / 3600 == pytest.approx(24 / (256 * 6.5e-3), rel=1e-9)


def test_plan_report_has_the_fault_tolerance_section(mfukit, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("ft", "plan", EXAMPLE, "--report", str(tmp_path), "--format", "json")
    assert run.exit_code == 0, run.stderr
    html = (tmp_path / "report.html").read_text()
    assert "Fault tolerance" in html and "Recommended checkpoint interval" in html
    assert (tmp_path / "ft_ettr_vs_interval.png").stat().st_size > 10_000


def test_an_interval_of_many_mtbfs_gives_zero_ettr_not_a_crash(mfukit) -> None:  # type: ignore[no-untyped-def]
    """100M steps (about 20 years) against a 3.1 h MTBF: e^(T/M) overflows a float; the plan says so."""
    run = mfukit("ft", "plan", EXAMPLE, "--checkpoint-interval", "100000000steps", "--format", "json")
    assert run.exit_code == 0, run.stderr
    envelope = run.json()
    result = envelope["result"]
    assert result["interval_steps"] == 100_000_000
    assert result["ettr"] == 0.0 and result["ettr_first_order"] == 0.0
    assert result["wall_clock_s"] is None  # infinite: JSON has no inf
    assert 0.8 < result["ettr_at_optimum"] < 1.0
    assert any("x the job's MTBF" in w and "never finish" in w for w in envelope["warnings"])


def test_saturated_storage_is_warned_with_the_interval_at_half_duty(mfukit) -> None:  # type: ignore[no-untyped-def]
    """The recommended async interval writes 5.7 TB about every minute: most of lustre-generic's 100 GB/s."""
    run = mfukit("ft", "plan", EXAMPLE, "--format", "json")
    envelope = run.json()
    result = envelope["result"]
    write_s = result["checkpoint_bytes"] / result["storage_write_bytes_per_s"]
    assert result["storage_write_bytes_per_s"] == pytest.approx(100e9)
    assert result["storage_write_duty"] == pytest.approx(
        write_s / (result["interval_s"] + result["blocking_s"])
    )
    assert result["storage_write_duty"] > 0.8 and result["storage_write_duty"] > result["storage_duty_limit"]
    at_limit = result["interval_at_storage_duty_limit_s"]
    assert write_s / (at_limit + result["blocking_s"]) <= 0.5
    assert (
        write_s / (at_limit - result["step_time_s"] + result["blocking_s"]) > 0.5
    )  # the shortest whole-step one
    # the recommended interval (whole steps, no shorter than the persist) is the optimum: the longer
    # interval that spares the storage costs ETTR, never gains it
    assert result["interval_s"] >= result["persist_s"]
    assert 0.8 < result["ettr_at_storage_duty_limit"] <= result["ettr_at_optimum"] < 1.0
    busy = f"storage busy {100 * result['storage_write_duty']:.1f} %"
    assert any(busy in w and "within 50.0 %" in w for w in envelope["warnings"])
    quiet = mfukit("ft", "plan", EXAMPLE, "--checkpoint-interval", "30min", "--format", "json").json()
    assert quiet["result"]["storage_write_duty"] < 0.05
    assert not any("storage busy" in w for w in quiet["warnings"])


def test_failure_table_footnotes_only_what_is_there(mfukit) -> None:  # type: ignore[no-untyped-def]
    plain = mfukit("ft", "plan", EXAMPLE)
    assert "* overridden" not in plain.stdout
    assert "no repair time (give --repair)" in plain.stdout
    overridden = mfukit("ft", "plan", EXAMPLE, "--rate", "faulty-gpu=0.05")
    assert "* overridden" in overridden.stdout
    repaired = mfukit("ft", "plan", EXAMPLE, "--repair", "3d", "--format", "json").json()
    assert repaired["result"]["recommended_hot_spares"] >= 1
