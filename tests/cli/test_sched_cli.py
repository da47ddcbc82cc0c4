"""`mfukit sched` through the real entry point."""

from __future__ import annotations

from pathlib import Path

DATA = Path(__file__).parents[1] / "data" / "sched"
KEYS = {
    "utilization",
    "wait_s_mean",
    "wait_s_p50",
    "wait_s_p95",
    "bounded_slowdown_mean",
    "makespan_s",
    "jobs_completed",
    "jobs_per_s_simulated",
}


def test_simulate_synthetic_json(mfukit, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    events = tmp_path / "events.tsv"
    run = mfukit(
        "sched", "simulate", "synthetic", "--jobs", "400", "--nodes", "16", "--policy", "easy",
        "--format", "json", "--events", str(events), "--seed", "4",
    )  # fmt: skip
    assert run.exit_code == 0, run.stderr
    envelope = run.json()
    assert envelope["schema"] == "sched.simulate/1"
    result = envelope["result"]
    assert set(result) >= KEYS
    assert result["jobs_completed"] == 400 and 0 < result["utilization"] <= 1
    assert result["wait_s_p50"] <= result["wait_s_p95"]
    assert any("synthetic trace" in a for a in envelope["assumptions"])
    lines = events.read_text().splitlines()
    assert lines[0] == "time_s\tevent\tjob_id\tdetail" and sum("\tstart\t" in line for line in lines) == 400


def test_simulate_a_trace_file_with_report(mfukit, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    run = mfukit(
        "sched", "simulate", str(DATA / "small.swf"), "--nodes", "8", "--policy", "slurm",
        "--report", str(tmp_path / "r"),
    )  # fmt: skip
    assert run.exit_code == 0, run.stderr
    assert "GPU utilization" in run.stdout and "wait by job size" in run.stdout
    html = (tmp_path / "r" / "report.html").read_text()
    assert "utilization.png" in html and (tmp_path / "r" / "wait_cdf.png").is_file()


def test_simulate_with_failures_from_a_scenario(mfukit, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    scenario = tmp_path / "s.toml"
    scenario.write_text('[model]\npreset = "llama-65b"\n[cluster]\nfailure_rate_per_1000_node_days = 500.0\n')
    run = mfukit(
        "sched", "simulate", "synthetic", "--jobs", "300", "--nodes", "16", "--scenario", str(scenario),
        "--node-repair", "1h", "--format", "json",
    )  # fmt: skip
    assert run.exit_code == 0, run.stderr
    result = run.json()["result"]
    assert result["node_failures"] > 0 and result["gpu_hours_lost_to_failures"] > 0
    assert any("500 per 1,000 node-days" in a for a in run.json()["assumptions"])


def test_bad_inputs_exit_2_without_traceback(mfukit, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    unknown = mfukit("sched", "simulate", "synthetic", "--nodes", "4", "--policy", "easi")
    assert unknown.exit_code == 2 and "did you mean easy" in unknown.stderr
    bad = tmp_path / "bad.swf"
    bad.write_text("1 0 0 3600 8\n")
    short = mfukit("sched", "simulate", str(bad), "--nodes", "4")
    assert short.exit_code == 2 and "line 1" in short.stderr and "Traceback" not in short.stderr
    missing = mfukit("sched", "simulate", str(tmp_path / "none.swf"), "--nodes", "4")
    assert missing.exit_code == 2 and "file not found" in missing.stderr
    drain = mfukit("sched", "simulate", "synthetic", "--nodes", "4", "--drain", "0-9@1h+1h")
    assert drain.exit_code == 2 and "--drain" in drain.stderr


def test_analyze_sacct_from_the_dev_cluster(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("sched", "analyze", str(DATA / "devslurm_sacct.txt"), "--format", "json")
    # 40 short jobs on 64 GPUs with 1-3 min limits: far from the 85 % gate, so the verdict fails (exit 1)
    assert run.exit_code == 1, run.stderr
    result = run.json()["result"]
    assert result["jobs"] == 40 and result["capacity_gpus"] == 64
    assert result["scheduling_gate"]["pass"] is False
    assert 0 < result["backfill_share"] < 1
    table = mfukit("sched", "analyze", str(DATA / "devslurm_sacct.json"))
    assert table.exit_code == 1 and "MFU gate" in table.stdout and "FAIL" in table.stdout


def test_csv_is_the_summary_table(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("sched", "analyze", str(DATA / "devslurm_sacct.txt"), "--format", "csv")
    assert run.stdout.splitlines()[0] == "metric,value"


def test_switches_hold_multi_node_jobs_to_one_leaf(mfukit) -> None:  # type: ignore[no-untyped-def]
    args = [
        "sched",
        "simulate",
        str(DATA / "small.swf"),
        "--nodes",
        "16",
        "--nodes-per-switch",
        "4",
        "--format",
        "json",
    ]
    free = mfukit(*args).json()["result"]
    held = mfukit(*args, "--switches", "1@1h").json()
    # 5 jobs, one of them failed by itself in the trace
    assert held["result"]["jobs_completed"] == free["jobs_completed"] == 4
    # the 8-node job cannot fit one 4-node leaf: it waits the full hour before taking any nodes
    assert (
        held["result"]["wait_s_by_size"]["9-64 GPUs"]["p99"]
        > free["wait_s_by_size"]["9-64 GPUs"]["p99"] + 3000
    )
    assert any("leaf switch" in a for a in held["assumptions"])
    bad = mfukit(*args, "--switches", "x")
    assert bad.exit_code == 2 and "--switches" in bad.stderr
