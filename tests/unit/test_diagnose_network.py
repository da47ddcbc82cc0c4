"""The network in a diagnosis: nccl-tests and NCCL-log sources, comm's judges as findings, their cost, the
network gate on the gradient traffic, and the failure-rate gate on ft's failure model."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from diagnose_support import load_cases

from mfukit import catalog
from mfukit.catalog import resolve
from mfukit.diagnose.engine import Diagnosis, diagnose
from mfukit.diagnose.given import job
from mfukit.diagnose.parsing import parse_files
from mfukit.diagnose.sources import detect
from mfukit.ft.failures import job_failures, load_failure_model
from mfukit.ft.interval import young_interval_s
from mfukit.perf.flops import model_flops_per_token

COMM = Path(__file__).parents[1] / "data" / "comm"
CASES = load_cases()
H100_PAIR = {  # the job the synthetic nccl-tests run was made for: 2 DGX H100
    "model.preset": "llama2-7b",
    "cluster.system": "dgx-h100",
    "cluster.num_gpus": 16,
    "training.seq_len": 4096,
    "training.global_batch_size": CASES.GLOBAL_BATCH,
}


def step_at(mfu: float, num_gpus: int) -> float:
    """Step time of the H100 pair's job (the log's 512 x 4096 tokens) at ``mfu``."""
    model = resolve.model_spec({"preset": "llama2-7b"}, source="test")
    tokens = CASES.GLOBAL_BATCH * 4096
    return (
        tokens
        * model_flops_per_token(model, 4096)
        / (num_gpus * catalog.accelerator("h100-sxm").peak_flops("bf16") * mfu)
    )


def slowed(tmp_path: Path, factor: float) -> Path:
    """The healthy 2x8 H100 all_reduce run with every time multiplied by ``factor`` (and bandwidths divided)."""
    lines = []
    for line in (COMM / "synthetic" / "current_2025_allreduce_2x8_h100.txt").read_text().splitlines():
        tokens = line.split()
        if len(tokens) == 13 and tokens[0].isdigit():
            for index in (5, 9):
                tokens[index] = f"{float(tokens[index]) * factor:.2f}"
            for index in (6, 7, 10, 11):
                tokens[index] = f"{float(tokens[index]) / factor:.2f}"
            line = "  ".join(tokens)
        lines.append(line)
    path = tmp_path / f"all_reduce_x{factor:g}.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def run(paths: list[Path], flags: dict[str, object]) -> Diagnosis:
    return diagnose(paths, **job(None, flags)._asdict())


def test_a_file_feeds_every_source_that_reads_it(tmp_path: Path) -> None:
    both = COMM / "aws_do_eks" / "eks-efa_block1_L469.txt"
    assert [s.kind for s in detect(both)] == ["nccl_tests", "nccl_log"]
    assert [s.kind for s in detect(COMM / "synthetic" / "ib_no_gdr_two_rails_2x8.log")] == ["nccl_log"]
    log = tmp_path / "train.log"
    CASES.megatron_log(log, 1.0, iterations=30)
    nccl = (COMM / "synthetic" / "socket_fallback_2x1.log").read_text()
    log.write_text(nccl + log.read_text())
    assert [s.kind for s in detect(log)] == ["training_log", "nccl_log"]
    ((_, kind, records, error),) = parse_files([log])
    assert kind == "training_log+nccl_log" and error is None
    assert {type(r).__name__ for r in records} == {"TrainingLog", "NcclLog"}
    assert detect(COMM / "synthetic" / "current_2025_allreduce_2x8_h100.json")[0].kind == "nccl_tests"


def test_log_findings_keep_comm_texts_and_merge_across_files(tmp_path: Path) -> None:
    text = (COMM / "synthetic" / "ib_no_gdr_two_rails_2x8.log").read_text()
    for name in ("node-a.log", "node-b.log"):
        (tmp_path / name).write_text(text)
    found = run([tmp_path], {"cluster.system": "dgx-h100", "cluster.num_gpus": 16})
    rails = [f for f in found.findings if f.id == "nccl_missing_rails"]
    assert len(rails) == 1 and "seen in 2 files" in rails[0].summary
    assert "NCCL_IB_HCA" in rails[0].fix[0] and "2 of 8 NICs" in rails[0].evidence[0].what
    gdr = next(f for f in found.findings if f.id == "nccl_no_gdr")
    assert gdr.explained_by is None and "nvidia-peermem" in gdr.fix[0]
    assert found.top is not None and found.top.id == "nccl_missing_rails"  # the root: rails before GDR


def test_slow_nccl_tests_cost_the_step_through_the_gradient_traffic(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    CASES.megatron_log(log, step_at(0.4, 16), iterations=100)
    healthy = run([COMM / "synthetic" / "current_2025_allreduce_2x8_h100.txt", log], H100_PAIR)
    slow = run([slowed(tmp_path, 8.0), log], H100_PAIR)
    assert not any(f.id == "low_busbw" for f in healthy.findings)
    low = next(f for f in slow.findings if f.id == "low_busbw")
    assert low.severity == "error" and low.impact.step_fraction and low.impact.step_fraction > 0
    assert low.mfu_after_fix is not None and slow.mfu.measured is not None
    assert low.mfu_after_fix > slow.mfu.measured
    gate_healthy = next(g for g in healthy.gates if g.id == "network")
    gate_slow = next(g for g in slow.gates if g.id == "network")
    assert "nccl-tests all_reduce peak busbw, 16 ranks on 2 node(s)" in gate_healthy.why
    # the same traffic and window: the ratio scales with 1 / busbw, 8x slower is 8x the ratio
    assert gate_healthy.value and gate_slow.value
    assert gate_slow.value / gate_healthy.value == pytest.approx(8.0, rel=0.02)


def test_no_cluster_means_not_judged_not_silence() -> None:
    found = run([COMM / "synthetic" / "current_2025_allreduce_2x8_h100.txt"], {})
    note = next(f for f in found.findings if f.id == "degraded_input" and "nccl-tests" in f.title)
    assert "no cluster given" in note.summary and "--system" in note.fix[0]
    gate = next(g for g in found.gates if g.id == "network")
    assert gate.status == "unknown" and "1 nccl-tests run(s)" in gate.why


def test_failure_gate_takes_ft_preset_and_young(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    step = step_at(0.4, 128)
    CASES.megatron_log(log, step, iterations=200, save_every=50, save_s=60.0)
    flags = {k: v for k, v in H100_PAIR.items()} | {"cluster.num_gpus": 128}
    found = run([log], flags)
    gate = next(g for g in found.gates if g.id == "failure_rate")
    preset = job_failures(load_failure_model("llama3", source="test"), num_gpus=128, num_nodes=16)
    save = next(f for f in found.findings if f.id == "checkpoint_stall").details["stall_s_per_save"]
    optimum = young_interval_s(float(save), preset.mtbf_s)  # type: ignore[arg-type]
    assert "failure model llama3" in gate.why
    assert gate.value == pytest.approx(50 * step / optimum, rel=0.02)
    assert math.isfinite(preset.mtbf_s) and gate.status in ("pass", "fail")
