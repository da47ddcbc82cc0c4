"""`mfukit plan --all FILE`: every layout the planner evaluated, one row each, as CSV or JSON lines."""

from __future__ import annotations

import csv
import json
from pathlib import Path

BASE = ("plan", "--model", "gpt3-1.3b", "--gpu", "a100-80gb-sxm", "--gpus", "8", "--global-batch-size", "64")


def test_every_evaluated_layout_is_a_row(mfukit, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "all.csv"
    run = mfukit(*BASE, "--all", str(path), "--format", "json")
    assert run.exit_code == 0, run.stderr
    result = run.json()["result"]
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == result["configs_evaluated"] == result["all_layouts"]["rows"]
    fitting = [row for row in rows if row["fits"] == "True"]
    assert len(rows) - len(fitting) == result["rejected"]["memory"]
    best = result["plans"][0]
    first = rows[0]
    assert float(first["mfu"]) == best["mfu"] and int(first["tp"]) == best["layout"]["tp"]
    assert int(first["micro_batch_size"]) == best["micro_batch_size"]
    assert all(float(row["mfu"]) <= float(first["mfu"]) for row in fitting)
    parts = [key for key in first if key.startswith("breakdown_")]
    assert abs(sum(float(first[key]) for key in parts) - float(first["step_time_s"])) < 1e-6


def test_json_lines_and_a_bad_suffix(mfukit, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "all.jsonl"
    run = mfukit(*BASE, "--tp", "2", "--all", str(path), "--format", "json")
    assert run.exit_code == 0, run.stderr
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert (
        rows and {row["tp"] for row in rows} == {2} and len(rows) == run.json()["result"]["configs_evaluated"]
    )
    bad = mfukit(*BASE, "--all", str(tmp_path / "all.xlsx"))
    assert (
        bad.exit_code == 2
        and "--all" in bad.stderr
        and ".jsonl" in bad.stderr
        and "Traceback" not in bad.stderr
    )
