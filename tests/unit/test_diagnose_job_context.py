"""The "22 % MFU on 128 A100s" page, diagnosed from what the job left behind (tests/data/diagnose/cases/):
a Megatron-LM stdout (argument dump, iteration lines with TFLOP/s, timers, memory report), an NCCL_DEBUG=INFO
log that says NET/Socket, and an nvidia-smi CSV with one throttled GPU; once with the argument dump, once
with the job described by flags only."""

from __future__ import annotations

from pathlib import Path

import pytest

from mfukit.diagnose.engine import Diagnosis, diagnose
from mfukit.diagnose.given import job
from mfukit.diagnose.records import StepRecord
from mfukit.diagnose.sources import launch_config, training_log

CASES = Path(__file__).parents[1] / "data" / "diagnose" / "cases"
FLAGS = {"model.preset": "llama2-13b", "cluster.gpu": "a100-80gb-sxm", "cluster.num_gpus": 128,
         "training.seq_len": 4096, "training.global_batch_size": 512, "parallelism.tp": 4,
         "parallelism.pp": 2, "parallelism.sequence_parallel": True, "parallelism.recompute": "selective",
         "parallelism.zero": 1}  # fmt: skip


@pytest.fixture(scope="module")
def from_dump() -> Diagnosis:
    return diagnose([CASES / "megatron_a100x128"], **job(None, {})._asdict())


@pytest.fixture(scope="module")
def from_flags() -> Diagnosis:
    return diagnose([CASES / "megatron_a100x128_flags"], **job(None, FLAGS)._asdict())


def origin(result: Diagnosis, name: str) -> tuple[object, str, str]:
    found = next(p for p in result.provenance if p.name == name)
    return found.value, found.origin, found.where


def test_the_argument_dump_describes_the_job(from_dump: Diagnosis) -> None:
    assert origin(from_dump, "seq_len")[:2] == (4096, "log")
    assert "seq_length" in origin(from_dump, "seq_len")[2]
    for name, value in (("tp", 4), ("pp", 2), ("dp", 16), ("global_batch_size", 512), ("micro_batch_size", 1),
                        ("zero", 1), ("sequence_parallel", True), ("recompute", "selective"),
                        ("precision", "bf16"), ("num_gpus", 128), ("gpu", "a100-80gb-sxm")):  # fmt: skip
        assert origin(from_dump, name)[:2] == (value, "log"), name
    assert "use_distributed_optimizer" in origin(from_dump, "zero")[2]
    assert "NVIDIA A100-SXM4-80GB" in origin(from_dump, "gpu")[2]
    assert origin(from_dump, "model")[1] == "log" and "num_layers" in origin(from_dump, "model")[2]
    assert not from_dump.job_warnings  # nothing that moves the answer was a default


def test_mfu_is_22_percent_with_the_logged_sequence_length(
    from_dump: Diagnosis, from_flags: Diagnosis
) -> None:
    for result in (from_dump, from_flags):
        assert result.mfu.measured == pytest.approx(0.22, abs=0.01)
        assert (
            result.expected.basis == "performance_model"
        )  # the layout that ran fits: no "cannot be what ran"
        assert result.expected.layout_problem is None
        assert result.expected.value is not None and 0.3 < result.expected.value < 0.65
    # the shape read from the dump is Llama-2 13B's: the same FLOPs, so the same MFU as with --model llama2-13b
    assert from_dump.mfu.measured == pytest.approx(from_flags.mfu.measured, rel=0.01)


