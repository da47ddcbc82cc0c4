"""Degraded input: truncated or corrupt JSON, a missing rank, unknown kernel names, empty files, mixed
clocks. Each gives a warning finding saying what could not be judged, never a traceback or a silent zero."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest
from diagnose_support import load_cases

from mfukit.diagnose.engine import diagnose
from mfukit.errors import InputError

DATA = Path(__file__).parents[1] / "data" / "diagnose"

GEN = load_cases()


def traces(directory: Path, ranks: range, world: int = 8, origin: float = 1.7e9, comm: float = 0.25) -> Path:
    for rank in ranks:
        plans = [GEN.RankPlan(0.01, 0.9, comm, extra={"t0_s": 1.0}) for _ in range(2)]
        GEN.write_rank_trace(
            directory / f"rank{rank}.json.gz",
            rank,
            world,
            plans,
            1.2,
            origin_s=origin + rank * (7200 if origin < 0 else 0),
        )
    return directory


def degraded(result: object) -> list[str]:
    return [
        f"{f.title}: {f.summary} " + " ".join(e.what for e in f.evidence)
        for f in result.findings
        if f.id == "degraded_input"
    ]  # type: ignore[attr-defined]


def test_truncated_and_corrupt_traces(tmp_path: Path) -> None:
    directory = traces(tmp_path / "t", range(4))
    whole = gzip.decompress((directory / "rank1.json.gz").read_bytes())
    (directory / "rank1.json.gz").write_bytes(gzip.compress(whole[: len(whole) * 2 // 3]))
    (directory / "rank2.json.gz").write_bytes(
        (directory / "rank2.json.gz").read_bytes()[:500]
    )  # cut gzip stream
    text = gzip.decompress((directory / "rank3.json.gz").read_bytes()).decode()
    (directory / "rank3.json").write_text(text.replace('"cat": "kernel"', '"cat": kernel', 1))
    (directory / "rank3.json.gz").unlink()
    result = diagnose([directory])
    notes = " ".join(degraded(result))
    assert "ends (or breaks)" in notes and "corrupt stretch" in notes
    assert result.time_breakdown  # what was readable was analysed


def test_missing_rank_is_named(tmp_path: Path) -> None:
    result = diagnose([traces(tmp_path / "t", range(0, 8, 2))])
    assert any("4 of 8 ranks have no trace" in note for note in degraded(result))


def test_unknown_kernel_names_are_not_a_silent_zero(tmp_path: Path) -> None:
    directory = tmp_path / "t"
    writer = GEN.TraceWriter(0, 2)
    writer.cpu("ProfilerStep#1", 0.0, 1000.0)
    writer.cpu("nccl:all_reduce", 100.0, 10.0, cat="cpu_op")
    writer.kernel("my_fancy_collective_kernel", 200.0, 300.0, 20, 150.0)
    directory.mkdir()
    (directory / "rank0.json").write_text(json.dumps(writer.document()))
    result = diagnose([directory])
    assert any("no NCCL/RCCL kernel" in note for note in degraded(result))


def test_empty_and_unknown_files(tmp_path: Path) -> None:
    (tmp_path / "empty.json").write_text("")
    (tmp_path / "notes.txt").write_text("hello\n")
    (tmp_path / "zero.json.gz").write_bytes(gzip.compress(b""))
    with pytest.raises(InputError) as raised:
        diagnose([tmp_path])
    message = str(raised.value.message) + str(raised.value.expected)
    for name in ("empty.json", "notes.txt", "zero.json.gz"):  # every file named, with why it was skipped
        assert name in message
    assert "not a recognised artifact kind" in message
    assert "Megatron-LM" in message and "NCCL_DEBUG=INFO" in message  # the kinds it looked for


def test_unrecognised_files_beside_artifacts_are_named(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello\n")
    shutil.copy(DATA / "logs" / "hf_trainer_printer_callback.log", tmp_path / "train.log")
    result = diagnose([tmp_path])
    assert result.skipped == [
        {"file": str(tmp_path / "notes.txt"), "reason": "not a recognised artifact kind"}
    ]
    skipped = next(f for f in result.findings if f.title == "Some files were skipped")
    assert [(e.file, e.what) for e in skipped.evidence] == [
        (str(tmp_path / "notes.txt"), "skipped: not a recognised artifact kind")
    ]


def test_mixed_clocks(tmp_path: Path) -> None:
    directory = traces(tmp_path / "t", range(4), world=4, origin=-1.0)
    result = diagnose([directory])
    assert any("different clocks" in note for note in degraded(result))


def gate_status(result: object) -> dict[str, str]:
    return {g.id: g.status for g in result.gates}  # type: ignore[attr-defined]


def test_a_trace_cut_after_one_kernel_gives_no_verdict(tmp_path: Path) -> None:
    """One 5 us NCCL kernel, the file cut after it: once read as "100 % exposed communication" (an error),
    Network FAIL and Storage I/O PASS "0.0 %". It cannot hold a step: a warning, and every gate unknown."""
    (tmp_path / "t.json").write_text(
        '{"traceEvents":[{"ph":"X","name":"ncclKernel_AllReduce","ts":1,"dur":5,"pid":0,"tid":7,"cat":"kernel"},\n'
    )
    result = diagnose([tmp_path])
    assert not result.has_errors and result.top is None
    assert not result.time_breakdown and not result.ranks
    assert set(gate_status(result).values()) == {"unknown"}
    notes = " ".join(degraded(result))
    assert "too short to hold a training step (1 GPU op(s) over 5.0 us, no ProfilerStep markers" in notes
    assert "No profiler trace holds a usable step" in notes


def test_a_marked_step_with_a_few_kernels_is_not_judged(tmp_path: Path) -> None:
    events = [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "ProfilerStep#3",
            "pid": 1,
            "tid": 1,
            "ts": 0,
            "dur": 900,
        }
    ]
    events += [
        {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "pid": 0, "tid": 7,
         "ts": 10 + 100 * i, "dur": 50}
        for i in range(3)
    ]  # fmt: skip
    (tmp_path / "rank0.json").write_text(json.dumps({"traceEvents": events}))
    result = diagnose([tmp_path])
    assert not result.has_errors and gate_status(result)["network"] == "unknown"
    assert any("3 GPU op(s)" in note and "at least 10 ops)" in note for note in degraded(result))


def test_a_whole_step_is_still_judged(tmp_path: Path) -> None:
    result = diagnose([traces(tmp_path / "t", range(8))])
    assert len(result.ranks) == 8 and gate_status(result)["network"] in ("pass", "fail")


def test_one_job_without_a_cluster_size_does_not_pass_scheduling(tmp_path: Path) -> None:
    """Capacity defaults to the largest job; with one job its utilization is 100 % by construction."""
    (tmp_path / "sacct.txt").write_text(
        "JobID|JobName|State|Submit|Eligible|Start|End|AllocTRES|NodeList\n"
        "2|A|COMPLETED|2026-11-29T16:15:04|2026-11-29T16:15:04|2026-11-29T16:15:04|2026-11-29T18:15:24|"
        "billing=3,cpu=3,gres/gpu=24,mem=12000M,node=3|gpu[01-03]\n"
    )
    gate = next(g for g in diagnose([tmp_path]).gates if g.id == "scheduling")
    assert gate.status == "unknown" and "by construction" in gate.why


def test_no_data_loader_spans_pass_storage_only_on_a_busy_gpu(tmp_path: Path) -> None:
    """Traces without data-loader spans say nothing about the loader, except through the GPU's idle share."""

    def without_loader(directory: Path, idle_s: float) -> Path:
        for rank in range(2):
            plans = [GEN.RankPlan(idle_s, 0.9, 0.05, extra={"t0_s": 1.0}) for _ in range(2)]
            path = directory / f"rank{rank}.json.gz"
            GEN.write_rank_trace(path, rank, 2, plans, 0.96 + idle_s)
            document = json.loads(gzip.decompress(path.read_bytes()))
            document["traceEvents"] = [e for e in document["traceEvents"] if "DataLoader" not in e["name"]]
            path.write_bytes(gzip.compress(json.dumps(document).encode()))
        return directory

    busy = next(g for g in diagnose([without_loader(tmp_path / "busy", 0.005)]).gates if g.id == "storage")
    assert busy.status == "pass" and "no data-loader spans" in busy.why and "upper bound" in busy.why
    idle = next(g for g in diagnose([without_loader(tmp_path / "idle", 0.3)]).gates if g.id == "storage")
    assert idle.status == "unknown" and "no data-loader spans" in idle.why
