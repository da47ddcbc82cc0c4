"""Reproducers of the reliability issue: bad input is exit 2 (or 74 for a full disk) naming the field or
path, never a traceback (101), and impossible values never become a confident answer."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mfukit.diagnose.records import GpuSample
from mfukit.errors import InputError
from mfukit.sched.slurm.conf import _hostlist
from mfukit.sched.traces import read_trace
from mfukit.sched.traces.hostlists import expand_hostlist

EXAMPLE = Path(__file__).parents[2] / "examples" / "llama3-70b_h100x1024.toml"
SACCT_HEADER = "JobID|State|Submit|Eligible|Start|End|ElapsedRaw|NNodes|AllocTRES|NodeList|TimelimitRaw"


def _scenario(tmp_path: Path, old: str, new: str, name: str = "s.toml") -> Path:
    path = tmp_path / name
    path.write_text(EXAMPLE.read_text().replace(old, new))
    return path


@pytest.mark.parametrize("value", ["9223372036854775807", "true"])
def test_ft_plan_rejects_absurd_and_boolean_gpu_counts(mfukit, tmp_path: Path, value: str) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("ft", "plan", str(_scenario(tmp_path, "num_gpus = 1024", f"num_gpus = {value}")))
    assert run.exit_code == 2, run.stderr
    assert "cluster.num_gpus" in run.stderr


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        ("global_batch_size = 2048", "global_batch_size = " + "9" * 400, "training.global_batch_size"),
        ("seq_len = 8192", "seq_len = 4294967296", "training.seq_len"),
    ],
)
def test_estimate_rejects_a_batch_or_sequence_beyond_64_bit_products(  # type: ignore[no-untyped-def]
    mfukit, tmp_path: Path, old: str, new: str, field: str
) -> None:
    run = mfukit("estimate", str(_scenario(tmp_path, old, new)), "--tp", "8", "--pp", "4")
    assert run.exit_code == 2, run.stderr
    assert field in run.stderr


@pytest.mark.parametrize("command", [("plan",), ("ft", "plan")])
def test_a_batch_of_more_sequences_than_the_bound_given_in_tokens_is_refused(  # type: ignore[no-untyped-def]
    mfukit, tmp_path: Path, command: tuple[str, ...]
) -> None:
    # 10^15 tokens of 8,192 had sent the planner through 10^11 candidate micro-batch sizes (a hang)
    scenario = _scenario(tmp_path, "global_batch_size = 2048", 'global_batch_tokens = "1e15"')
    run = mfukit(*command, str(scenario))
    assert run.exit_code == 2, run.stderr
    assert "training.global_batch_tokens" in run.stderr


def test_a_utf8_bom_is_not_content(mfukit, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "bom.toml"
    path.write_bytes(b"\xef\xbb\xbf" + EXAMPLE.read_bytes())
    assert mfukit("ft", "plan", str(path)).exit_code == 0


@pytest.mark.parametrize("suffix, line", [(".toml", "a = {}"), (".yaml", "a: {}")])
def test_deeply_nested_scenarios_are_bad_input(mfukit, tmp_path: Path, suffix: str, line: str) -> None:  # type: ignore[no-untyped-def]
    depth = 1200  # past the interpreter's recursion limit (1000)
    path = tmp_path / f"deep{suffix}"
    path.write_text(line.format("[" * depth + "]" * depth))
    run = mfukit("ft", "plan", str(path))
    assert run.exit_code == 2 and "too deeply" in run.stderr


def test_deeply_nested_sacct_json_is_bad_input(mfukit, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "sacct.json"
    path.write_text('{"jobs": ' + "[" * 100_000 + "]" * 100_000 + "}")
    run = mfukit("sched", "analyze", str(path))
    assert run.exit_code == 2 and "too deeply" in run.stderr


def test_an_unusable_output_path_is_exit_2_naming_it(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    tiny = Path(__file__).parents[2] / "examples" / "tiny-cpu.toml"
    command = [sys.executable, "-c", "from mfukit.cli.main import main; main()", "train", str(tiny)]
    out = subprocess.run([*command, "--out", str(blocker / "x")], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    assert str(blocker) in out.stderr and "Traceback" not in out.stderr


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_stdout_on_a_full_disk_is_exit_74() -> None:
    with Path("/dev/full").open("w") as full:
        out = subprocess.run(
            [sys.executable, "-c", "from mfukit.cli.main import main; main()", "ft", "plan", str(EXAMPLE)],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
        )
    assert out.returncode == 74, out.stderr
    assert "standard output" in out.stderr and "No space left" in out.stderr


def _sacct(tmp_path: Path, nodelist: str) -> Path:
    path = tmp_path / "sacct.txt"
    row = f"1|COMPLETED|2026-01-01T00:00:00|2026-01-01T00:00:00|2026-01-01T00:01:00|2026-01-01T01:00:00|3540|1|gres/gpu=8|{nodelist}|120"
    path.write_text(f"{SACCT_HEADER}\n{row}\n")
    return path


def test_a_bad_sacct_nodelist_is_a_bad_row_naming_it(mfukit, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("sched", "analyze", str(_sacct(tmp_path, "gpu[a-3]")))
    assert run.exit_code == 2 and "gpu[a-3]" in run.stderr and "line 2" in run.stderr


def test_hostlists_expand_and_collect_like_slurm() -> None:
    assert expand_hostlist("gpu[01-03,05],login1") == ("gpu01", "gpu02", "gpu03", "gpu05", "login1")
    assert expand_hostlist("None assigned") == ()
    assert _hostlist(["gpu01", "gpu02", "gpu03", "gpu05"]) == "gpu[01-03,05]"
    with pytest.raises(ValueError, match="not a Slurm host list"):
        expand_hostlist("gpu[1-999999999]")


def test_alibaba_plan_gpu_typo_is_a_bad_row(tmp_path: Path) -> None:
    path = tmp_path / "pai_task_table.csv"
    path.write_text("j1,t1,1,Terminated,100,200,600,29,1O0,V100\n")
    with pytest.raises(InputError, match="line 1"):
        read_trace(path, gpus_per_node=8, cluster_gpus=64, fmt="alibaba")


@pytest.mark.parametrize("start", ["1e400", "nan", "1e300"])
def test_alibaba_and_helios_times_out_of_range_are_bad_rows(tmp_path: Path, start: str) -> None:
    alibaba = tmp_path / "a.csv"
    alibaba.write_text(f"j1,t1,1,Terminated,{start},1e308,600,29,100,V100\n")
    helios = tmp_path / "h.csv"
    helios.write_text(f"job_id,submit_time,start_time,end_time,gpu_num\n1,{start},{start},1e308,8\n")
    for path, fmt in ((alibaba, "alibaba"), (helios, "helios")):
        with pytest.raises(InputError):
            read_trace(path, gpus_per_node=8, cluster_gpus=64, fmt=fmt)


def test_swf_overflow_and_nan_are_bad_rows(tmp_path: Path) -> None:
    path = tmp_path / "t.swf"
    fields = [
        "1",
        "0",
        "0",
        "1e400",
        "8",
        "-1",
        "-1",
        "8",
        "100",
        "-1",
        "1",
        "1",
        "-1",
        "-1",
        "-1",
        "1",
        "-1",
        "-1",
    ]
    path.write_text(" ".join(fields) + "\n" + " ".join(["2", "nan", *fields[2:]]) + "\n")
    with pytest.raises(InputError):
        read_trace(path, gpus_per_node=8, cluster_gpus=64, fmt="swf")


def _megatron_log(directory: Path, step_ms: str) -> Path:
    directory.mkdir()
    lines = [
        f" [2024-05-01 10:00:0{i}] iteration {i}/ 100 | consumed samples: {8 * i} | elapsed time per iteration "
        f"(ms): {step_ms} | learning rate: 1.0E-04 | global batch size: 8 | lm loss: 2.0 |"
        for i in range(1, 6)
    ]
    (directory / "train.log").write_text("\n".join(lines) + "\n")
    return directory


JOB = ("--model", "llama3.1-8b", "--gpu", "h100-sxm", "--gpus", "8", "--format", "json")


@pytest.mark.parametrize("step_ms", ["0", "-1200.5", "0.01"])
def test_impossible_step_times_never_pass_a_gate(mfukit, tmp_path: Path, step_ms: str) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("diagnose", str(_megatron_log(tmp_path / "run", step_ms)), *JOB)
    assert run.exit_code in (0, 1), run.stderr
    result = run.json()["result"]
    mfu = result["mfu"]["measured"]
    assert mfu is None or 0 < mfu <= 1
    gates = {gate["id"]: gate for gate in result["gates"]}
    for gate in ("mfu_baseline", "storage"):
        assert gates[gate]["value"] is None or gates[gate]["value"] >= 0
        assert not (
            gates[gate]["status"] == "pass" and gates[gate]["value"] is not None and gates[gate]["value"] < 0
        )


def test_a_reported_mfu_above_100_percent_is_not_a_measurement(mfukit, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import json

    fixture = Path(__file__).parents[1] / "data" / "diagnose" / "mfukit" / "train_run" / "metrics.jsonl"
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    records = [json.loads(line) for line in fixture.read_text().splitlines()]
    for record in records:
        if "mfu" in record:
            record["mfu"] = 63.92  # 6,392 %: a percent written where a fraction belongs
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    result = mfukit("diagnose", str(run_dir), "--format", "json").json()["result"]
    gate = next(g for g in result["gates"] if g["id"] == "mfu_baseline")
    assert gate["status"] != "pass"
    assert result["mfu"]["measured"] is None


def test_negative_telemetry_counts_are_no_reading() -> None:
    sample = GpuSample(time_s=0.0, ecc_uncorrected=-5.0, sm_clock_hz=float("nan"), temperature_c=-3.0)
    assert sample.ecc_uncorrected is None and sample.sm_clock_hz is None
    assert sample.temperature_c == -3.0  # a temperature may be below zero


def test_user_text_in_warnings_is_not_rich_markup() -> None:
    import io

    from mfukit.cli.render import console, render_table
    from mfukit.core.results import Output

    stream = io.StringIO()
    render_table(
        Output(schema="x/1", result={}, warnings=["[nccl_env] NCCL_ALGO set to [bold]ring"]), console(stream)
    )
    assert "[nccl_env] NCCL_ALGO set to [bold]ring" in stream.getvalue()


def test_comm_check_reads_the_rank_count_off_a_table_without_its_header(mfukit, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    full = Path(__file__).parents[1] / "data" / "comm" / "synthetic" / "current_2025_allreduce_2x8_h100.txt"
    lines = full.read_text().splitlines()
    table = lines[next(i for i, line in enumerate(lines) if "size" in line and "count" in line) :]
    path = tmp_path / "all_reduce_perf.txt"  # a log pasted from a README: only the table
    path.write_text("\n".join(table) + "\n")
    run = mfukit("comm", "check", str(path), "--system", "dgx-h100", "--format", "json")
    assert run.exit_code == 0, run.stderr
    result = run.json()["result"]
    file_peak_gb_s = max(
        float(line.split()[7]) for line in table if line.strip() and not line.startswith("#")
    )
    assert result["num_ranks"] == 16
    assert abs(result["peak_busbw_bytes_per_s"] / 1e9 - file_peak_gb_s) <= 0.01 * file_peak_gb_s
