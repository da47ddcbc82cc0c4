"""Diagnosis speed and memory against Holistic Trace Analysis (HTA), on the same traces, in this run.

1. A multi-rank Kineto trace set (dense steps: CPU ops, launches, compute and NCCL kernels) is generated.
2. HTA (PyPI ``holistictraceanalysis``, installed into benchmarks/.venv-hta, never the project venv) loads
   it and computes its temporal breakdown; mfukit's streaming parser does the same (``parsing.parse_files``
   with its own choice of worker processes). Each runs in its own process tree, ``--repeat`` times,
   alternating; the fastest run of each counts (the machine may be shared), with the largest peak memory
   of any run (PSS of the whole tree, or the main process's RSS high-water mark if larger).
   Targets: mfukit >= 10x faster, <= 1/4 of HTA's peak memory.
3. A 2 GB trace set (generated now, deleted after) is analysed by mfukit within 4 GB of RAM.

    python benchmarks/diagnose.py [--ranks 8] [--steps 24] [--repeat 3] [--large-gb 2.0] [--skip-hta] [--skip-large]

Writes benchmarks/results/diagnose.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HTA_VENV = ROOT / "benchmarks" / ".venv-hta"
RESULTS = ROOT / "benchmarks" / "results" / "diagnose.json"
GiB = 2**30

KERNELS = ("ampere_bf16_s16816gemm_bf16_256x128_ldg8_f2f_stages_64x3_tn", "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float>>",
           "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>", "flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>>")  # fmt: skip
NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def write_trace(path: Path, rank: int, world: int, steps: int, kernels_per_step: int, seed: int) -> int:
    """One rank's Kineto trace, written event by event (constant memory); returns its size in bytes."""
    rng = random.Random(seed * 1000 + rank)
    pid, t, corr = 1000 + rank, 1.7e15, 1
    with path.open("w", encoding="utf-8") as out:
        out.write('{"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA A100-SXM4-80GB"}],\n')
        out.write(
            f'"distributedInfo": {{"backend": "nccl", "rank": {rank}, "world_size": {world}}},\n"traceEvents": [\n'
        )
        first = True

        def emit(event: dict[str, object]) -> None:
            nonlocal first
            out.write(("" if first else ",\n") + json.dumps(event))
            first = False

        for step in range(steps):
            start = t
            cpu = start + 2000.0
            gpu = start + 2500.0
            emit({"ph": "X", "cat": "user_annotation", "name": "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__",
                  "pid": pid, "tid": pid, "ts": start + 10.0, "dur": 1500.0})  # fmt: skip
            for index in range(kernels_per_step):
                duration = rng.uniform(20.0, 400.0)
                emit({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": pid, "tid": pid, "ts": cpu, "dur": 12.0,
                      "args": {"External id": corr, "Record function id": 0, "Sequence number": corr, "Fwd thread id": 0}})  # fmt: skip
                emit({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": pid, "tid": pid, "ts": cpu + 2.0, "dur": 5.0,
                      "args": {"External id": corr, "cbid": 211, "correlation": corr}})  # fmt: skip
                gpu = max(gpu, cpu + 10.0)
                emit({"ph": "X", "cat": "kernel", "name": KERNELS[index % len(KERNELS)], "pid": 0, "tid": 7, "ts": gpu, "dur": duration,
                      "args": {"External id": corr, "queued": 0, "device": 0, "context": 1, "stream": 7, "correlation": corr,
                               "registers per thread": 128, "shared memory": 0, "grid": [132, 1, 1], "block": [256, 1, 1]}})  # fmt: skip
                emit(
                    {
                        "ph": "f",
                        "id": corr,
                        "pid": 0,
                        "tid": 7,
                        "ts": gpu,
                        "cat": "ac2g",
                        "name": "ac2g",
                        "bp": "e",
                    }
                )
                corr += 1
                if index % 40 == 39:
                    emit({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": pid, "tid": pid, "ts": cpu + 3.0, "dur": 5.0,
                          "args": {"correlation": corr}})  # fmt: skip
                    emit({"ph": "X", "cat": "kernel", "name": NCCL, "pid": 0, "tid": 20, "ts": gpu, "dur": 900.0,
                          "args": {"correlation": corr, "stream": 20, "device": 0, "Collective name": "allreduce",
                                   "In msg nelems": 25_000_000, "Out msg nelems": 25_000_000, "Group size": world, "dtype": "BFloat16"}})  # fmt: skip
                    corr += 1
                cpu += 15.0
                gpu += duration + rng.uniform(1.0, 8.0)
            t = max(cpu, gpu) + 500.0
            # the step marker goes last: its duration is known only now (events need not be sorted)
            emit(
                {
                    "ph": "X",
                    "cat": "user_annotation",
                    "name": f"ProfilerStep#{step}",
                    "pid": pid,
                    "tid": pid,
                    "ts": start,
                    "dur": t - start,
                }
            )
        out.write("\n]}\n")
    return path.stat().st_size


