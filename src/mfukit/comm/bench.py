"""Live measurements on this machine: matmul FLOP/s, memory bandwidth, and collectives in nccl-tests' format.

torch is imported inside the functions that need it (DESIGN: only ``train/`` and this module may).

* matmul: square GEMMs over a size sweep per dtype; FLOP/s = 2 M N K / time (the convention of
  datasheet peaks and of ``perf.flops``).
* membw: a device-to-device copy; bytes moved = 2 x buffer (read + write), as STREAM's Copy counts.
* collectives: ``torch.distributed`` (gloo on CPU, NCCL on GPU) under torchrun, timed per rank and averaged
  over ranks (nccl-tests' default ``-a 1``), printed in nccl-tests' columns with its algbw/busbw rules
  (doc/PERFORMANCE.md): all_reduce busbw = algbw x 2(n-1)/n; all_gather, reduce_scatter, alltoall x (n-1)/n
  with the size column the total array; broadcast x 1. torch's all_reduce and broadcast work in place, so
  their out-of-place column also times the copy into a separate output buffer; torch has no in-place
  alltoall, so its in-place column times the exchange plus the copy back into the input buffer.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import platform
import socket
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mfukit.core.files import write_text_atomic

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast")
_BUSBW_FACTOR: dict[str, Callable[[int], float]] = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
}
_REDOP = {"all_reduce": "sum", "reduce_scatter": "sum"}
_DTYPE_NAMES = {"fp32": "float32", "tf32": "float32", "bf16": "bfloat16", "fp16": "float16"}
FLOAT_BYTES = 4


def _torch() -> Any:
    import torch

    return torch


def environment(device: str) -> dict[str, Any]:
    """Where a measurement was taken: enough to compare it with another machine's."""
    torch = _torch()
    block: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "device": device,
        "cpu_count": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)),
        "load_average_1min": os.getloadavg()[0],
        "torch_threads": torch.get_num_threads(),
        "cuda": torch.version.cuda,
    }
    if device.startswith("cuda"):
        properties = torch.cuda.get_device_properties(torch.device(device))
        block["device_name"] = properties.name
        block["device_memory_bytes"] = properties.total_memory
    else:
        block["device_name"] = platform.processor() or platform.machine()
    return block


def cpu_threads(requested: int | None) -> tuple[int, str | None]:
    """Set torch's CPU threads (when ``requested``); the count used and a warning when it exceeds the cores
    free right now: the usable cores less the 1-minute load average of everything else (this process
    counted as one), so descheduled threads would make the timings measure the scheduler."""
    torch = _torch()
    if requested is not None:
        torch.set_num_threads(requested)
    threads = int(torch.get_num_threads())
    usable = len(os.sched_getaffinity(0))
    others = max(0.0, os.getloadavg()[0] - 1.0)
    free = max(1, int(usable - others))
    if threads <= free:
        return threads, None
    return threads, (
        f"{threads} torch threads but only ~{free} of {usable} cores are free (load average {others + 1:.1f}): "
        f"descheduled threads make short kernels time the scheduler, not the hardware; rerun with "
        f"--threads {free} (or OMP_NUM_THREADS={free}) or on a quiet host"
    )


def _synchronize(device: str) -> None:
    if device.startswith("cuda"):
        _torch().cuda.synchronize()


def _time_loop(run: Callable[[], Any], device: str, min_time_s: float, *, per_call: bool = False) -> float:
    """Seconds per call after two warm-up calls, over at least ``min_time_s`` and three calls.

    The mean over the loop (nccl-tests' convention), or with ``per_call`` the median of synchronised single
    calls, which a busy shared host (descheduled threads) disturbs far less.
    """
    for _ in range(2):
        run()
    _synchronize(device)
    durations: list[float] = []
    started = time.perf_counter()
    while len(durations) < 3 or time.perf_counter() - started < min_time_s:
        call_started = time.perf_counter()
        run()
        if per_call:
            _synchronize(device)
        durations.append(time.perf_counter() - call_started)
    _synchronize(device)
    if per_call:
        return statistics.median(durations)
    return (time.perf_counter() - started) / len(durations)


@dataclass(frozen=True)
class MatmulPoint:
    dtype: str
    size: int
    time_s: float
    flops_per_s: float


