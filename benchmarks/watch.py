"""What following training logs costs: 10 logs, each writing a Megatron iteration line per second.

The writers run in a child process; this process runs `mfukit watch`'s loop (``watch.exporter.run``: the
HTTP server, one poll a second) with a scenario, so every line also recomputes MFU, HFU and tokens/s with
``diagnose.mfu.measure`` over the trailing window, and it is scraped once a second (a 1 s scrape interval,
15x Prometheus' default). The cost is this process's CPU time (user + system) over the wall time.
Target: under 2 % of one core.

    python benchmarks/watch.py [--logs 10] [--seconds 30]

Writes benchmarks/results/watch.json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from mfukit.cli.diagnose import job
from mfukit.watch.config import JobSpec, WatchConfig
from mfukit.watch.exporter import Watch, run

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "watch.json"
SCENARIO = ROOT / "tests" / "data" / "watch" / "llama3-70b_h100x1024_tp8pp4.toml"
TARGET_CORE_FRACTION = 0.02

WRITER = r"""
import datetime, sys, time
paths, seconds = sys.argv[1:-1], float(sys.argv[-1])
clock = datetime.datetime(2026, 3, 1, 8, 0, 0)
start = time.monotonic()
iteration = 0
while time.monotonic() - start < seconds:
    iteration += 10
    clock += datetime.timedelta(seconds=10)
    line = (f" [{clock:%Y-%m-%d %H:%M:%S.%f}] iteration {iteration:8d}/  100000 | consumed samples: "
            f"{iteration * 2048:12d} | elapsed time per iteration (ms): 1000.0 | learning rate: 1.000000E-04 | "
            "global batch size:  2048 | lm loss: 2.100000E+00 | loss scale: 1.0 | number of skipped iterations:   0 |"
            " number of nan iterations:   0 |\n")
    for path in paths:
        with open(path, "a") as stream:
            stream.write(line)
    time.sleep(max(0.0, start + iteration / 10 - time.monotonic()))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logs", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mfukit-watch-bench-") as tmp:
        paths = [Path(tmp) / f"job{i}.log" for i in range(args.logs)]
        for path in paths:
            path.write_text(" [2026-03-01 07:59:00.000000] training ...\n")
        known = job(SCENARIO, {})
        watch = Watch(
            WatchConfig(logs=tuple(paths), port=0, detect_timeout_s=3600.0),
            JobSpec(known.model, known.training, known.parallelism, known.cluster),
        )
        stop = threading.Event()
        ports: list[int] = []
        server = threading.Thread(target=run, args=(watch, stop), kwargs={"ready": ports.append}, daemon=True)
        server.start()
        while not ports:
            time.sleep(0.01)
        writer = subprocess.Popen([sys.executable, "-c", WRITER, *map(str, paths), str(args.seconds)])
        cpu0, wall0 = os.times(), time.monotonic()
        scrapes = 0
        while writer.poll() is None:
            with urllib.request.urlopen(f"http://127.0.0.1:{ports[0]}/metrics", timeout=5) as response:
                body = response.read()
            scrapes += 1
            time.sleep(1.0)
        cpu1, wall_s = os.times(), time.monotonic() - wall0
        stop.set()
        server.join()
        cpu_s = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
        steps = [log.state.furthest for log in watch.logs]
    share = cpu_s / wall_s
    lines = sum((s or 0) // 10 for s in steps)
    print(
        f"{'logs':>6} {'lines':>7} {'scrapes':>8} {'wall s':>8} {'cpu s':>7} {'core share':>11} {'target':>7}"
    )
    print(
        f"{args.logs:6d} {lines:7d} {scrapes:8d} {wall_s:8.1f} {cpu_s:7.2f} {share:11.2%} {TARGET_CORE_FRACTION:7.0%}"
    )
    report = {
        "what": "CPU time of mfukit watch over wall time, following logs that each write one line per second",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "logs": args.logs,
        "lines_read": lines,
        "scrapes": scrapes,
        "metrics_bytes": len(body),
        "wall_s": wall_s,
        "cpu_s": cpu_s,
        "core_fraction": share,
        "target_core_fraction": TARGET_CORE_FRACTION,
        "meets_target": share < TARGET_CORE_FRACTION,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
