"""Real artifacts diagnosed against the numbers their authors published (tests/golden/diagnose.toml): profiler
traces, a pipeline timeline, and nccl-tests / NCCL_DEBUG output of a socket fallback and of a healthy node."""

from __future__ import annotations

import tomllib
from functools import cache
from pathlib import Path

import pytest

from mfukit.diagnose.engine import Diagnosis, diagnose
from mfukit.diagnose.given import job
from mfukit.diagnose.records import RankTrace
from mfukit.diagnose.report import network
from mfukit.diagnose.sources import kineto, pipeline_timeline
from mfukit.diagnose.whatif import analyse

DATA = Path(__file__).parents[1] / "data"
CASES = tomllib.loads((Path(__file__).parent / "diagnose.toml").read_text())["case"]


@cache
def parsed(path: Path) -> RankTrace:
    return kineto.parse(path)[0]


@cache
def diagnosed(path: Path, system: str | None = None) -> Diagnosis:
    flags = {"cluster.system": system, "cluster.num_nodes": 1} if system else {}
    return diagnose([path], **job(None, flags)._asdict())


def measure(fixture: str, quantity: str, system: str | None = None) -> float:
    path = DATA / fixture
    if quantity.startswith("nccl_"):
        (run,) = network(diagnosed(path, system))["nccl_tests"]
        return float(run[quantity.removeprefix("nccl_")])
    if quantity.startswith("whatif_"):
        ops = pipeline_timeline.parse(path)[0].ops
        assert ops is not None
        found = analyse(ops)
        values = {"whatif_slowdown": found.slowdown, "whatif_last_stage": found.by_stage[max(found.by_stage)],
                  "whatif_ideal_step_s": float(found.ideal_step_s.mean()), "whatif_stage_metric": found.stage_metric,
                  "whatif_worker_metric": found.worker_metric, "whatif_dp_rank_1": found.by_dp_rank[1]}  # fmt: skip
        return values[quantity]
    trace = parsed(path)
    if quantity == "dataloader_fraction":
        return sum(s.dataloader_s for s in trace.steps) / sum(s.duration_s for s in trace.steps)
    if quantity == "median_step_s":
        return trace.median("duration_s")
    raise KeyError(quantity)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_golden(case: dict[str, object]) -> None:
    value = measure(str(case["fixture"]), str(case["quantity"]), case.get("system"))  # type: ignore[arg-type]
    assert value == pytest.approx(case["expected"], abs=case["tolerance"]), case["source"]


def test_straggler_job_names_the_last_stage() -> None:
    found = diagnose([DATA / "diagnose" / "straggler" / "timeline-ST.json.gz"])
    imbalance = next(f for f in found.findings if f.id == "stage_imbalance")
    assert imbalance.details["slowest_stage"] == 3
    assert "last" in imbalance.summary
    assert any("decoder-last-pipeline-num-layers" in step for step in imbalance.fix)


def test_tcp_sockets_are_the_root_cause() -> None:
    """aws-do-eks over TCP: 'NCCL INFO Using network Socket' interleaved with the nccl-tests table."""
    found = diagnosed(DATA / "comm" / "aws_do_eks" / "karpenter_block1_L169.txt")
    assert found.inputs[0]["kind"] == "nccl_tests+nccl_log"
    assert found.top is not None and found.top.id == "nccl_socket_fallback"
    assert any("NCCL_IB_HCA" in step for step in found.top.fix)
    # one host in the log and no device list: it cannot tell whether the run spanned nodes, so a warning
    assert found.top.severity == "warning" and "spans nodes" in found.top.summary


def test_efa_is_not_a_socket_fallback() -> None:
    found = diagnosed(DATA / "comm" / "aws_do_eks" / "eks-efa_block1_L469.txt")
    assert not [f for f in found.findings if f.id.startswith("nccl_") and f.severity != "info"]
    (log,) = network(found)["nccl_logs"]
    assert log["networks"] == ["AWS Libfabric"] and len(log["hosts"]) == 2


def test_a_healthy_a100_node_is_judged_ok() -> None:
    found = diagnose(
        [DATA / "comm" / "superbench"],
        **job(None, {"cluster.system": "dgx-a100-40gb", "cluster.num_nodes": 1})._asdict(),
    )
    runs = network(found)["nccl_tests"]
    assert len(runs) == 6 and {r["verdict"] for r in runs} == {"ok"}
    assert not found.has_errors and found.top is None
    assert not any(f.id == "low_busbw" for f in found.findings)