def make_set(directory: Path, ranks: int, steps: int, kernels_per_step: int) -> int:
    directory.mkdir(parents=True, exist_ok=True)
    return sum(
        write_trace(directory / f"rank{r}.pt.trace.json", r, ranks, steps, kernels_per_step, seed=1)
        for r in range(ranks)
    )


# Each child reports its own wall time (imports included) and the CPU time of its process tree.
CPU_REPORT = """
import resource
def cpu_s():
    return sum(getattr(resource.getrusage(who), field) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
               for field in ("ru_utime", "ru_stime"))
def max_rss_bytes():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
"""

MFUKIT_CHILD = (
    CPU_REPORT
    + """
import json, sys, time
from pathlib import Path
start = time.perf_counter()
from mfukit.diagnose.breakdown import summaries, time_breakdown
from mfukit.diagnose.parsing import parse_files
parsed = parse_files(sorted(Path(sys.argv[1]).glob("*.json")))
traces = [r for _, _, records, _ in parsed for r in records]
breakdown = time_breakdown(summaries(traces))
elapsed = time.perf_counter() - start
print(json.dumps({"seconds": elapsed, "cpu_s": cpu_s(), "main_max_rss_bytes": max_rss_bytes(),
                  "idle_fraction": breakdown["overall"]["idle_fraction"], "events": sum(t.events for t in traces)}))
"""
)

HTA_CHILD = (
    CPU_REPORT
    + """
import json, sys, time
start = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
analyzer = TraceAnalysis(trace_dir=sys.argv[1])
frame = analyzer.get_temporal_breakdown(visualize=False)
elapsed = time.perf_counter() - start
print(json.dumps({"seconds": elapsed, "cpu_s": cpu_s(), "main_max_rss_bytes": max_rss_bytes(),
                  "idle_fraction": float(frame["idle_time_pctg"].mean()) / 100.0}))
"""
)