def test_findings_are_costed_ranked_and_capped(from_dump: Diagnosis, from_flags: Diagnosis) -> None:
    for result in (from_dump, from_flags):
        causes = [f for f in result.findings if f.impact.step_fraction is not None and f.explained_by is None]
        assert [f.id for f in causes[:2]] == ["nccl_socket_fallback", "gpu_throttling"]
        costs = [f.impact.step_fraction for f in causes]
        assert costs == sorted(costs, reverse=True)
        socket, throttling = causes[0], causes[1]
        assert result.top is socket and socket.severity == "error"
        # priced by the performance model of the layout on sockets vs the node's 8 HDR NICs
        assert socket.details["socket_step_s"] > socket.details["fabric_step_s"]
        assert "dp_comm" in socket.details["added_s_by_part"]  # type: ignore[operator]
        assert any("all-grads-sync" in e.what for e in socket.evidence)
        # Megatron's all-grads-sync timer is the socket fallback's symptom, not a second cost
        sync = next(f for f in result.findings if f.id == "exposed_gradient_sync")
        assert sync.explained_by == "nccl_socket_fallback" and sync.mfu_after_fix is None
        # the measured sync stands for the model's DP traffic over sockets; the model's own figure is said
        assert "timer measured" in socket.impact.basis and "the model alone" in socket.impact.basis
        assert socket.impact.step_fraction >= sync.impact.step_fraction  # type: ignore[operator]
        assert 0.1 < socket.impact.step_fraction < 0.6  # type: ignore[operator]
        assert socket.impact.gpu_hours_per_day == pytest.approx(socket.impact.step_fraction * 128 * 24)
        # one GPU at ~80 % clock stretches the model's compute, not the whole step
        assert 0.03 < throttling.impact.step_fraction < socket.impact.step_fraction  # type: ignore[operator]
        expected = result.expected.value
        assert expected is not None and result.mfu.measured is not None
        for finding in causes:
            assert finding.mfu_after_fix is not None
            assert result.mfu.measured < finding.mfu_after_fix <= expected


def test_the_socket_fallback_fails_the_network_gate(from_dump: Diagnosis) -> None:
    gate = next(g for g in from_dump.gates if g.id == "network")
    assert gate.status == "fail" and gate.value_text == "NET/Socket" and "16 nodes" in gate.why


def test_no_host_is_made_from_a_file_name(from_dump: Diagnosis) -> None:
    throttling = next(f for f in from_dump.findings if f.id == "gpu_throttling")
    text = " ".join(
        throttling.fix + [throttling.summary, throttling.title] + [e.gpu or "" for e in throttling.evidence]
    )
    assert "nodename=nvidia-smi" not in text and "nodename=node007" not in text
    assert "node007" not in text.replace("nvidia-smi_node007.csv", "")  # only as the file's name
    assert "nvidia-smi -L | grep -q GPU-" in throttling.fix[0]  # found by its UUID, then drained


def test_flags_only_says_which_values_are_defaults(from_flags: Diagnosis) -> None:
    assert origin(from_flags, "seq_len")[:2] == (4096, "flag")
    assert origin(from_flags, "dp")[:2] == (16, "derived")
    assert origin(from_flags, "precision")[:2] == ("bf16", "default")
    assert any(w.startswith("precision = bf16 is a default") for w in from_flags.job_warnings)


def test_a_default_sequence_length_is_a_warning() -> None:
    flags = {k: v for k, v in FLAGS.items() if k != "training.seq_len"}
    result = diagnose([CASES / "megatron_a100x128_flags"], **job(None, flags)._asdict())
    assert origin(result, "seq_len")[:2] == (2048, "default")
    assert any(w.startswith("seq_len = 2048 is a default") for w in result.job_warnings)


def test_one_line_at_a_time() -> None:
    """The per-line readers `mfukit watch` can call as a log grows."""
    line = (" [2026-11-20 02:39:22] iteration       10/  250000 | consumed samples:         5120 | elapsed time "
            "per iteration (ms): 20843.2 | throughput per GPU (TFLOP/s/GPU): 64.5 | global batch size:   512 |")  # fmt: skip
    record = training_log.read_line("megatron", line)
    assert isinstance(record, StepRecord) and record.step_time_s == pytest.approx(20.8432)
    assert record.tflops_per_gpu == 64.5
    reader = launch_config.ConfigReader()
    assert launch_config.read_line(reader, 1, "using world size: 128, data-parallel-size: 16, tensor-model-parallel "
                                   "size: 4, pipeline-model-parallel size: 2 ")["dp"].value == 16  # fmt: skip


