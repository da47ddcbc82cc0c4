"""Every artifact parser survives arbitrary input: it returns records (maybe none), never raises."""

from __future__ import annotations

import gzip
import tempfile
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
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
