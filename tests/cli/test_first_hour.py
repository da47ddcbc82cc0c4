"""What a new user typed in their first hour: model names as the Hub spells them, numbers in the unit a flag
names, and the smaller defects they met (power, gates, labels)."""

from __future__ import annotations

import json
from pathlib import Path


def test_a_hub_id_names_the_model_on_the_command_line(mfukit) -> None:  # type: ignore[no-untyped-def]
    shown = mfukit("catalog", "show", "meta-llama/Llama-2-13b-hf", "--format", "json")
    assert shown.exit_code == 0, shown.stderr
    assert shown.json()["result"]["name"] == "llama2-13b"
    typed = mfukit(
        "mfu", "--model", "llama-2-13b", "--gpu", "A100-80GB-SXM", "--tokens-per-s-per-gpu", "1000"
    )
    assert typed.exit_code == 0, typed.stderr
    assert "Llama 2 13B" in typed.stdout


def test_a_flag_that_names_its_unit_takes_a_bare_number(mfukit) -> None:  # type: ignore[no-untyped-def]
    base = ("comm", "predict", "--collective", "all_reduce", "--system", "dgx-h100", "--nodes", "2")
    bare = mfukit(*base, "--bytes", "8", "--format", "json")
    assert bare.exit_code == 0, bare.stderr
    with_unit = mfukit(*base, "--bytes", "8B", "--format", "json")
    assert bare.json()["result"] == with_unit.json()["result"]
    sweep = mfukit("comm", "sweep", "--collective", "all_reduce", "--system", "dgx-h100", "--nodes", "2",
                   "--min-bytes", "8", "--max-bytes", "1024", "--format", "json")  # fmt: skip
    assert sweep.exit_code == 0, sweep.stderr


def test_a_bare_number_stays_an_error_where_the_unit_is_ambiguous(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("size", "--model", "llama-65b", "--tokens", "1.4T", "--deadline", "14", "--gpu", "h100-sxm")
    assert run.exit_code == 2 and "bare number" in run.stderr and "Traceback" not in run.stderr


def test_fabric_power_unknown_is_not_zero(mfukit) -> None:  # type: ignore[no-untyped-def]
    # QM8790 cites no power figure and the catalog has no HDR transceiver: the power is unknown, not 0 W
    run = mfukit("fabric", "design", "--system", "dgx-a100-80gb", "--nodes", "16", "--format", "json")
    assert run.exit_code == 0, run.stderr
    result = run.json()["result"]
    assert result["power_w"] is None and result["switch_power_w"] is None and result["optics_power_w"] is None
    table = mfukit("fabric", "design", "--system", "dgx-a100-80gb", "--nodes", "16").stdout
    row = next(line for line in table.splitlines() if "power (switches + optics)" in line)
    assert "unknown" in row and "0.0 W" not in row
    known = mfukit("fabric", "design", "--system", "dgx-h100", "--nodes", "32", "--format", "json").json()
    assert known["result"]["power_w"] > 0


def test_sched_simulate_exits_1_on_a_failed_gate_as_analyze(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("sched", "simulate", "synthetic", "--jobs", "200", "--nodes", "16", "--seed", "1")
    assert run.exit_code == 1, run.stderr
    row = next(line for line in run.stdout.splitlines() if "gate" in line)
    assert row.split()[:2] == ["scheduling", "gate"] and "MFU" not in row and row.split()[-1] == "FAIL"


def _run_dir(directory: Path, slow_steps: set[int], saves: list[int]) -> Path:
    """An `mfukit train` run directory: 40 steps of 0.5 s, 1.4 s where ``slow_steps``, saves at ``saves``."""
    directory.mkdir()
    t = 1_800_000_000.0
    lines = []
    for step in range(1, 41):
        step_s = 1.4 if step in slow_steps else 0.5
        lines.append(
            json.dumps(
                {
                    "step": step,
                    "attempt": 0,
                    "t_start": t,
                    "t_end": t + step_s,
                    "step_time_s": step_s,
                    "data_time_s": 0.001,
                    "loss": 5.0,
                    "lr": 1e-3,
                    "tokens": 1024,
                    "tokens_per_s": 1024 / step_s,
                    "mfu": 0.2,
                    "memory_bytes": 3e8,
                    "rank_compute_s": [step_s * 0.9, step_s * 0.9],
                    "slowest_rank": 0,
                    "straggler_ratio": 1.0,
                }
            )
        )
        t += step_s
    (directory / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    ledger = [
        {"t": 1_799_999_990.0, "kind": "launch", "attempt": -1, "config_hash": "0", "world_size": 2, "steps": 40},
        {"t": 1_799_999_999.0, "kind": "attempt_start", "attempt": 0, "world_size": 2, "resumed_step": 0,
         "resumed_world_size": None, "load_s": 0.0, "init_s": 0.01, "device": "cpu"},
    ] + [
        {"t": 1_800_000_000.0 + 0.5 * save, "kind": "checkpoint", "attempt": 0, "step": save, "blocking_s": 2.0,
         "mode": "sync"}
        for save in saves
    ]  # fmt: skip
    (directory / "ledger.jsonl").write_text("".join(json.dumps(record) + "\n" for record in ledger))
    return directory


def test_diagnose_says_the_save_interval_and_sub_second_stalls(mfukit, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # slow steps right after the save at step 10 (11-16) stride by 1; the saves are every 10 steps
    run_dir = _run_dir(tmp_path / "run", {11, 12, 13, 14, 15, 16, 21}, [10, 20, 30])
    run = mfukit("diagnose", str(run_dir), "--format", "json")
    titles = [finding["title"] for finding in run.json()["result"]["findings"]]
    stall = next(title for title in titles if title.startswith("Checkpoint stalls"))
    assert "every 10 steps" in stall and "every 1 steps" not in stall
    assert "900.0 ms per save" in stall  # not "1 s"
