"""mfukit watch without a server: following files, reading every kind line by line, the exported metrics."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from mfukit.diagnose.sources import training_log
from mfukit.watch.config import JobSpec, WatchConfig
from mfukit.watch.exporter import Watch
from mfukit.watch.follow import Follower
from mfukit.watch.kinds import LineReader

REAL = Path("/work/shared/reference/artifacts/real_logs")
DATA = Path(__file__).resolve().parents[1] / "data"
TRAIN_RUN = DATA / "diagnose" / "mfukit" / "train_run"
MEGATRON = (
    " [2026-03-01 08:00:{second:02d}.000000] iteration {it:8d}/  100000 | consumed samples: {samples:12d} | "
    "elapsed time per iteration (ms): {ms:.1f} | learning rate: 1.000000E-04 | global batch size:  2048 | "
    "lm loss: 2.100000E+00 | loss scale: 1.0 | number of skipped iterations:   0 | number of nan iterations:   0 |"
)


def megatron(it: int, second: int, ms: float = 1000.0) -> str:
    return MEGATRON.format(it=it, second=second, samples=it * 2048, ms=ms)


def texts(follower: Follower) -> list[str]:
    return [line.text for line in follower.poll()]


def test_follower_survives_partial_lines_rotation_and_truncation(tmp_path: Path) -> None:
    path = tmp_path / "train.log"
    follower = Follower(path)
    assert texts(follower) == []  # not there yet
    path.write_text("one\ntw")
    assert texts(follower) == ["one"]  # the partial line waits for its newline
    with path.open("a") as stream:
        stream.write("o\nthree\n")
    assert texts(follower) == ["two", "three"]
    with path.open("a") as stream:
        stream.write("four\nfi")
    path.rename(tmp_path / "train.log.1")  # logrotate: moved away, a new file in its place
    path.write_text("six\n")
    assert texts(follower) == ["four", "fi", "six"]
    assert follower.rotations == 1
    path.write_text("")  # copytruncate
    assert texts(follower) == []
    path.write_text("seven\n")
    assert texts(follower) == ["seven"]
    assert follower.truncations == 1
    path.unlink()
    assert texts(follower) == []
    path.write_text("eight\n")
    assert texts(follower) == ["eight"]
    follower.close()


def test_unreadable_log_is_an_input_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mfukit.errors import InputError
    from mfukit.watch import follow

    def denied(path: object, flags: int) -> int:  # what open(2) answers a user without read permission
        raise PermissionError(13, "Permission denied", str(path))

    path = tmp_path / "train.log"
    path.write_text("step 1\n")
    monkeypatch.setattr(follow.os, "open", denied)
    with pytest.raises(InputError, match="permission denied") as error:
        Follower(path).poll()
    assert str(path) in error.value.render()


def test_follower_marks_undecodable_bytes(tmp_path: Path) -> None:
    path = tmp_path / "train.log"
    path.write_bytes(b"fine\n\xff\xfe garbage\n\x00\x00\x00\n")
    lines = Follower(path).poll()
    assert [line.undecodable for line in lines] == [False, True, True]


def _fed(path: Path) -> tuple[str | None, int]:
    reader = LineReader()
    steps = 0
    for raw in path.read_text(errors="replace").splitlines():
        steps += len(reader.feed(raw).steps)
    return reader.kind, steps


@pytest.mark.parametrize(
    "path",
    [
        REAL / "megatron" / "mds_gpt3-125M_tokendrop_8gpu-azure-IB_part2-of-2_L2000-3995.log",
        REAL / "hf_trainer" / "ezpz_hf_trainer_llama32-1b_fsdp_24xXPU_sunspot.log",
        DATA / "diagnose" / "logs" / "hf_trainer_printer_callback.log",
        TRAIN_RUN / "metrics.jsonl",
    ],
    ids=lambda p: p.name,
)
def test_line_by_line_reads_the_steps_diagnose_reads(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not path.exists():
        pytest.skip(f"{path} is not on this machine")
    kind, steps = _fed(path)
    # diagnose detects on the first 400 lines; the real Megatron log's first iteration line comes later
    # (diagnose reads it as "generic"), so its whole-file parse is run with the kind found line by line
    monkeypatch.setattr(training_log, "framework_of", lambda head: kind)
    (whole,) = training_log.parse(path)
    assert kind == whole.framework
    assert steps == len(whole.steps) > 0


def test_deepspeed_throughput_lines() -> None:
    path = REAL / "deepspeed" / "dschat_dpo_opt350m_8gpu_ds0.16.2.log"
    if not path.exists():
        pytest.skip(f"{path} is not on this machine")
    kind, steps = _fed(path)
    assert kind == "deepspeed"
    assert steps == path.read_text(errors="replace").count("CurrSamplesPerSec=")


def test_torchtitan_line_with_colours_and_separators() -> None:
    reader = LineReader()
    line = (
        "[titan] 2026-03-01 08:00:00,123 - root - INFO - \x1b[31mstep: 10  \x1b[32mloss:  3.2100  "
        "\x1b[33mmemory: 60.12GiB(75.98%)  \x1b[34mtps: 3,210  \x1b[36mtflops: 150.25  \x1b[35mmfu: 15.19%\x1b[39m"
    )
    (step,) = reader.feed(line).steps
    assert reader.kind == "torchtitan"
    assert step.tokens_per_s_per_gpu == 3210 and step.mfu == pytest.approx(0.1519)


def _watch(tmp_path: Path, *lines: str, **config: object) -> tuple[Watch, str]:
    path = tmp_path / "job.log"
    path.write_text("".join(line + "\n" for line in lines))
    warnings: list[str] = []
    watch = Watch(WatchConfig(logs=(path,), **config), JobSpec(), warn=warnings.append)  # type: ignore[arg-type]
    watch.poll()
    watch.warnings = warnings  # type: ignore[attr-defined]
    return watch, generate_latest(watch.registry()).decode()


def _sample(text: str, name: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_without_a_model_mfu_is_absent_not_zero(tmp_path: Path) -> None:
    _, text = _watch(tmp_path, megatron(10, 10), megatron(20, 20))
    assert _sample(text, "mfukit_mfu") is None
    assert _sample(text, "mfukit_expected_mfu") is None
    assert _sample(text, "mfukit_checkpoint_stall_seconds_total") is None  # no save seen
    assert _sample(text, "mfukit_step_time_seconds") == 1.0
    assert _sample(text, "mfukit_last_step") == 20
    assert _sample(text, "mfukit_restarts_total") == 0
    assert _sample(text, "mfukit_goodput") == pytest.approx(1.0)


def test_restart_rework_and_checkpoint_stall(tmp_path: Path) -> None:
    _, text = _watch(
        tmp_path,
        megatron(10, 10),
        "saving checkpoint at iteration       10 to /ckpt",
        megatron(20, 25),  # 10 s of steps in 15 s: a 5 s save stall
        megatron(30, 35),
        megatron(20, 50),  # restarted from the save at 10: steps 11..20 again (rework)
        megatron(30, 55),
    )
    assert _sample(text, "mfukit_restarts_total") == 1
    assert _sample(text, "mfukit_checkpoint_stall_seconds_total") == pytest.approx(5.0)
    assert _sample(text, "mfukit_last_step") == 30
    # the first line counts as one step (what came before it is unknown): 1 + 10 + 10 productive steps of
    # 1 s (the rework after the restart is not), over the 55 - 9 s since that first step began
    assert _sample(text, "mfukit_goodput") == pytest.approx(21 / 46)


def test_garbage_line_is_counted_and_warned_once(tmp_path: Path) -> None:
    first = json_step(1)
    watch, text = _watch(tmp_path, first, "{not json", json_step(2))
    assert _sample(text, "mfukit_watch_parse_errors_total") == 1
    with watch.logs[0].path.open("a") as stream:
        stream.write("{torn\n" + json_step(3) + "\n")
    watch.poll()
    text = generate_latest(watch.registry()).decode()
    assert _sample(text, "mfukit_watch_parse_errors_total") == 2
    assert _sample(text, "mfukit_mfu") == pytest.approx(0.01)  # the log's own MFU (no model given)
    assert len(watch.warnings) == 1  # type: ignore[attr-defined]


def json_step(step: int) -> str:
    return (
        f'{{"step": {step}, "attempt": 0, "t_start": {100.0 + step - 1}, "t_end": {100.0 + step}, '
        f'"step_time_s": 1.0, "data_time_s": 0.0, "loss": 2.0, "tokens_per_s": 1000.0, "mfu": 0.01}}'
    )


def test_mfukit_train_run_with_its_ledger(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(TRAIN_RUN, run)
    watch = Watch(WatchConfig(logs=(run / "metrics.jsonl",)), JobSpec())
    watch.poll()
    text = generate_latest(watch.registry()).decode()
    assert _sample(text, "mfukit_restarts_total") == 1  # the run's fault-injected kill and resume
    assert (_sample(text, "mfukit_checkpoint_stall_seconds_total") or 0) > 0
    assert _sample(text, "mfukit_mfu") is not None


def test_unrecognised_log_is_an_input_error(tmp_path: Path) -> None:
    from mfukit.errors import InputError

    path = tmp_path / "notes.txt"
    path.write_text("hello\nthis is not a training log\n")
    watch = Watch(WatchConfig(logs=(path,), detect_timeout_s=0.0), JobSpec())
    with pytest.raises(InputError, match="matches no training-log kind") as error:
        watch.poll()
    assert str(path) in error.value.render()


DCGM_SCRAPE = """# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="node1"} 100
DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-b",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="node1"} 98
# HELP DCGM_FI_PROF_SM_ACTIVE Ratio of cycles an SM has at least 1 warp assigned.
# TYPE DCGM_FI_PROF_SM_ACTIVE gauge
DCGM_FI_PROF_SM_ACTIVE{gpu="0",UUID="GPU-a",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",hostname="node1"} 0.91
"""


def test_dcgm_activity_beside_mfu_from_a_file_and_an_endpoint(tmp_path: Path) -> None:
    import http.server
    import threading

    scrape = tmp_path / "dcgm.prom"
    scrape.write_text(DCGM_SCRAPE)
    _, text = _watch(tmp_path, megatron(10, 10), job_name="llama", dcgm=str(scrape))
    assert 'mfukit_gpu_utilization{gpu="1",hostname="node1",job="llama"} 0.98' in text
    assert 'mfukit_gpu_sm_active{gpu="0",hostname="node1",job="llama"} 0.91' in text
    assert "mfukit_gpu_tensor_active{" not in text  # not served by this exporter: absent

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(DCGM_SCRAPE.encode())

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
        _, text = _watch(tmp_path, megatron(10, 10), job_name="llama", dcgm=url)
    finally:
        server.shutdown()
        server.server_close()
    assert 'mfukit_gpu_sm_active{gpu="0",hostname="node1",job="llama"} 0.91' in text
    watch, text = _watch(tmp_path, megatron(10, 10), dcgm=str(tmp_path / "missing.prom"))
    assert "mfukit_gpu_sm_active{" not in text and "missing.prom" in watch.warnings[0]  # type: ignore[attr-defined]


def test_layout_from_the_megatron_log_gives_the_expected_mfu(tmp_path: Path) -> None:
    from mfukit.diagnose.given import job

    known = job(DATA / "watch" / "llama3-70b_h100x1024_tp8pp4.toml", {})
    path = tmp_path / "job.log"
    path.write_text(
        "using world size: 1024, data-parallel size: 32, context-parallel size: 1, hierarchical "
        "context-parallel sizes: None, tensor-model-parallel size: 8, pipeline-model-parallel size: 4\n"
        + megatron(10, 0, ms=20_000.0)
        + "\n"
    )
    without_layout = JobSpec(known.model, known.training, None, known.cluster)
    watch = Watch(WatchConfig(logs=(path,)), without_layout)
    assert watch.logs[0].state.expected_value is None  # no layout yet: no performance-model MFU
    watch.poll()
    text = generate_latest(watch.registry()).decode()
    expected = _sample(text, "mfukit_expected_mfu") or 0
    assert expected > 0
    # the performance model's 80 % interval travels with it
    assert (
        (_sample(text, "mfukit_expected_mfu_low") or 1)
        <= expected
        <= (_sample(text, "mfukit_expected_mfu_high") or 0)
    )
    assert 'expected_basis="' in text
    assert (_sample(text, "mfukit_mfu") or 0) > 0


def test_a_timed_save_is_counted_once(tmp_path: Path) -> None:
    _, text = _watch(
        tmp_path,
        megatron(10, 10),
        "saving checkpoint at iteration       10 to /ckpt",
        "  successfully saved checkpoint at iteration       10 to /ckpt",
        "(min, max) time across ranks (ms):",
        "    save-checkpoint ................................: (3900.00, 4000.00)",
        megatron(20, 24),
    )
    assert _sample(text, "mfukit_checkpoint_stall_seconds_total") == pytest.approx(4.0)  # the timer's
    assert _sample(text, "mfukit_log_interval_steps") == 10


def test_first_logged_step_says_no_log_interval(tmp_path: Path) -> None:
    _, text = _watch(tmp_path, megatron(10, 10))
    assert _sample(text, "mfukit_log_interval_steps") is None


def test_a_long_backlog_is_read_over_several_polls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mfukit.watch import follow

    monkeypatch.setattr(follow, "MAX_READ_BYTES", 64)
    monkeypatch.setattr(follow, "READ_CHUNK_BYTES", 32)
    path = tmp_path / "train.log"
    path.write_text("".join(f"line {i:04d}\n" for i in range(100)))  # 1,000 bytes
    follower = Follower(path)
    first = texts(follower)
    assert 0 < len(first) < 100
    read = list(first)
    while len(read) < 100:
        read.extend(texts(follower))
    assert read == [f"line {i:04d}" for i in range(100)]


def test_dashboard_is_importable() -> None:
    import json

    dashboard = json.loads(
        (Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "mfukit.json").read_text()
    )
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert (
        variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    )
    assert isinstance(dashboard["schemaVersion"], int) and dashboard["title"] and dashboard["uid"]
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    titles = " ".join(panel["title"] for panel in dashboard["panels"]).lower()
    for wanted in (
        "mfu against expected",
        "tokens per second",
        "step time",
        "goodput",
        "restarts",
        "since the last step",
    ):
        assert wanted in titles
    for panel in dashboard["panels"]:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert set(panel["gridPos"]) == {"h", "w", "x", "y"} and panel["targets"]
        assert all(target["expr"] and target["refId"] for target in panel["targets"])