def matmul_sweep(
    device: str, dtypes: list[str], sizes: list[int], *, min_time_s: float = 0.2
) -> list[MatmulPoint]:
    """Achieved FLOP/s of ``size`` x ``size`` x ``size`` GEMMs for each dtype (tf32 = fp32 on tensor cores)."""
    torch = _torch()
    points: list[MatmulPoint] = []
    for dtype in dtypes:
        if device.startswith("cuda"):
            torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
        torch_dtype = getattr(torch, _DTYPE_NAMES[dtype])
        for size in sizes:
            a = torch.randn(size, size, device=device, dtype=torch_dtype)
            b = torch.randn(size, size, device=device, dtype=torch_dtype)
            seconds = _time_loop(functools.partial(torch.mm, a, b), device, min_time_s, per_call=True)
            points.append(MatmulPoint(dtype, size, seconds, 2.0 * size**3 / seconds))
    return points


def measure_peak_flops(device: str, dtype: str) -> float:
    """The best achieved GEMM FLOP/s on this device (a measured peak for MFU when the catalog has none)."""
    sizes = [2048, 4096, 8192] if device.startswith("cuda") else [256, 512, 1024]
    return max(p.flops_per_s for p in matmul_sweep(device, [dtype], sizes, min_time_s=0.1))


@dataclass(frozen=True)
class MembwPoint:
    buffer_bytes: int
    time_s: float
    bytes_per_s: float


