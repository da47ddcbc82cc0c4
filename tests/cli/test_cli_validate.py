"""`mfukit validate` and `mfukit calibrate` on measured runs in the calibration CSV schema."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

# the Megatron-stack rows of shared/reference: reserved for checking the model (never fitted), read here as a site's file
MEGATRON_CSV = Path(__file__).resolve().parents[2] / "tests/data/perf/megatron_published_runs.csv"
MEGATRON = str(MEGATRON_CSV)


def _site_csv(path: Path, rows: int = 3, tokens_step: float = 5.0, **override: str) -> Path:
    """A site's runs: a few Megatron-Core GPT layouts on A100s, copied from a published row and relabelled,
    measured at 130 tokens/s per GPU and ``tokens_step`` more for each further row."""
    with MEGATRON_CSV.open(newline="") as handle:
        reader = csv.DictReader(handle)
        header = list(reader.fieldnames or [])
        template = next(row for row in reader if row["row_id"] == "25")
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=header)
        writer.writeheader()
        for number in range(rows):
            row = template | {"row_id": str(900 + number), "source_group": "our_site"} | override
            row["tokens_per_sec_per_gpu"] = str(130.0 + tokens_step * number)
            writer.writerow(row)
    return path


def test_validate_prints_the_error_per_source_on_rows_never_fitted(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("validate", MEGATRON, "--format", "json")
    assert run.exit_code == 0, run.stderr
    result = run.json()["result"]
    sources = {row["source"] for row in result["summary"]}
    assert {"korthikanti2022", "megatron_core_h100_2024", "nemo_megatron_bridge", "all"} <= sources
    assert [row["row_id"] for row in result["skipped"]] == ["40", "41"]
    for row in result["runs"]:
        low, high = row["mfu_interval"]
        assert 0 < low <= row["predicted_mfu"] <= high <= 1
        # reserved: no row of the file is in the calibration data, so none is in-sample
        assert row["in_sample"] is False


def test_validate_table_fits_the_console(mfukit, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("validate", str(_site_csv(tmp_path / "runs.csv")))
    assert run.exit_code == 0, run.stderr
    assert "our_site" in run.stdout and "inside 80 % interval" in run.stdout
    assert max(len(line) for line in run.stdout.splitlines()) <= 100


def test_a_bad_row_is_exit_2_naming_the_row_and_column(mfukit, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = _site_csv(tmp_path / "runs.csv", tp="eight")
    run = mfukit("validate", str(path))
    assert run.exit_code == 2
    assert "row 900 (line 2)" in run.stderr and "'tp'" in run.stderr and "Traceback" not in run.stderr
    missing = mfukit("validate", str(tmp_path / "absent.csv"))
    assert missing.exit_code == 2 and "cannot read" in missing.stderr


@pytest.mark.slow
def test_calibrate_writes_an_overlay_that_mfukit_catalog_loads(mfukit, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    runs = _site_csv(tmp_path / "runs.csv", tokens_step=0.0)  # one layout, measured alike three times
    out = tmp_path / "site"
    run = mfukit("calibrate", str(runs), "--out", str(out), "--format", "json")
    assert run.exit_code == 0, run.stderr
    assert (out / "efficiency.toml").is_file() and (out / "loso_residuals.csv").is_file()
    before = {row["source"]: row for row in run.json()["result"]["before"]}["our_site"]
    after = {row["source"]: row for row in run.json()["result"]["after_in_sample"]}["our_site"]
    # the site's constants reproduce what its runs measured, which the shipped ones did not
    assert after["median_abs_rel_error"] < 0.01 < before["median_abs_rel_error"]
    from mfukit.perf.efficiency import installed_efficiency_path
    from mfukit.perf.uncertainty import residuals_path

    monkeypatch.setenv("MFUKIT_CATALOG", str(out))
    assert installed_efficiency_path() == out / "efficiency.toml"
    assert residuals_path() == out / "loso_residuals.csv"
