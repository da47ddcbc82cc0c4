"""Every artifact parser survives arbitrary input: it returns records (maybe none), never raises."""

from __future__ import annotations

import gzip
import tempfile
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from mfukit.diagnose import intervals as iv
from mfukit.diagnose.sources import sources

SEEDS = [
    '{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce", "ts": 1, "dur": 2, "args": {"correlation": 3}}]}',
    '[{"name": "forward-compute", "cat": "forward-compute", "ph": "X", "pid": 0, "tid": 0, "ts": 1, "dur": 2, "args": {"step": 1}}]',
    "timestamp, index, clocks.sm [MHz]\n2025/01/01 00:00:00.000, 0, 1410 MHz\n",
    'DCGM_FI_DEV_SM_CLOCK{gpu="0"} 1410\n',
    "| Diagnostic | Fail - GPU: 0 |\n+---\nDeployment\n",
    "JobID|JobName|State|Start|End\n1|a|FAILED|2026-01-01T00:00:00|2026-01-01T01:00:00\n",
    "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n",
    " [2024-05-01 10:00:00] iteration 10/ 100 | elapsed time per iteration (ms): 12.5 |\n",
    '{\n  "schema": "bench.checkpoint/1",\n  "result": {"state_bytes": 67108864, "save_bytes_per_s": 4e8}\n}\n',
    '{"t": 1.0, "kind": "checkpoint", "attempt": 0, "step": 4, "blocking_s": 0.1}\n',
    '{"step": 1, "attempt": 0, "t_end": 2.0, "step_time_s": 0.1, "tokens_per_s": 640.0}\n',
]


def mutated() -> st.SearchStrategy[str]:
    seed = st.sampled_from(SEEDS)
    return st.one_of(
        st.text(max_size=300),
        st.builds(
            lambda s, i, j: s[: i % (len(s) + 1)] + s[j % (len(s) + 1) :],
            seed,
            st.integers(0, 400),
            st.integers(0, 400),
        ),
        st.builds(
            lambda s, t, i: s[: i % (len(s) + 1)] + t + s[i % (len(s) + 1) :],
            seed,
            st.text(max_size=20),
            st.integers(0, 400),
        ),
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=mutated(), compress=st.booleans())
def test_every_parser_survives(text: str, compress: bool) -> None:
    data = text.encode("utf-8", errors="replace")
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / ("dmesg.log.gz" if compress else "dmesg.log")
        path.write_bytes(gzip.compress(data) if compress else data)
        for source in sources():
            records = source.parse(path)
            assert isinstance(records, list)


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.tuples(st.floats(-1e3, 1e3), st.floats(0, 50)), max_size=40),
    st.floats(-1e3, 1e3),
    st.floats(1e-3, 500),
)
@example(spans=[(16.40403956314528, 16.40403956314528), (-16.0, 16.0)], lo=0.0, width=16.40403956314528)
def test_union_measure_matches_brute_force(spans: list[tuple[float, float]], lo: float, width: float) -> None:
    starts = np.array([s for s, _ in spans], dtype=np.float64)
    ends = np.array([s + d for s, d in spans], dtype=np.float64)
    merged_s, merged_e = iv.union(starts, ends)
    assert np.all(merged_e >= merged_s) and np.all(merged_s[1:] > merged_e[:-1])
    measured = float(iv.measure_in(merged_s, merged_e, np.array([lo]), np.array([lo + width]))[0])
    grid = np.linspace(lo, lo + width, 2001)
    covered = np.zeros(grid.size, dtype=bool)
    for s, e in zip(starts, ends, strict=True):
        covered |= (grid >= s) & (grid <= e)
    assert 0.0 <= measured <= width + 1e-9
    assert abs(measured - covered.mean() * width) <= width * 0.01 + 2 * width / 2000 * (len(spans) + 1)


