"""mfukit's own artifacts as diagnosis input: ``mfukit train``'s run directory (metrics.jsonl, the goodput
ledger) and ``mfukit bench`` JSON results (matmul, collectives, checkpoint).

The train run and the CPU bench results in ``tests/data/diagnose/mfukit`` were measured on the CI machine
(LICENSES.md); GPU bench results are written here from stated numbers, since no GPU ran them."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import pytest

from mfukit import catalog
from mfukit.catalog import resolve
from mfukit.core.scenario import ClusterSection, TrainingSection
from mfukit.diagnose import mfu as mfu_module
from mfukit.diagnose.engine import Diagnosis, diagnose
from mfukit.diagnose.parsing import collect
from mfukit.diagnose.records import NcclTestsResult, TrainLedger
from mfukit.diagnose.sources import training_log
from mfukit.ft.interval import young_interval_s
from mfukit.perf.efficiency import efficiency_for, large_gemm_fraction
from mfukit.perf.flops import model_flops_per_token, utilization

DATA = Path(__file__).parents[1] / "data"
RUN = DATA / "diagnose" / "mfukit" / "train_run"
BENCH = DATA / "diagnose" / "mfukit" / "bench"
MICRO = resolve.model_spec(
    {
        "name": "micro",
        "num_hidden_layers": 2,
        "hidden_size": 32,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 64,
        "vocab_size": 128,
        "max_position_embeddings": 16,
    },
    source="test",
)  # fmt: skip  (tests/data/train/micro.toml, the scenario the fixture run trained)


def metrics() -> list[dict[str, Any]]:
    return [json.loads(line) for line in (RUN / "metrics.jsonl").read_text().splitlines()]


def test_train_metrics_are_read_as_train_writes_them() -> None:
    (log,) = training_log.parse(RUN / "metrics.jsonl")
    written = metrics()
    assert log.framework == "mfukit-jsonl" and len(log.steps) == len(written)
    # the drill killed rank 1 before step 7: steps 5 and 6 ran twice; the redo is rework, not progress
    assert [s.step for s in log.steps] == [1, 2, 3, 4, 5, 6, 5, 6, 7, 8, 9, 10, 11, 12]
    assert sum(s.interval_steps for s in log.steps) == 12
    first_of_restart = log.steps[6]
    assert first_of_restart.wall_s is None  # the restart's gap is the ledger's, not a stall
    assert [s.wall_s for s in log.steps[:6]] == [w["t_end"] for w in written[:6]]
    # tokens_per_s is the whole job's on both sides: train writes global batch tokens / step time
    for record, line in zip(log.steps, written, strict=True):
        assert record.tokens_per_s == pytest.approx(line["tokens"] / line["step_time_s"])
        assert record.data_time_s == line["data_time_s"] < line["step_time_s"]
    # the saves come from the ledger beside it
    assert [(e.kind, e.step) for e in log.events] == [
        ("checkpoint", 4),
        ("checkpoint", 8),
        ("checkpoint", 12),
    ]


def test_mfu_from_train_tokens_per_s_is_trains_own() -> None:
    """diagnose's MFU from train's tokens/s (divided by the GPUs, as a job total) equals the MFU train wrote
    with the same peak: both sides read ``tokens_per_s`` the same way."""
    (log,) = training_log.parse(RUN / "metrics.jsonl")
    training = TrainingSection.model_validate({"seq_len": 16, "global_batch_size": 4, "precision": "fp32"})
    cluster = resolve.cluster(
        ClusterSection.model_validate({"gpu": "a100-80gb-sxm", "num_gpus": 2}), source="t"
    )
    estimate = mfu_module.measure([log], MICRO, training, cluster)
    peak = catalog.accelerator("a100-80gb-sxm").peak_flops("fp32")
    steady = metrics()[1:]  # the first 10 % of the 14 logged steps (one) is warm-up
    written = statistics.median(line["mfu"] for line in steady) * 10e9 / peak  # train ran at 10 GFLOP/s
    assert estimate.steady_state == pytest.approx(written, rel=1e-9)
    per_token = model_flops_per_token(MICRO, 16)
    assert estimate.steady_state == pytest.approx(
        utilization(per_token, statistics.median(line["tokens_per_s"] for line in steady) / 2, peak), rel=1e-9
    )


def test_the_ledger_decides_the_failure_and_storage_gates() -> None:
    result = diagnose([RUN])
    (ledger,) = [r for r in result.records if isinstance(r, TrainLedger)]
    goodput = ledger.goodput
    assert (goodput.restarts, goodput.saves, ledger.world_size) == (1, 3, 2)
    gates = {g.id: g for g in result.gates}
    failure = gates["failure_rate"]
    mtbf = goodput.training_phase_s / 1
    assert "mfukit train ledger: 1 failure(s)" in failure.why
    assert failure.value == pytest.approx(
        goodput.interval_s / young_interval_s(goodput.blocking_per_save_s, mtbf)  # type: ignore[arg-type,operator]
    )
    storage = gates["storage"]
    assert storage.status == "fail" and "the job's own saves" in storage.why  # 0.1 s saves vs ~20 ms steps


def test_a_run_directory_is_read_for_its_metrics_and_ledger(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "job"
    for name in ("metrics.jsonl", "ledger.jsonl"):
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_text((RUN / name).read_text())
    for internal in (
        "checkpoints/step-00000004/__0_0.distcp",
        "data/tokens.bin",
        "config.json",
        "result.json",
    ):
        (run / internal).parent.mkdir(parents=True, exist_ok=True)
        (run / internal).write_text("{}")
    (run / "logs").mkdir()
    (run / "logs" / "train.log").write_text("torchrun output\n")
    (tmp_path / "runs" / "other.txt").write_text("x")
    names = [p.relative_to(tmp_path).as_posix() for p in collect([tmp_path])]
    assert names == [
        "runs/job/ledger.jsonl",
        "runs/job/logs/train.log",
        "runs/job/metrics.jsonl",
        "runs/other.txt",
    ]


def bench(tmp_path: Path, schema: str, result: dict[str, Any]) -> Path:
    path = tmp_path / f"{schema.split('/')[0]}.json"
    path.write_text(
        json.dumps({"mfukit_version": "0.1.0", "schema": schema, "inputs": {}, "result": result}, indent=2)
    )
    return path


def h100_matmul(tmp_path: Path, fraction_of_peak: float) -> Path:
    peak = catalog.accelerator("h100-sxm").peak_flops("bf16")
    rate = fraction_of_peak * peak
    return bench(tmp_path, "bench.matmul/1", {
        "points": [{"dtype": "bf16", "size": 8192, "time_s": 2 * 8192**3 / rate, "flops_per_s": rate}],
        "peak_flops_per_s": {"bf16": rate},
        "environment": {"device": "cuda", "device_name": "NVIDIA H100 80GB HBM3"},
    })  # fmt: skip


H100_JOB: dict[str, Any] = {
    "cluster": resolve.cluster(ClusterSection.model_validate({"gpu": "h100-sxm", "num_gpus": 64}), source="t")
}


def test_a_slow_gemm_bench_is_judged_against_the_models_assumption(tmp_path: Path) -> None:
    # the bar is what the model's own GEMM curve gives an 8192^3 GEMM, below the curve's asymptote
    h100 = catalog.accelerator("h100-sxm")
    efficiency = efficiency_for(h100)
    assumed = large_gemm_fraction(h100, efficiency, "bf16", 8192)
    assert 0.5 < assumed < efficiency.gemm_peak_fraction
    slow = diagnose([h100_matmul(tmp_path, 0.5 * assumed)], **H100_JOB)
    (finding,) = [f for f in slow.findings if f.id == "low_gemm_throughput"]
    assert finding.details["measured_to_assumed"] == pytest.approx(0.5)
    assert finding.impact.step_fraction is None and finding.severity == "warning"  # no trace: not costed
    assert "nvidia-smi -q -d PERFORMANCE,CLOCK" in finding.fix[0]
    healthy = diagnose([h100_matmul(tmp_path, min(1.0, 1.1 * assumed))], **H100_JOB)
    assert not [f for f in healthy.findings if f.id == "low_gemm_throughput" or "matmul" in f.title]


def test_cpu_bench_results_are_read_but_not_judged_against_a_gpu_cluster() -> None:
    result = diagnose([BENCH], **H100_JOB)
    kinds = {Path(i["file"]).name: i["kind"] for i in result.inputs}
    assert kinds == {name: "mfukit_bench" for name in ("checkpoint.json", "collectives.json", "matmul.json")}
    titles = [f.title for f in result.findings if f.id == "degraded_input"]
    assert any("bench matmul result(s) not judged" in t for t in titles)
    runs = [r for r in result.records if isinstance(r, NcclTestsResult)]
    assert sorted(Path(r.file).name for r in runs) == [
        "collectives.json#all_gather",
        "collectives.json#all_reduce",
    ]
    assert all(r.run is not None and r.problem and "gloo" in r.problem for r in runs)
    assert all(check.report is None for check in result.nccl_checks)


def test_nccl_bench_collectives_go_to_the_nccl_tests_judge(tmp_path: Path) -> None:
    """A bench collectives result from GPUs (here the real superbench 8x A100 table as its all_reduce) is
    judged like the nccl-tests output it prints: ok at 0.98 of the model on a DGX A100 40GB."""
    table = (DATA / "comm" / "superbench" / "nccl_allreduce.txt").read_text()
    path = bench(
        tmp_path, "bench.collectives/1", {"backend": "nccl", "ranks": 8, "nccl_tests": {"all_reduce": table}}
    )
    cluster = resolve.cluster(
        ClusterSection.model_validate({"system": "dgx-a100-40gb", "num_gpus": 8}), source="t"
    )
    result = diagnose([path], cluster=cluster)
    (check,) = result.nccl_checks
    assert check.report is not None and check.report.collective == "all_reduce"
    assert check.report.verdict == "ok"


def test_bench_checkpoint_prices_the_jobs_checkpoint_write(tmp_path: Path) -> None:
    written = json.loads((BENCH / "checkpoint.json").read_text())["result"]
    model = resolve.model_spec({"preset": "llama-7b"}, source="t")
    training = TrainingSection.model_validate({"seq_len": 4096, "global_batch_size": 256})
    result: Diagnosis = diagnose(
        [BENCH / "checkpoint.json"], model=model, training=training, cluster=H100_JOB["cluster"],
        parallelism=None,
    )  # fmt: skip
    storage = next(g for g in result.gates if g.id == "storage")
    # no layout: the storage gate has the write but no step compute (no log, no trace, no model step)
    assert storage.status == "unknown"
    from mfukit.core.parallelism import Parallelism

    result = diagnose([BENCH / "checkpoint.json"], model=model, training=training, cluster=H100_JOB["cluster"],
                      parallelism=Parallelism(tp=2))  # fmt: skip
    storage = next(g for g in result.gates if g.id == "storage")
    # megatron convention, bf16: 14 B/param, one shard per node of the 8 nodes, at the bench's save rate
    write_s = model.total_params() * 14 / 8 / written["save_bytes_per_s"]
    assert storage.value == pytest.approx(write_s / result.expected.step_time_s)  # type: ignore[operator]
    assert "performance model's step" in storage.why and "checkpoint.json" in storage.why


def test_a_damaged_bench_result_or_ledger_is_degraded_input(tmp_path: Path) -> None:
    broken = bench(tmp_path, "bench.matmul/1", {"points": 3})
    ledger = tmp_path / "ledger.jsonl"
    ledger.write_text('{"t": "soon", "kind": "launch", "attempt": -1}\n')
    result = diagnose([broken, ledger])
    (damaged,) = [f for f in result.findings if f.title == "Some inputs were partial or damaged"]
    assert sorted(Path(e.file).name for e in damaged.evidence) == ["bench.matmul.json", "ledger.jsonl"]
    assert any("peak_flops_per_s" in e.what for e in damaged.evidence)
