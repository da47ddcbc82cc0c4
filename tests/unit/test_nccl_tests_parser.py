"""nccl-tests output of every era, real and synthetic, into NcclTestsRun."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mfukit.comm.nccl_tests import parse_nccl_tests, version_from_code
from mfukit.errors import InputError

DATA = Path(__file__).parents[1] / "data" / "comm"


def parse(relative: str, hint: bool = True):  # type: ignore[no-untyped-def]
    path = DATA / relative
    return parse_nccl_tests(path.read_text(), name_hint=path.name if hint else None)


# Peaks from shared/reference/artifacts/MANIFEST.csv (expected_finding column).
@pytest.mark.parametrize(
    ("name", "collective", "peak_gb_per_s"),
    [
        ("nccl_allgather.txt", "all_gather", 230.07),
        ("nccl_allreduce.txt", "all_reduce", 235.26),
        ("nccl_alltoall.txt", "all_to_all", 226.16),
        ("nccl_broadcast.txt", "broadcast", 234.70),
        ("nccl_reduce.txt", "reduce", 231.28),
        ("nccl_reducescatter.txt", "reduce_scatter", 231.52),
    ],
)
def test_superbench_old_format(name: str, collective: str, peak_gb_per_s: float) -> None:
    run = parse(f"superbench/{name}")
    assert run.collective == collective
    assert run.num_ranks == 8 and run.hosts == ["localhost"]
    assert len(run.rows) == 34
    assert run.peak_busbw_bytes_per_s == pytest.approx(peak_gb_per_s * 1e9)
    assert run.error_column == "max_error" and run.validation is False
    assert run.devices[0].group is None and run.devices[0].bus_id == "0x00"


def test_superbench_all_reduce_footer_is_the_average_not_the_peak() -> None:
    run = parse("superbench/nccl_allreduce.txt")
    assert run.avg_busbw_bytes_per_s == pytest.approx(68.4048e9)
    assert run.out_of_bounds == 0
    first = run.rows[0]
    assert (first.size_bytes, first.count, first.dtype, first.redop, first.root) == (
        0,
        0,
        "float",
        "sum",
        None,
    )


def test_tag_output_and_interleaved_info_efa() -> None:
    run = parse("aws_do_eks/eks-efa_block1_L469.txt")
    assert run.collective == "all_reduce" and run.num_ranks == 2
    assert run.hosts == ["test-nccl-efa-worker-0", "test-nccl-efa-worker-1"]
    assert run.nccl_version == "2.12.7"
    assert len(run.rows) == 31
    assert run.peak_busbw_bytes_per_s == pytest.approx(3.15e9)
    assert run.avg_busbw_bytes_per_s == pytest.approx(1.15327e9)
    assert run.rows[-1].root == -1 and run.rows[-1].in_place is not None


def test_socket_fallback_excerpt_without_device_list() -> None:
    run = parse("aws_do_eks/karpenter_block1_L169.txt")
    assert run.devices == [] and run.num_ranks == 2  # inferred: busbw == algbw for an unrooted reduction
    assert run.peak_busbw_bytes_per_s == pytest.approx(2.03e9)
    assert any("inferred" in w for w in run.warnings)


def test_current_format() -> None:
    run = parse("synthetic/current_2025_allreduce_2x8_h100.txt", hint=False)
    assert run.binary == "all_reduce_perf" and run.collective == "all_reduce"
    assert run.nccl_tests_version == "2.17.6" and run.nccl_version == "2.27.4"
    assert run.num_ranks == 16 and run.hosts == ["gpu-a", "gpu-b"]
    assert run.devices[9].group == 0 and run.devices[9].bus_id == "0000:28:00"
    assert run.header["graph"] == 0 and run.step_kind == "factor"
    assert len(run.rows) == 31 and run.error_column == "wrong_count"
    assert all(r.wrong == 0 for row in run.rows for r in row.results)


def test_json_report_matches_the_text() -> None:
    text = parse("synthetic/current_2025_allreduce_2x8_h100.txt", hint=False)
    report = parse("synthetic/current_2025_allreduce_2x8_h100.json", hint=False)
    assert report.format == "json" and report.collective == "all_reduce"
    assert report.nccl_version == "2.27.4" and report.num_ranks == 16
    assert [r.size_bytes for r in report.rows] == [r.size_bytes for r in text.rows]
    for a, b in zip(report.rows, text.rows, strict=True):
        assert a.best_busbw_bytes_per_s == pytest.approx(b.best_busbw_bytes_per_s, rel=0.01, abs=0.006e9)
    assert report.avg_busbw_bytes_per_s == pytest.approx(text.avg_busbw_bytes_per_s, rel=1e-4)


def test_rows_split_by_nccl_info_are_rejoined() -> None:
    run = parse("synthetic/tagged_split_rows_2x8_h100.txt", hint=False)
    assert len(run.rows) == 11
    split = next(row for row in run.rows if row.size_bytes == 8388608)
    assert split.out_of_place is not None and split.in_place is not None
    assert any("rejoined" in w for w in run.warnings)


def test_markdown_rendering_without_hashes() -> None:
    run = parse("synthetic/gist_collapsed_allreduce_8x_a100.txt")
    assert run.num_ranks == 8 and len(run.rows) == 6
    assert run.avg_busbw_bytes_per_s == pytest.approx(215.4e9)


def test_rccl_broadcast() -> None:
    run = parse("synthetic/rccl_broadcast_8x_mi300x.txt", hint=False)
    assert run.rccl and run.nccl_version == "2.20.5"
    assert run.collective == "broadcast"  # rooted, redop 'none', busbw == algbw
    assert run.rows[0].redop == "none" and run.rows[0].root == 0


def test_old_error_column_values() -> None:
    run = parse("synthetic/error_column_nvlstree_2x8_h100.txt")
    assert run.error_column == "max_error" and run.num_ranks == 16
    assert {r.wrong for row in run.rows for r in row.results} == {0.0, 4e-07}


def test_pre_2020_all_gather_algbw_definition_is_flagged() -> None:
    run = parse("synthetic/very_old_allgather_2x_v100.txt")
    assert run.collective == "all_gather" and run.num_ranks == 2
    row = run.rows[-1]
    assert row.size_bytes / row.best_time_s == pytest.approx(40.09e9, rel=1e-3)  # nccl-tests.md: 40.09
    assert row.best_busbw_bytes_per_s == pytest.approx(20.05e9, rel=1e-3)
    assert any("ec1b5e2" in w for w in run.warnings)


def test_cputime_timestamps_and_linear_steps() -> None:
    text = "\n".join(
        [
            "# nThread 1 nGpus 2 minBytes 1048576 maxBytes 3145728 step: 1048576(bytes) warmup iters: 5 iters: 20"
            " agg iters: 1 validation: 1 graph: 0",
            "#       size         count      type   redop    root  cputime   algbw   busbw #wrong  cputime   algbw"
            "   busbw #wrong  timestamp",
            "     1048576        262144     float     sum      -1    10.00  104.86  104.86      0    10.00  104.86"
            "  104.86      0  2025-11-03 10:00:01",
            "     2097152        524288     float     sum      -1    20.00  104.86  104.86      0    20.00  104.86"
            "  104.86      0  2025-11-03 10:00:02",
        ]
    )
    run = parse_nccl_tests(text, name_hint="all_reduce_perf")
    assert run.step_kind == "bytes" and len(run.rows) == 2
    assert run.rows[1].best_time_s == pytest.approx(20e-6)


@pytest.mark.parametrize(
    "text",
    ["", "hello\nworld", "# nThread 1 nGpus 8\n# Out of bounds values : 0 OK", "{not json", '{"config": {}}'],
)
def test_no_rows_is_an_input_error(text: str) -> None:
    with pytest.raises(InputError):
        parse_nccl_tests(text, source="x.txt")


def test_json_with_broken_entries_keeps_the_good_ones() -> None:
    document = json.loads((DATA / "synthetic/current_2025_allreduce_2x8_h100.json").read_text())
    document["results"][3] = {"size": "big"}
    run = parse_nccl_tests(json.dumps(document))
    assert len(run.rows) == 30 and any("results[3]" in w for w in run.warnings)


def test_version_codes() -> None:
    assert version_from_code(21207) == "2.12.7"
    assert version_from_code(2708) == "2.7.8"
    assert version_from_code(0) is None