def _event(index: int) -> dict[str, object]:
    kinds = ("kernel", "cuda_runtime", "cpu_op", "ac2g")
    return {"ph": "X" if index % 4 != 3 else "f", "cat": kinds[index % 4], "name": f"op{index % 7}",
            "pid": 1, "tid": 7, "ts": 1000.0 + index, "dur": 0.5 + index % 3,
            "args": {"correlation": index, "External id": index, "grid": [1, 2, 3]}}  # fmt: skip


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    damage=st.lists(
        st.tuples(st.integers(0, 1499), st.sampled_from(["name", "ts", "args", "nan"])), max_size=6
    )
)
def test_typed_blocks_match_the_stdlib_reading(damage: list[tuple[int, str]]) -> None:
    """Blocks decoded by msgspec (files past 64 KiB) give the events json.loads gives, converted to the
    Kineto event type; a block with an event of the wrong shape falls back event by event and only that
    event is dropped (counted as invalid)."""
    import json

    import msgspec

    from mfukit.diagnose.sources.jsonstream import TraceEventStream
    from mfukit.diagnose.sources.kineto import TraceEvent

    events = [_event(i) for i in range(1500)]
    for index, what in damage:
        replacement = {"name": 5, "ts": "soon", "args": [1], "nan": float("nan")}[what]
        events[index]["ts" if what == "nan" else what] = replacement
    text = json.dumps({"schemaVersion": 1, "traceEvents": events, "distributedInfo": {"rank": 0}})
    expected, invalid = [], 0
    for event in json.loads(text)["traceEvents"]:
        try:
            expected.append(msgspec.convert(event, TraceEvent))
        except msgspec.ValidationError:
            invalid += 1
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "rank0.json"
        path.write_text(text)
        stream = TraceEventStream(path, TraceEvent, chunk_chars=1 << 17)
        read = list(stream.events())
    assert len(text) > 3 * (1 << 16)
    assert stream.invalid_events == invalid and stream.events_read == len(events)

    def key(event: TraceEvent) -> tuple[object, ...]:
        return event.ph, event.cat, event.name, repr(event.ts), event.dur, event.args  # repr: nan == nan

    assert [key(e) for e in read] == [key(e) for e in expected]
    assert stream.header["distributedInfo"] == {"rank": 0}


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.floats(0, 1e3), st.floats(0, 80)), max_size=20),
    st.lists(st.tuples(st.floats(0, 1e3), st.floats(0, 80)), max_size=20),
    st.lists(st.tuples(st.floats(0, 1e3), st.floats(1e-3, 300)), min_size=1, max_size=6),
)
def test_intersection_in_windows_matches_brute_force(
    a: list[tuple[float, float]], b: list[tuple[float, float]], windows: list[tuple[float, float]]
) -> None:
    """|A ∩ B ∩ window| for every window at once (the exposed data-loader, checkpoint and GC time of every
    step) against a fine grid."""

    def disjoint(spans: list[tuple[float, float]]) -> tuple[np.ndarray, np.ndarray]:
        return iv.union(np.array([s for s, _ in spans]), np.array([s + d for s, d in spans]))

    a_s, a_e = disjoint(a)
    b_s, b_e = disjoint(b)
    ws = np.array([s for s, _ in windows])
    we = np.array([s + d for s, d in windows])
    measured = iv.intersect_in_windows(a_s, a_e, b_s, b_e, ws, we)
    grid = np.linspace(0.0, 1400.0, 56001)
    step = grid[1] - grid[0]
    inside_a = np.zeros(grid.size, dtype=bool)
    inside_b = np.zeros(grid.size, dtype=bool)
    for s, e in zip(a_s, a_e, strict=True):
        inside_a |= (grid >= s) & (grid < e)
    for s, e in zip(b_s, b_e, strict=True):
        inside_b |= (grid >= s) & (grid < e)
    for k, (s, e) in enumerate(zip(ws, we, strict=True)):
        brute = np.sum(inside_a & inside_b & (grid >= s) & (grid < e)) * step
        assert abs(measured[k] - brute) <= step * (2 * (a_s.size + b_s.size) + 2) + 1e-9
