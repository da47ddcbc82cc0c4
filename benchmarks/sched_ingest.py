"""sacct ingest: memory and speed of ``read_trace`` on a 200 MB ``sacct -P`` file.

Targets (reliability issue): peak memory at most 3x the file's size, and ingest at least as fast as the
same text is read by the csv module (``csv.reader`` with ``delimiter="|"``, rows dropped as read): the
peer measured in the same run on the same file. Each is measured in its own subprocess: peak RSS
(``ru_maxrss``) above the RSS the process had before it opened the file, and wall time of the read.
The file is generated in a temporary directory (1M attempts, 64 users, 3 partitions, 1-64 nodes of
2,048, a tenth requeued). Writes benchmarks/results/sched_ingest.json.

The read parses the text with Arrow's CSV reader and keeps the attempts in columns (every row checked,
every bad field reported); the Job objects, and the node names in them, are built when a consumer first
looks at ``jobs`` (simulate, analyze). The ingest ratio counts the read and the count of attempts; the
time and peak memory of building every job afterwards are reported beside it, with no target.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import tempfile
import textwrap
from datetime import UTC, datetime
from pathlib import Path

TARGET_BYTES = int(float(sys.argv[1]) * 1e6) if len(sys.argv) > 1 else 200_000_000
MAX_MEMORY_RATIO = 3.0  # peak RSS above baseline / file size
MAX_TIME_RATIO = 1.0  # ingest time / csv.reader time
NODES, GPUS_PER_NODE = 2048, 8
HEADER = (
    "JobID|JobName|Partition|Account|User|QOS|State|ExitCode|Submit|Eligible|Start|End|ElapsedRaw|"
    "NNodes|AllocTRES|NodeList|TimelimitRaw|Priority|Flags"
)
STATES = ["COMPLETED"] * 7 + ["FAILED", "CANCELLED by 1000", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"]


def _stamp(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S")


def generate(path: Path, target_bytes: int) -> int:
    """Write sacct -P rows until the file holds ``target_bytes``; return the row count."""
    rng = random.Random(2026)
    t, rows, written, job = 1.76e9, 0, 0, 0
    with path.open("w", encoding="utf-8") as out:
        out.write(HEADER + "\n")
        while written < target_bytes:
            job += 1
            nodes = rng.choice((1, 1, 1, 2, 4, 8, 16, 64))
            first = rng.randrange(1, NODES - nodes + 2)
            nodelist = f"gpu{first:04d}" if nodes == 1 else f"gpu[{first:04d}-{first + nodes - 1:04d}]"
            for attempt in range(2 if rng.random() < 0.1 else 1):
                t += rng.expovariate(1 / 30.0)
                start = t + rng.expovariate(1 / 600.0)
                elapsed = int(rng.lognormvariate(7.5, 1.5)) + 1
                state = "REQUEUED" if attempt == 0 and rng.random() < 0.5 else rng.choice(STATES)
                gpus = nodes * GPUS_PER_NODE
                line = (
                    f"{job}|train-{job % 977}|{rng.choice(('batch', 'prio', 'debug'))}|acct{job % 13}|"
                    f"user{job % 64}|normal|{state}|0:0|{_stamp(t)}|{_stamp(t + 1)}|{_stamp(start)}|"
                    f"{_stamp(start + elapsed)}|{elapsed}|{nodes}|billing={gpus},cpu={gpus * 4},"
                    f"gres/gpu={gpus},mem={nodes * 512}G,node={nodes}|{nodelist}|{rng.choice((60, 240, 1440))}|"
                    f"{rng.randrange(1, 10**6)}|{'SchedBackfill' if rng.random() < 0.3 else 'SchedMain'}\n"
                )
                out.write(line)
                written += len(line)
                rows += 1
    return rows


CHILD = textwrap.dedent(
    """
    import resource, sys, time
    from pathlib import Path
    def rss_kib():
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0
    path, what = Path(sys.argv[1]), sys.argv[2]
    if what == "mfukit":
        from mfukit.sched.traces import read_trace
    else:
        import csv
    base = rss_kib()
    t0 = time.perf_counter()
    if what == "mfukit":
        read = read_trace(path, gpus_per_node=8, cluster_gpus=2048 * 8)
        count = len(read.attempts or read.jobs)
    else:
        with path.open(encoding="utf-8", newline="") as handle:
            count = sum(1 for _ in csv.reader(handle, delimiter="|"))
    wall = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    build = built_peak = 0.0
    if what == "mfukit":
        t1 = time.perf_counter()
        assert len(list(read.jobs)) > 0
        build = time.perf_counter() - t1
        built_peak = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) * 1024
    print(wall, (peak - base) * 1024, count, build, built_peak)
    """
)


def measure(path: Path, what: str) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), what], check=True, capture_output=True, text=True
    ).stdout.split()
    measured = {"wall_s": float(out[0]), "peak_rss_above_base_bytes": float(out[1]), "rows": float(out[2])}
    if what == "mfukit":
        measured |= {"build_jobs_wall_s": float(out[3]), "peak_rss_with_jobs_bytes": float(out[4])}
    return measured


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "sacct.txt"
        rows = generate(path, TARGET_BYTES)
        size = path.stat().st_size
        peer = measure(path, "csv")
        ours = measure(path, "mfukit")
    memory_ratio = ours["peak_rss_above_base_bytes"] / size
    time_ratio = ours["wall_s"] / peer["wall_s"]
    print(f"sacct -P file: {size / 1e6:,.0f} MB, {rows:,} rows")
    print(f"{'reader':<22} {'wall s':>8} {'MB/s':>8} {'peak RSS MB':>12}")
    for name, row in (("csv.reader (peer)", peer), ("mfukit read_trace", ours)):
        print(
            f"{name:<22} {row['wall_s']:>8.2f} {size / 1e6 / row['wall_s']:>8.1f} "
            f"{row['peak_rss_above_base_bytes'] / 1e6:>12.0f}"
        )
    print(f"memory / file size: {memory_ratio:.2f}x (target <= {MAX_MEMORY_RATIO:.0f}x)")
    print(f"ingest time / csv.reader time: {time_ratio:.2f}x (target <= {MAX_TIME_RATIO:.0f}x)")
    print(
        f"then building every Job (first use by simulate/analyze): {ours['build_jobs_wall_s']:.2f} s, "
        f"peak RSS {ours['peak_rss_with_jobs_bytes'] / 1e6:,.0f} MB (no target)"
    )
    out = Path(__file__).parent / "results" / "sched_ingest.json"
    out.parent.mkdir(exist_ok=True)
    record = {
        "file_bytes": size,
        "rows": rows,
        "csv_reader": peer,
        "read_trace": ours,
        "memory_ratio": memory_ratio,
        "time_ratio": time_ratio,
        "targets": {"memory_ratio_max": MAX_MEMORY_RATIO, "time_ratio_max": MAX_TIME_RATIO},
    }
    out.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