def test_a_count_run_into_the_next_line_is_said_and_skipped(tmp_path: Path) -> None:
    """A DeepSpeed config echo whose train_batch_size line was cut and run into the next: the batch is not
    that text (nor a crash), the line is named, and the intact echo further down is what counts."""
    prefix = "[2026-11-18 11:06:40,000] [INFO] [config.py:1003:print]  "
    echo = [f"{prefix} DeepSpeedEngine configuration:", f"{prefix} train_batch_size  gradient_clipping ..... 1.0",
            f"{prefix} train_batch_size ............. 256"]  # fmt: skip
    reader = launch_config.ConfigReader()
    for number, line in enumerate(echo, start=1):
        reader.feed(number, line)
    assert (
        reader.settings["global_batch_size"].value == 256 and reader.settings["global_batch_size"].line == 3
    )
    assert len(reader.unread) == 1 and reader.unread[0].startswith("line 2: global_batch_size reads")
    log = tmp_path / "rank0.log"
    log.write_text("\n".join(echo[:2]) + "\n")
    config = launch_config.parse(log)[0]
    assert "global_batch_size" not in config.settings and "not a whole number" in config.unread[0]


DEEPSPEED_FLAGS = {"model.preset": str(CASES / "llama2-7b.config.json"), "cluster.gpu": "h100-sxm"}


@pytest.fixture(scope="module")
def deepspeed() -> Diagnosis:
    """Llama-2 7B (an HF config.json given with --model) under DeepSpeed ZeRO-2 on 32 H100s; the size, batch,
    precision, ZeRO stage and sequence length all come from its log (config echo, flops profiler, launcher)."""
    return diagnose([CASES / "deepspeed_h100x32"], **job(None, DEEPSPEED_FLAGS)._asdict())


@pytest.fixture(scope="module")
def torchtitan() -> Diagnosis:
    """torchtitan Llama 3 8B on 64 H100s with FSDP and blocking checkpoint saves; nothing given but the log."""
    return diagnose([CASES / "torchtitan_h100x64"], **job(None, {})._asdict())


def test_deepspeed_log_is_read(deepspeed: Diagnosis) -> None:
    assert deepspeed.inputs[0]["kind"] == "training_log+launch_config"
    for name, value, where in (("global_batch_size", 256, "train_batch_size"), ("micro_batch_size", 2, ""),
                               ("precision", "bf16", "bfloat16_enabled"), ("zero", 2, "zero_optimization_stage"),
                               ("num_gpus", 32, "world_size"), ("seq_len", 4096, "--max_seq_len 4096")):  # fmt: skip
        found = origin(deepspeed, name)
        assert found[:2] == (value, "log") and where in found[2], name
    assert origin(deepspeed, "model")[1] == "flag"
    assert not deepspeed.job_warnings
    # 256 samples/s / CurrSamplesPerSec: the ThroughputTimer's step, at ~30 % MFU against ~46 % expected
    assert deepspeed.mfu.measured == pytest.approx(0.295, abs=0.01)
    assert deepspeed.mfu.step_time_s == pytest.approx(5.17, abs=0.05)
    assert deepspeed.expected.basis == "performance_model"


def test_deepspeed_exposed_allreduce_is_the_cost(deepspeed: Diagnosis) -> None:
    top = deepspeed.top
    assert top is not None and top.id == "exposed_gradient_sync"
    assert "overlap_comm" in top.fix[0]
    sync = top.details["sync_s"]
    assert sync == pytest.approx(1.61, abs=0.05)
    step = deepspeed.mfu.step_time_s
    assert step is not None and top.impact.step_fraction == pytest.approx(
        (sync - top.details["modelled_exposed_s"]) / step  # type: ignore[operator]
    )
    assert deepspeed.expected.value is not None and deepspeed.mfu.measured is not None
    assert (
        top.mfu_after_fix is not None
        and deepspeed.mfu.measured < top.mfu_after_fix <= deepspeed.expected.value
    )


