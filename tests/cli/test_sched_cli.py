"""`mfukit sched` through the real entry point."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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


def _gate_exit(envelope: dict[str, Any]) -> int:
    """What `sched simulate` exits with: 1 when the scheduling gate fails, as `sched analyze`."""
    return 0 if envelope["result"]["scheduling_gate"]["pass"] else 1


def test_simulate_synthetic_json(mfukit, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    events = tmp_path / "events.tsv"
    run = mfukit(
        "sched", "simulate", "synthetic", "--jobs", "400", "--nodes", "16", "--policy", "easy",
        "--format", "json", "--events", str(events), "--seed", "4",
    )  # fmt: skip
    envelope = run.json()
    assert run.exit_code == _gate_exit(envelope), run.stderr
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
    # a 16-job trace leaves the cluster mostly idle: the scheduling gate fails, exit 1 as `sched analyze`
    assert run.exit_code == 1 and "scheduling gate" in run.stdout and "FAIL" in run.stdout, run.stderr
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
    assert run.exit_code == _gate_exit(run.json()), run.stderr
    result = run.json()["result"]
    assert result["node_failures"] > 0 and result["gpu_hours_lost_to_failures"] > 0
    assert any("500 per 1,000 node-days" in a for a in run.json()["assumptions"])


def test_node_failures_from_a_failure_model(mfukit, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # llama3: 419 unplanned interruptions over 2,048 nodes x 54 days = 3.79 per 1,000 node-days per
    # 8-GPU node; 63 of them (software bugs, NCCL timeouts, dependencies) leave the node in service
    run = mfukit(
        "sched", "simulate", "synthetic", "--jobs", "50", "--nodes", "4", "--failure-model", "llama3",
        "--format", "json",
    )  # fmt: skip
    assert run.exit_code == _gate_exit(run.json()), run.stderr
    assumption = next(a for a in run.json()["assumptions"] if a.startswith("node failures"))
    assert "3.79 per 1,000 node-days" in assumption and "llama3" in assumption and "85.0 %" in assumption
    # the scenario's [ft] failure model with a per-category override (failures per 1,000 node-days)
    scenario = tmp_path / "s.toml"
    scenario.write_text(
        '[model]\npreset = "llama-65b"\n[ft]\nfailure_model = "meta-rsc1"\n[ft.rates]\ninfrastructure = 500.0\n'
    )
    run = mfukit(
        "sched", "simulate", "synthetic", "--jobs", "300", "--nodes", "16", "--scenario", str(scenario),
        "--node-repair", "1h", "--format", "json",
    )  # fmt: skip
    assert run.exit_code == _gate_exit(run.json()), run.stderr
    assert run.json()["result"]["node_failures"] > 0
    assert any("500 per 1,000 node-days" in a and "meta-rsc1" in a for a in run.json()["assumptions"])
    unknown = mfukit("sched", "simulate", "synthetic", "--nodes", "4", "--failure-model", "llama4")
    assert unknown.exit_code == 2 and "llama3" in unknown.stderr


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
    # whole-node jobs on 8-GPU nodes leave no partly free node: nothing is stranded, but GPUs sat
    # free while jobs waited (a 4-node job behind running 1- and 2-node jobs)
    assert result["stranded_gpu_frac"] == 0 and 0 < result["idle_with_queue_gpu_frac"] < 1
    table = mfukit("sched", "analyze", str(DATA / "devslurm_sacct.json"))
    assert table.exit_code == 1 and "scheduling gate" in table.stdout and "FAIL" in table.stdout


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


def test_dev_cluster_check_a_captured_replay(mfukit, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("sched", "dev-cluster", "check", str(DATA / "replays" / "seed7"), "--format", "json")
    assert run.exit_code == 0, run.stderr
    result = run.json()["result"]
    assert result["agrees"] and result["passes_agreeing"] == result["passes"] > 20
    assert result["starts_agreeing"] == result["starts"] == 40 and result["max_start_difference_s"] == 0
    # a replay directory whose log lacks the scheduler's lines is bad input, not a traceback
    broken = tmp_path / "broken"
    broken.mkdir()
    for name in ("trace.json", "sacct.txt"):
        (broken / name).write_text((DATA / "replays" / "seed7" / name).read_text())
    (broken / "slurmctld.log").write_text("[2026-11-29T19:19:33.267] slurmctld version 22.05.8 started\n")
    bad = mfukit("sched", "dev-cluster", "check", str(broken))
    assert bad.exit_code == 2 and "DebugFlags=Backfill" in bad.stderr and "Traceback" not in bad.stderr
    none = mfukit("sched", "dev-cluster", "replay", str(tmp_path / "out"), "--workdir", str(tmp_path / "no"))
    assert none.exit_code == 2 and "no dev cluster" in none.stderr
