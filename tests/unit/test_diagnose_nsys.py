"""Nsight Systems SQLite exports read as Kineto traces are.

Two inputs: a real export (extra-p/extrap's test data, Nsight Systems 2022.1.1, a CUDA test program on a
GTX 1060; tests/data/diagnose/LICENSES.md), and a training job's export built here, because no public export
of a multi-GPU training run with NCCL kernels was found: its tables and columns are the ones the real
export has (the subset read), its rows a data-parallel step (GEMMs, a bucketed NCCL all-reduce, a memcpy,
``ProfilerStep#N`` NVTX ranges, OS runtime calls)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from mfukit.diagnose.engine import diagnose
from mfukit.diagnose.records import RankTrace
from mfukit.diagnose.sources import detect, nsys

REAL = Path(__file__).parents[1] / "data" / "diagnose" / "nsys" / "extrap_concurrent_profile1.sqlite"
SCHEMA = """
CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
  contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
  demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL, mangledName INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
  contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
  bytes INTEGER NOT NULL, copyKind INTEGER NOT NULL);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL,
  globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL, returnValue INTEGER NOT NULL, callchainId INTEGER);
CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER,
  category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER,
  domainId INTEGER);
CREATE TABLE OSRT_API (start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL,
  globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL, returnValue INTEGER NOT NULL,
  nestingLevel INTEGER, callchainId INTEGER);
CREATE TABLE TARGET_INFO_GPU (vmId INTEGER NOT NULL, id INTEGER NOT NULL, name TEXT, busLocation TEXT);
"""
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off_kernel"
ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL128(ncclDevKernelArgsStorage<4096ul>)"


def training_export(path: Path, *, steps: int = 4, comm_ms: float = 30.0, exposed_ms: float = 20.0) -> Path:
    """Per step (100 ms of GEMMs): 20 GEMMs of 5 ms; after the 10th, the all-reduce of the first bucket
    (hidden under the next GEMMs), after the last one the second bucket, whose ``exposed_ms`` nothing hides."""
    db = sqlite3.connect(path)
    db.executescript(SCHEMA)
    names = {
        GEMM: 1,
        ALLREDUCE: 2,
        "cudaLaunchKernel_v7000": 3,
        "pthread_cond_wait": 4,
        "cudaMemcpyAsync_v3020": 5,
    }
    db.executemany("INSERT INTO StringIds VALUES (?, ?)", [(i, n) for n, i in names.items()])
    db.execute("INSERT INTO TARGET_INFO_GPU VALUES (0, 0, 'NVIDIA H100 80GB HBM3', '0000:18:00.0')")
    ms = 1_000_000
    t, correlation = 10 * ms, 0

    def kernel(start: int, length: int, name: int, stream: int) -> None:
        nonlocal correlation
        correlation += 1
        db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 1, 1, ?, 3, 0, NULL)",
                   (start - 30_000, start - 25_000, correlation))  # fmt: skip
        db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, 0, 1, ?, ?, 1, ?, ?, NULL)",
                   (start, start + length, stream, correlation, name, name))  # fmt: skip

    for step in range(steps):
        begin = t
        db.execute(
            "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (?, ?, 0, 1, 7, NULL, 1, 4194304, 1)",
            (t, t + ms // 2),
        )
        t += ms
        for index in range(20):
            kernel(t, 5 * ms, 1, 7)
            t += 5 * ms
            if index == 9:
                kernel(t, int(comm_ms * ms) // 2, 2, 20)
        kernel(t, int(exposed_ms * ms), 2, 20)
        t += int(exposed_ms * ms) + ms
        db.execute("INSERT INTO NVTX_EVENTS VALUES (?, ?, 59, NULL, NULL, NULL, ?, 1, NULL, NULL, 0)",
                   (begin, t, f"ProfilerStep#{step + 7}"))  # fmt: skip
        db.execute("INSERT INTO OSRT_API VALUES (?, ?, 27, 1, NULL, 4, 0, 0, NULL)", (begin, begin + ms // 3))
    db.commit()
    db.close()
    return path


def test_a_real_export_is_read() -> None:
    assert [source.kind for source in detect(REAL)] == ["nsys"]
    (trace,) = nsys.parse(REAL)
    assert isinstance(trace, RankTrace)
    assert trace.device_name == "GeForce GTX 1060 with Max-Q Design"
    assert trace.num_kernels == 12  # CUPTI_ACTIVITY_KIND_KERNEL holds 12 rows
    copies = sum(k.count for k in trace.kernel_totals if k.name.startswith("Memcpy"))
    sets = sum(k.count for k in trace.kernel_totals if k.name.startswith("Memset"))
    assert (copies, sets) == (30, 17)  # the rows of CUPTI_ACTIVITY_KIND_MEMCPY and _MEMSET
    assert not trace.steps_from_markers and len(trace.steps) == 1  # its NVTX ranges name no step
    step = trace.steps[0]
    assert 0 < step.compute_s < step.duration_s


def test_a_training_export_breaks_down_like_a_kineto_trace(tmp_path: Path) -> None:
    (trace,) = nsys.parse(training_export(tmp_path / "rank3.sqlite"))
    assert isinstance(trace, RankTrace)
    assert trace.rank == 3 and trace.device_name == "NVIDIA H100 80GB HBM3"
    assert trace.steps_from_markers and [s.step for s in trace.steps] == [7, 8, 9, 10]
    step = trace.steps[0]
    assert step.compute_s == pytest.approx(0.100, rel=1e-6)
    assert step.comm_s == pytest.approx(0.015 + 0.020, rel=1e-6)
    assert step.comm_exposed_s == pytest.approx(0.020, rel=1e-6)  # the first bucket hides under the GEMMs
    assert trace.num_comm_kernels == 8 and trace.cuda_graph_launches == 0
    assert [len(chain.starts_s) for chain in trace.chains] == [2, 2, 2, 2]


def test_not_an_nsys_export_is_said(tmp_path: Path) -> None:
    path = tmp_path / "other.sqlite"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE t (x INTEGER)")
    db.commit()
    db.close()
    (damaged,) = nsys.parse(path)
    assert "CUPTI_ACTIVITY_KIND_KERNEL" in damaged.problem  # type: ignore[union-attr]


def test_diagnose_reads_a_directory_of_exports(tmp_path: Path) -> None:
    for rank in range(2):
        training_export(tmp_path / f"rank{rank}.sqlite")
    result = diagnose([tmp_path])
    assert {i["kind"] for i in result.inputs} == {"nsys"}
    assert len(result.ranks) == 2 and result.time_breakdown


def test_a_damaged_export_is_said(tmp_path: Path) -> None:
    path = tmp_path / "cut.sqlite"
    path.write_bytes(training_export(tmp_path / "whole.sqlite").read_bytes()[:100])
    (damaged,) = nsys.parse(path)
    assert "export it again" in damaged.problem  # type: ignore[union-attr]