def test_torchtitan_log_is_read(torchtitan: Diagnosis) -> None:
    for name, value in (("seq_len", 8192), ("num_gpus", 64), ("gpu", "h100-sxm"), ("fsdp", "full"),
                        ("recompute", "selective"), ("precision", "bf16"), ("global_batch_size", 64),
                        ("model", "llama3.1-8b")):  # fmt: skip
        assert origin(torchtitan, name)[:2] == (value, "log"), name
    assert origin(torchtitan, "dp")[:2] == (64, "derived")
    assert not torchtitan.job_warnings
    assert torchtitan.expected.basis == "performance_model"


def test_torchtitan_checkpoint_stalls_are_the_cost(torchtitan: Diagnosis) -> None:
    """Saves of ~94 s every 100 steps of ~1.55 s: ~38 % of the wall time; the log's own tps dips after each."""
    top = torchtitan.top
    assert top is not None and top.id == "checkpoint_stall"
    assert top.details["stall_s_per_save"] == pytest.approx(94, abs=4)
    assert top.impact.step_fraction == pytest.approx(94 / (94 + 155), abs=0.03)
    measured, expected = torchtitan.mfu.measured, torchtitan.expected.value
    assert measured is not None and expected is not None
    assert measured == pytest.approx(0.31 * (1 - 94 / (94 + 155)), abs=0.015)  # over the whole window
    assert top.mfu_after_fix is not None and measured < top.mfu_after_fix <= expected
    storage = next(g for g in torchtitan.gates if g.id == "storage")
    assert storage.status == "fail"
    # a 94 s save every 100 steps of ~1.55 s on 64 GPUs: far more often than Young's optimum
    failure = next(g for g in torchtitan.gates if g.id == "failure_rate")
    assert failure.status == "fail" and failure.value is not None and failure.value < 0.5


NEMO = """[NeMo I 2026-11-20 01:02:03 exp_manager:396] Experiments will be logged at /results/llama
[NeMo I 2026-11-20 01:02:04 megatron_gpt_pretraining:38]
    name: megatron_llama
    trainer:
      devices: 8
      num_nodes: 4
      precision: bf16-mixed
    model:
      micro_batch_size: 1
      global_batch_size: 256
      tensor_model_parallel_size: 2
      pipeline_model_parallel_size: 2
      sequence_parallel: true
      encoder_seq_length: 4096
      activations_checkpoint_granularity: selective
      optim:
        name: distributed_fused_adam
"""


def test_nemo_config_is_read(tmp_path: Path) -> None:
    """NeMo logs its Hydra config as YAML under its ``[NeMo I`` prefix."""
    path = tmp_path / "nemo.log"
    path.write_text(NEMO)
    (config,) = launch_config.parse(path)
    values = {key: setting.value for key, setting in config.settings.items()}
    assert config.framework == "nemo"
    assert values == {"precision": "bf16-mixed", "micro_batch_size": 1, "global_batch_size": 256, "tp": 2,
                      "pp": 2, "sequence_parallel": True, "seq_len": 4096, "recompute": "selective",
                      "distributed_optimizer": True}  # fmt: skip
    assert config.settings["seq_len"].line == 14


def test_the_memory_report_is_shown(from_dump: Diagnosis) -> None:
    """Megatron's `[Rank r] (after k iterations) memory (MB) | ... | max reserved: M`: the largest."""
    value, kind, where = origin(from_dump, "max_reserved_memory_bytes")
    assert value == pytest.approx(45116.0 * 2**20) and kind == "log" and "max reserved" in where
