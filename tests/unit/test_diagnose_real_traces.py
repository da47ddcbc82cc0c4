"""Real public traces: the right finding for each, and warnings (never crashes) for HTA's edge cases."""

from __future__ import annotations

from pathlib import Path

import pytest

from mfukit.diagnose.engine import diagnose

DATA = Path(__file__).parents[1] / "data" / "diagnose"


def test_num_workers_0_is_data_loader_starved() -> None:
    result = diagnose([DATA / "kineto" / "resnet50_num_workers_0.pt.trace.json.gz"])
    assert result.top is not None and result.top.id == "dataloader_stall"
    assert result.top.details["dataloader_fraction"] == pytest.approx(0.30, abs=0.02)
    assert result.top.severity == "error"
    assert any("num_workers" in step for step in result.top.fix)


def test_num_workers_4_has_no_data_loader_stall() -> None:
    result = diagnose([DATA / "kineto" / "resnet50_num_workers_4.pt.trace.json.gz"])
    assert all(f.id != "dataloader_stall" for f in result.findings)
    storage = next(g for g in result.gates if g.id == "storage")
    assert storage.status == "pass"


def test_old_nccl_kernel_names_count_as_communication() -> None:
    result = diagnose([DATA / "hta" / "nccl_data.json.gz"])
    trace = next(r for r in result.records if hasattr(r, "num_comm_kernels"))
    assert trace.num_comm_kernels == 21  # ncclKernel_AllReduce_* and ncclKernel_Broadcast_* (NCCL 2.17)
    assert result.time_breakdown["overall"]["comm_fraction"] > 0  # type: ignore[index]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz", "no GPU kernels"),
        ("rank_non_gpu.json.gz", "no GPU kernels"),
        ("rank_not_found.json.gz", "no rank in distributedInfo"),
        ("distributed_info_not_found.json.gz", "no rank in distributedInfo"),
        ("mtia_inference_rank_0.json.gz", "mtia_ccp_events"),
    ],
)
def test_hta_edge_cases_are_warnings(name: str, expected: str) -> None:
    result = diagnose([DATA / "hta" / name])
    degraded = [e.what for f in result.findings if f.id == "degraded_input" for e in f.evidence]
    assert any(expected in what for what in degraded), degraded
    assert all(f.severity != "error" for f in result.findings)


def test_whole_hta_folder_never_crashes() -> None:
    result = diagnose([DATA / "hta"])
    assert result.inputs and all(i["kind"] != "kineto (unreadable)" for i in result.inputs)
    assert all(f.id != "straggler_rank" for f in result.findings)  # unrelated traces are not one job
