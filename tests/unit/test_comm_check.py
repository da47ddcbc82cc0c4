"""The nccl-tests judge on real and synthetic runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from mfukit import catalog
from mfukit.comm.check import check_run
from mfukit.comm.nccl_tests import parse_nccl_tests
from mfukit.comm.topology import CommTopology, from_system
from mfukit.errors import InputError

DATA = Path(__file__).parents[1] / "data" / "comm"


def topology(name: str, nodes: int) -> CommTopology:
    system = catalog.system(name)
    return from_system(system, catalog.accelerator(system.accelerator), num_nodes=nodes)[0]


def run(relative: str, hint: bool = True):  # type: ignore[no-untyped-def]
    path = DATA / relative
    return parse_nccl_tests(path.read_text(), name_hint=path.name if hint else None)


def ids(report) -> set[str]:  # type: ignore[no-untyped-def]
    return {f.id for f in report.findings}


def test_healthy_a100_node() -> None:
    report = check_run(run("superbench/nccl_allreduce.txt"), topology("dgx-a100-80gb", 1))
    assert report.verdict == "ok" and not report.negative
    assert report.peak_busbw_bytes_per_s == pytest.approx(235.26e9, rel=1e-4)
    assert report.expected_peak_busbw_bytes_per_s == pytest.approx(240e9, rel=0.01)
    assert all(v.status == "ok" for v in report.sizes)
    assert {"nccl_tests_avg_not_peak", "nccl_tests_latency_floor"} <= ids(report)
    assert report.latency_floor_s == pytest.approx(34.05e-6, rel=0.02)


def test_socket_fallback_run_is_slow() -> None:
    report = check_run(run("aws_do_eks/karpenter_block1_L169.txt"), topology("dgx-a100-80gb", 2), num_nodes=2)
    assert report.verdict == "slow" and report.negative
    assert "low_busbw" in ids(report)
    assert report.peak_ratio == pytest.approx(2.03 / 24.0, rel=0.02)
    big = [v for v in report.sizes if v.size_bytes >= 2**24]
    assert big and all(v.status == "slow" for v in big)


def test_wrong_results_are_broken() -> None:
    report = check_run(run("synthetic/wrong_results_8x_h100.txt"), topology("dgx-h100", 1))
    assert report.verdict == "broken"
    assert [v.size_bytes for v in report.sizes if v.status == "broken"] == [2**28, 2**30]
    assert "nccl_tests_wrong_results" in ids(report)


def test_one_rank_communicators() -> None:
    report = check_run(run("synthetic/single_rank_no_mpi_2_nodes.txt"), topology("dgx-h100", 2))
    assert report.verdict == "broken" and report.num_ranks == 1 and report.num_nodes == 2
    finding = next(f for f in report.findings if f.id == "nccl_tests_single_rank")
    assert "MPI=1" in finding.fix


def test_two_node_tree_above_the_nic_limit() -> None:
    report = check_run(run("synthetic/error_column_nvlstree_2x8_h100.txt"), topology("dgx-h100", 2))
    assert "nccl_tests_above_nic_limit" in ids(report)
    assert report.nic_limit_bytes_per_s == pytest.approx(8 * 50e9 * 0.96)
    assert report.peak_busbw_bytes_per_s > report.nic_limit_bytes_per_s


def test_ring_run_is_judged_against_ring_and_nvls_is_reported_apart() -> None:
    report = check_run(run("synthetic/current_2025_allreduce_2x8_h100.txt"), topology("dgx-h100", 2))
    assert report.verdict == "ok"
    assert "nccl_tests_no_nvls" in ids(report)
    assert report.expected_peak_busbw_bytes_per_s == pytest.approx(370.8e9, rel=0.01)


def test_nccl_algo_in_the_output_sets_the_expectation() -> None:
    text = (DATA / "synthetic/current_2025_allreduce_2x8_h100.txt").read_text()
    text = text.replace(
        "#  Rank  0 Group",
        "gpu-a:1:1 [0] NCCL INFO NCCL_ALGO set by environment to Ring\n#  Rank  0 Group",
        1,
    )
    parsed = parse_nccl_tests(text)
    assert parsed.nccl_env == {"NCCL_ALGO": "Ring"}
    report = check_run(parsed, topology("dgx-h100", 2))
    assert "nccl_tests_no_nvls" not in ids(report)
    assert {v.algorithm for v in report.sizes} == {"ring"}


def test_more_ranks_per_node_than_gpus_is_an_input_error() -> None:
    text = (DATA / "synthetic/current_2025_allreduce_2x8_h100.txt").read_text().replace("gpu-b", "gpu-a")
    with pytest.raises(InputError):  # 16 ranks on the one host the device list names
        check_run(parse_nccl_tests(text), topology("dgx-h100", 1))
    without_devices = "\n".join(line for line in text.splitlines() if " Rank " not in line)
    with pytest.raises(InputError):  # no device list: --gpus 16 over --nodes 1
        check_run(parse_nccl_tests(without_devices), topology("dgx-h100", 1), num_nodes=1, num_ranks=16)


def test_the_device_lists_hosts_overrule_nodes() -> None:
    """8 ranks on one host ('box'), judged as if spread over 2 nodes, made a false above-NIC-limit finding:
    every rank's line names its host, so the file's count is the one judged, with a warning."""
    one_host = run("synthetic/gist_collapsed_allreduce_8x_a100.txt")
    report = check_run(one_host, topology("dgx-h100", 1), num_nodes=2)
    assert report.num_nodes == 1 and report.num_ranks == 8
    assert "nccl_tests_above_nic_limit" not in ids(report)
    assert any("shows 1 host(s) (box)" in w and "judged as 1 host(s)" in w for w in one_host.warnings)
    two_hosts = run("synthetic/current_2025_allreduce_2x8_h100.txt")
    assert check_run(two_hosts, topology("dgx-h100", 2), num_nodes=1).num_nodes == 2
