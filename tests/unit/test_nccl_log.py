"""NCCL_DEBUG=INFO logs into findings with stable ids."""

from __future__ import annotations

from pathlib import Path

from mfukit.comm.nccl_log import analyse_nccl_log

DATA = Path(__file__).parents[1] / "data" / "comm"


def analyse(relative: str, **kwargs):  # type: ignore[no-untyped-def]
    return analyse_nccl_log((DATA / relative).read_text(), **kwargs)


def ids(report) -> list[str]:  # type: ignore[no-untyped-def]
    return [f.id for f in report.findings]


def test_healthy_ib_with_gdr() -> None:
    report = analyse("synthetic/ib_gdr_healthy_2x8.log")
    assert report.findings == [] and report.severity == "ok"
    assert report.versions == ["2.21.5"] and report.networks == ["IB"]
    assert report.num_ranks == 16 and report.gpus_per_host == {"gpu-a": 8, "gpu-b": 8}
    assert report.hcas["gpu-a"] == [f"mlx5_{i}:1" for i in range(8)] and report.link_layers == ["IB"]
    assert report.gdr is True and report.transports["NET/IB/GDRDMA"] == 32
    assert report.transports["P2P/CUMEM"] == 16
    assert report.channels == {"coll": 32, "collnet": 0, "nvls": 16, "p2p": 32}
    assert report.rings == 32 and report.trees and report.nvls_available is True


def test_no_gdr_and_missing_rails() -> None:
    report = analyse("synthetic/ib_no_gdr_two_rails_2x8.log")
    assert ids(report) == ["nccl_no_gdr", "nccl_missing_rails"]
    assert report.gdr is False and report.env["NCCL_IB_HCA"] == "mlx5_0,mlx5_1"
    rails = report.findings[1]
    assert "2 of 8 NICs" in rails.evidence[0] and "NCCL_IB_HCA" in rails.fix


def test_rails_against_the_system() -> None:
    report = analyse("synthetic/ib_gdr_healthy_2x8.log", expected_nics_per_node=10)
    assert ids(report) == ["nccl_missing_rails"]


def test_socket_fallback() -> None:
    report = analyse("synthetic/socket_fallback_2x1.log")
    assert ids(report) == ["nccl_socket_fallback", "nccl_ib_disabled"]
    assert report.severity == "error" and report.ib_missing and report.socket_interfaces == ["eth0"]
    assert report.transports == {"NET/Socket": 4}


def test_shm_instead_of_p2p() -> None:
    report = analyse("synthetic/shm_p2p_level_loc_1x8.log")
    assert ids(report) == ["nccl_shm_transport", "nccl_p2p_disabled"]
    assert report.multi_node is False


def test_ib_error_and_watchdog_timeout() -> None:
    report = analyse("synthetic/ib_error_watchdog_2x8.log")
    assert ids(report) == ["nccl_warnings", "nccl_watchdog_timeout"]
    assert "status=12" in report.findings[0].evidence[0]
    assert "Timeout(ms)=600000" in report.findings[1].evidence[0]


def test_real_efa_log() -> None:
    report = analyse("aws_do_eks/eks-efa_block1_L469.txt")
    assert report.versions == ["2.12.7"] and report.networks == ["AWS Libfabric"]
    assert report.hosts == ["test-nccl-efa-worker-0", "test-nccl-efa-worker-1"] and report.num_ranks == 2
    assert report.transports == {"NET/AWS Libfabric": 8} and report.channels == {"coll": 2, "p2p": 2}
    assert report.findings == []


def test_real_socket_log_needs_to_know_it_spans_nodes() -> None:
    alone = analyse("aws_do_eks/karpenter_block1_L169.txt")
    assert [(f.id, f.severity) for f in alone.findings] == [("nccl_socket_fallback", "warning")]
    spanning = analyse("aws_do_eks/karpenter_block1_L169.txt", num_nodes=2)
    assert [(f.id, f.severity) for f in spanning.findings] == [("nccl_socket_fallback", "error")]