def membw_sweep(device: str, sizes_bytes: list[int], *, min_time_s: float = 0.2) -> list[MembwPoint]:
    """Copy bandwidth: 2 x buffer bytes (read + write) per copy."""
    torch = _torch()
    points: list[MembwPoint] = []
    for size in sizes_bytes:
        source = torch.ones(size // FLOAT_BYTES, device=device, dtype=torch.float32)
        target = torch.empty_like(source)
        seconds = _time_loop(functools.partial(target.copy_, source), device, min_time_s, per_call=True)
        moved = 2 * source.numel() * FLOAT_BYTES
        points.append(MembwPoint(source.numel() * FLOAT_BYTES, seconds, moved / seconds))
    return points


# ---------------------------------------------------------------------------------------------- collectives


@dataclass(frozen=True)
class CollectiveRow:
    op: str
    size_bytes: int
    count: int
    redop: str
    root: int
    out_time_s: float
    out_wrong: int
    in_time_s: float
    in_wrong: int
    ranks: int
    iterations: int

    def algbw_bytes_per_s(self, in_place: bool) -> float:
        return self.size_bytes / (self.in_time_s if in_place else self.out_time_s)

    def busbw_bytes_per_s(self, in_place: bool) -> float:
        return self.algbw_bytes_per_s(in_place) * _BUSBW_FACTOR[self.op](self.ranks)


def sizes(min_bytes: int, max_bytes: int, factor: int) -> list[int]:
    """nccl-tests' -b/-e/-f sweep in bytes, each rounded down to whole float32 elements (at least one)."""
    out: list[int] = []
    size = min_bytes
    while size <= max_bytes:
        out.append(max(FLOAT_BYTES, size - size % FLOAT_BYTES))
        size *= factor
    return out


def _buffers(op: str, size: int, rank: int, n: int, device: str) -> tuple[Any, Any, Any]:
    """(input, out-of-place output, expected output) for ``size`` total bytes, float32 values."""
    torch = _torch()
    elements = size // FLOAT_BYTES
    per_rank = max(1, elements // n)
    if op == "all_reduce":
        return (
            torch.full((elements,), rank + 1.0, device=device),
            torch.empty(elements, device=device),
            torch.full((elements,), n * (n + 1) / 2, device=device),
        )
    if op == "broadcast":
        return (
            torch.full((elements,), rank + 1.0, device=device),
            torch.empty(elements, device=device),
            torch.full((elements,), 1.0, device=device),
        )
    if op == "all_gather":
        expected = torch.arange(1, n + 1, device=device, dtype=torch.float32).repeat_interleave(per_rank)
        return (
            torch.full((per_rank,), rank + 1.0, device=device),
            torch.empty(per_rank * n, device=device),
            expected,
        )
    if op == "reduce_scatter":
        return (
            torch.full((per_rank * n,), rank + 1.0, device=device),
            torch.empty(per_rank, device=device),
            torch.full((per_rank,), n * (n + 1) / 2, device=device),
        )
    # alltoall: block j of rank r holds r * n + j; afterwards block j holds j * n + r
    blocks = torch.arange(n, device=device, dtype=torch.float32).repeat_interleave(per_rank)
    expected = (blocks * n + rank).to(torch.float32)
    return (rank * n + blocks).to(torch.float32), torch.empty(per_rank * n, device=device), expected


def _launch(op: str, source: Any, output: Any, in_place: bool) -> Callable[[], Any]:
    import torch.distributed as dist

    if op == "all_reduce":
        return (
            (lambda: dist.all_reduce(source)) if in_place else (lambda: dist.all_reduce(output.copy_(source)))
        )
    if op == "broadcast":
        return (
            (lambda: dist.broadcast(source, 0))
            if in_place
            else (lambda: dist.broadcast(output.copy_(source), 0))
        )
    if op == "all_gather":
        if in_place:  # input is this rank's slice of the output, as nccl-tests' in-place mode
            mine = output.chunk(dist.get_world_size())[dist.get_rank()]
            return lambda: dist.all_gather_single(output, mine)
        return lambda: dist.all_gather_single(output, source)
    if op == "reduce_scatter":
        if in_place:
            mine = source.chunk(dist.get_world_size())[dist.get_rank()]
            return lambda: dist.reduce_scatter_single(mine, source)
        return lambda: dist.reduce_scatter_single(output, source)
    if in_place:  # torch has no in-place alltoall: exchange, then land the result in the input buffer

        def exchange_in_place() -> None:
            dist.all_to_all_single(output, source)
            source.copy_(output)

        return exchange_in_place
    return lambda: dist.all_to_all_single(output, source)


def _wrong(op: str, size: int, in_place: bool, device: str) -> int:
    """Run the collective once on fresh buffers and count the elements that differ from the expected ones."""
    import torch.distributed as dist

    rank, n = dist.get_rank(), dist.get_world_size()
    source, output, expected = _buffers(op, size, rank, n, device)
    if in_place and op == "all_gather":
        output.chunk(n)[rank].copy_(source)
    _launch(op, source, output, in_place)()
    _synchronize(device)
    if in_place and op == "reduce_scatter":
        result = source.chunk(n)[rank]
    elif in_place and op in ("all_reduce", "broadcast", "alltoall"):
        result = source
    else:
        result = output
    return int((result != expected).sum())


def _over_ranks(seconds: float, device: str, op: str) -> float:
    """The mean (or max) of a per-rank value over all ranks."""
    torch = _torch()
    import torch.distributed as dist

    value = torch.tensor([seconds], dtype=torch.float64, device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
    return float(value) if op == "max" else float(value) / dist.get_world_size()


def _time_collective(run: Callable[[], Any], device: str, min_time_s: float) -> tuple[float, int]:
    """Mean seconds per call over a loop whose length every rank agrees on (a collective must be called
    the same number of times everywhere): 2 warm-up calls, 3 calibration calls, then enough calls for
    ``min_time_s`` on the slowest rank, the per-rank mean averaged over ranks (nccl-tests -a 1)."""
    calibration = _time_loop(run, device, 0.0)
    iterations = max(3, math.ceil(min_time_s / max(_over_ranks(calibration, device, "max"), 1e-9)))
    started = time.perf_counter()
    for _ in range(iterations):
        run()
    _synchronize(device)
    return _over_ranks((time.perf_counter() - started) / iterations, device, "mean"), iterations


def collective_rows(op: str, sweep: list[int], device: str, min_time_s: float) -> list[CollectiveRow]:
    """Time ``op`` at every size, out-of-place and in-place (run inside an initialised process group)."""
    import torch.distributed as dist

    rank, n = dist.get_rank(), dist.get_world_size()
    rows: list[CollectiveRow] = []
    for size in sweep:
        timings: dict[bool, tuple[float, int, int]] = {}
        for in_place in (False, True):
            wrong = _wrong(op, size, in_place, device)
            source, output, _ = _buffers(op, size, rank, n, device)
            dist.barrier()
            seconds, iterations = _time_collective(_launch(op, source, output, in_place), device, min_time_s)
            timings[in_place] = (seconds, wrong, iterations)
        elements = size // FLOAT_BYTES
        count = elements if op in ("all_reduce", "broadcast", "alltoall") else max(1, elements // n)
        rows.append(
            CollectiveRow(
                op=op,
                size_bytes=max(1, elements // n) * n * FLOAT_BYTES
                if op != "all_reduce" and op != "broadcast"
                else size,
                count=count,
                redop=_REDOP.get(op, "none"),
                root=0 if op == "broadcast" else -1,
                out_time_s=timings[False][0],
                out_wrong=timings[False][1],
                in_time_s=timings[True][0],
                in_wrong=timings[True][1],
                ranks=n,
                iterations=min(timings[False][2], timings[True][2]),
            )
        )
    return rows


def _time_text(seconds: float) -> str:
    micros = seconds * 1e6
    if micros < 100:
        return f"{micros:.2f}"
    if micros < 10_000:
        return f"{micros:.1f}"
    return f"{micros:.0f}"


def nccl_tests_text(
    rows: list[CollectiveRow], *, devices: list[str], min_bytes: int, max_bytes: int, factor: int
) -> str:
    """The rows as nccl-tests prints them (header, device list, column header, rows, footer); ``iters`` is the
    fewest timed iterations of any row (each size runs as many as fill the requested time)."""
    iters = min((row.iterations for row in rows), default=0)
    lines = [
        f"# nThread 1 nGpus 1 minBytes {min_bytes} maxBytes {max_bytes} step: {factor}(factor) "
        f"warmup iters: 2 iters: {iters} agg iters: 1 validation: 1 graph: 0",
        "#",
        "# Using devices",
        *devices,
        "#",
        "#                                                              out-of-place                       in-place          ",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       ",
    ]
    busbws: list[float] = []
    for row in rows:
        text = f"{row.size_bytes:>12}  {row.count:>12}  {'float':>8}  {row.redop:>6}  {row.root:>6}"
        for in_place in (False, True):
            seconds = row.in_time_s if in_place else row.out_time_s
            wrong = row.in_wrong if in_place else row.out_wrong
            algbw = row.algbw_bytes_per_s(in_place) / 1e9
            busbw = row.busbw_bytes_per_s(in_place) / 1e9
            busbws.append(busbw)
            text += f"  {_time_text(seconds):>7}  {algbw:>6.2f}  {busbw:>6.2f} {wrong:>6g}"
        lines.append(text)
    wrong_total = sum(r.out_wrong + r.in_wrong for r in rows)
    lines.append(f"# Out of bounds values : {wrong_total} {'OK' if wrong_total == 0 else 'FAILED'}")
    average = sum(busbws) / len(busbws) if busbws else 0.0
    lines.append(f"# Avg bus bandwidth    : {average:g} ")
    lines.append("#")
    return "\n".join(lines) + "\n"


def _device_line(rank: int, local_rank: int, device: str) -> str:
    """nccl-tests' device line; a CPU rank has no PCI address, printed as 0000:00:00."""
    torch = _torch()
    if device.startswith("cuda"):
        properties = torch.cuda.get_device_properties(torch.device(device))
        bus = f"{properties.pci_domain_id:04x}:{properties.pci_bus_id:02x}:{properties.pci_device_id:02x}"
        name = properties.name
    else:
        bus, name = "0000:00:00", f"CPU ({platform.machine()}, gloo)"
    return f"#  Rank {rank:2d} Group  0 Pid {os.getpid():6d} on {socket.gethostname():>10} device {local_rank:2d} [{bus}] {name}"


def collectives_worker(arguments: list[str]) -> None:
    """Entry point under torchrun: every rank measures, rank 0 writes the rows and device lines as JSON."""
    parser = argparse.ArgumentParser(prog="mfukit.comm.bench collectives")
    parser.add_argument("result")
    parser.add_argument("--ops", default=",".join(COLLECTIVES))
    parser.add_argument("--min-bytes", type=int, required=True)
    parser.add_argument("--max-bytes", type=int, required=True)
    parser.add_argument("--factor", type=int, default=2)
    parser.add_argument("--min-time", type=float, default=0.05)
    options = parser.parse_args(arguments)
    torch = _torch()
    import torch.distributed as dist

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu"
    if device != "cpu":
        torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl" if device != "cpu" else "gloo")
    sweep = sizes(options.min_bytes, options.max_bytes, options.factor)
    result: dict[str, Any] = {"backend": dist.get_backend(), "ranks": dist.get_world_size(), "ops": {}}
    for op in options.ops.split(","):
        result["ops"][op] = [asdict(row) for row in collective_rows(op, sweep, device, options.min_time)]
    lines: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(lines, _device_line(dist.get_rank(), local_rank, device))
    if dist.get_rank() == 0:
        result["devices"] = lines
        result["environment"] = environment(device)
        write_text_atomic(Path(options.result), json.dumps(result))
    dist.destroy_process_group()


if __name__ == "__main__":
    if sys.argv[1:2] == ["collectives"]:
        collectives_worker(sys.argv[2:])
    else:
        raise SystemExit("usage: torchrun ... -m mfukit.comm.bench collectives RESULT.json [options]")