def _tree_pss_bytes(root: int) -> int:
    """Memory of ``root`` and all its descendants now, as PSS: pages shared by forked workers count once
    (HTA forks a pool to parse ranks; mfukit does for large inputs)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    tree, frontier = {root}, [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent and pid not in tree]
        tree.update(children)
        frontier.extend(children)
    total = 0
    for pid in tree:
        try:
            rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
        except OSError:
            continue
        total += next(
            (int(line.split()[1]) * 1024 for line in rollup.splitlines() if line.startswith("Pss:")), 0
        )
    return total


def run_child(python: Path, code: str, directory: Path, limit_bytes: int | None = None) -> dict[str, float]:
    """Run one tool in its own process tree. Wall time is the tool's own (imports included); CPU time
    is the tree's user + system time; peak memory is the larger of the tree's PSS sampled every 50 ms
    (workers included) and the main process's exact RSS high-water mark (ru_maxrss, which also counts
    shared libraries in full): a short peak the sampler misses still counts."""
    command = [str(python), "-c", code, str(directory)]
    if limit_bytes is not None:  # hard address-space limit per process: exceeding it fails the run
        command = ["prlimit", f"--as={limit_bytes}", *command]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONWARNINGS": "ignore"})  # fmt: skip
    peak = 0
    while process.poll() is None:
        peak = max(peak, _tree_pss_bytes(process.pid))
        time.sleep(0.05)
    stdout, stderr = process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"{python.name} child failed ({process.returncode}): {stderr[-2000:]}")
    result: dict[str, float] = json.loads(stdout.strip().splitlines()[-1])
    result["sampled_tree_pss_bytes"] = peak
    result["peak_bytes"] = max(peak, result["main_max_rss_bytes"])
    return result


def best_of(runs: list[dict[str, float]]) -> dict[str, float]:
    """The fastest of repeated runs (the one least disturbed by other work on a shared machine), with
    the largest peak memory seen in any of them."""
    fastest = dict(min(runs, key=lambda r: r["seconds"]))
    fastest["peak_bytes"] = max(r["peak_bytes"] for r in runs)
    fastest["runs_seconds"] = [r["seconds"] for r in runs]  # type: ignore[assignment]
    return fastest


def ensure_hta() -> Path:
    python = HTA_VENV / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(HTA_VENV)], check=True)
    if subprocess.run([str(python), "-c", "import hta"], capture_output=True, check=False).returncode != 0:
        # HTA 0.5.0 overflows an int16 column under pandas 3 on traces of more than ~32k kernels per rank
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "holistictraceanalysis", "pandas<3"], check=True
        )
    return python


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--kernels", type=int, default=600, help="compute kernels per step")
    parser.add_argument(
        "--repeat", type=int, default=3, help="runs of each tool, alternating; the fastest counts"
    )
    parser.add_argument("--large-gb", type=float, default=2.0)
    parser.add_argument("--skip-hta", action="store_true")
    parser.add_argument("--skip-large", action="store_true")
    args = parser.parse_args()
    ours = Path(sys.executable)
    report: dict[str, object] = {"benchmark": "diagnose", "ranks": args.ranks, "steps": args.steps,
                                 "cpus": os.cpu_count(), "load_average_before": os.getloadavg()}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="mfukit-diag-bench-") as scratch:
        traces = Path(scratch) / "traces"
        size = make_set(traces, args.ranks, args.steps, args.kernels)
        report["trace_set_bytes"] = size
        hta_python = None if args.skip_hta else ensure_hta()
        mine_runs, hta_runs = [], []
        for _ in range(args.repeat):
            mine_runs.append(run_child(ours, MFUKIT_CHILD, traces))
            if hta_python is not None:
                hta_runs.append(run_child(hta_python, HTA_CHILD, traces))
        mine = best_of(mine_runs)
        report["mfukit"] = mine
        print(f"trace set: {args.ranks} ranks, {size / 1e6:.0f} MB, {mine['events']:.0f} events; "
              f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")  # fmt: skip
        print(f"mfukit : load + temporal breakdown {mine['seconds']:.2f} s (CPU {mine['cpu_s']:.2f} s), "
              f"peak memory {mine['peak_bytes'] / 2**20:.0f} MiB")  # fmt: skip
        if hta_runs:
            hta = best_of(hta_runs)
            report["hta"] = hta
            speedup = hta["seconds"] / mine["seconds"]
            cpu_ratio = hta["cpu_s"] / mine["cpu_s"]
            memory = mine["peak_bytes"] / hta["peak_bytes"]
            report["speedup_vs_hta"] = speedup
            report["cpu_ratio_vs_hta"] = cpu_ratio
            report["memory_vs_hta"] = memory
            report["idle_fraction_difference"] = abs(hta["idle_fraction"] - mine["idle_fraction"])
            print(f"HTA    : load + temporal breakdown {hta['seconds']:.2f} s (CPU {hta['cpu_s']:.2f} s), "
                  f"peak memory {hta['peak_bytes'] / 2**20:.0f} MiB")  # fmt: skip
            print(f"ratio  : {speedup:.1f}x faster (target >= 10x; CPU time {cpu_ratio:.1f}x less), "
                  f"{memory:.2f} of HTA's peak memory (target <= 0.25)")  # fmt: skip
            print(f"idle share: HTA {hta['idle_fraction']:.3f} (whole trace span) vs mfukit "
                  f"{mine['idle_fraction']:.3f} (ProfilerStep windows)")  # fmt: skip
        shutil.rmtree(traces)
        if not args.skip_large:
            large = Path(scratch) / "large"
            ranks = 8
            steps = max(1, int(args.large_gb * GiB / ranks / (args.kernels * 980)))
            size = make_set(large, ranks, steps, args.kernels)
            result = run_child(ours, MFUKIT_CHILD, large, limit_bytes=4 * GiB)
            report["large"] = {"bytes": size, **result}
            print(f"large  : {size / GiB:.2f} GiB of traces in {result['seconds']:.1f} s ({size / result['seconds'] / 1e6:.0f} MB/s), "
                  f"peak memory {result['peak_bytes'] / GiB:.2f} GiB under a 4 GiB address-space limit per process")  # fmt: skip
    report["load_average_after"] = os.getloadavg()
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {RESULTS.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    started = time.perf_counter()
    code = main()
    print(f"({time.perf_counter() - started:.0f} s)")
    sys.exit(code)
