"""PyTorch profiler (Kineto) traces, one per rank: stream the events, reduce them to a per-step breakdown.

Handles both schemas (``cat`` ``kernel``/``cpu_op``/``cuda_runtime`` and the PyTorch <= 1.9 ``Kernel``/
``Operator``/``Runtime``), gzip, missing ``distributedInfo`` (the rank then comes from the file name,
said so), CUDA-graph launches (kernels carry the graph launch's correlation), NCCL kernels of both
naming schemes, and truncated or corrupt files (what was read is analysed, the damage is noted).

Per rank, only the GPU intervals (start, end, category, launch time) and a handful of CPU spans
(ProfilerStep, DataLoader, checkpoint, GC) are kept, in numpy arrays; everything else is counted and
dropped as it streams past.
"""

from __future__ import annotations

import re
from array import array
from collections import defaultdict
from math import isfinite
from pathlib import Path
from typing import Any

import numpy as np

from mfukit.diagnose import intervals as iv
from mfukit.diagnose.kernels import (
    KERNEL_CATEGORIES,
    MEMORY_CATEGORIES,
    categorize,
    collective_of,
    is_tensor_core,
)
from mfukit.diagnose.records import (
    CollectiveSample,
    KernelTotal,
    RankTrace,
    StepBreakdown,
    TimelineCategory,
)
from mfukit.diagnose.sources.jsonstream import TraceEventStream

US = 1e-6
# A GPU gap shorter than this is launch latency, not waiting for work: 5-20 us per launch (HTA docs,
# "CUDA kernel launch statistics"), so two back-to-back launches fit.
LAUNCH_GAP_S = 50e-6
SHORT_KERNEL_S = 10e-6  # a kernel shorter than one launch: the CPU cannot keep such a GPU fed
MAX_COLLECTIVE_SAMPLES = 2000
MIN_COLLECTIVE_BYTES = 1 << 20
MAX_TIMELINE_INTERVALS = 4000

STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")
DATALOADER_NAME = re.compile(
    r"^enumerate\(DataLoader\)|DataLoaderIter\.__next__|^(data[_-]?load(ing)?|get_batch|batch-generator|next_batch)$",
    re.IGNORECASE,
)
CHECKPOINT_NAME = re.compile(
    r"(save|write)[_-]?checkpoint|checkpoint[_.-](save|write)|dcp[_.]save|async_save|torch\.save\b",
    re.IGNORECASE,
)
GC_NAME = re.compile(r"^(gc|gc\.collect|python[ _]gc|gc[_-]collect)$|gc\.collect\(", re.IGNORECASE)
CPU_SPAN_CATEGORIES = frozenset(
    {"cpu_op", "user_annotation", "Operator", "python_function", "gpu_user_annotation"}
)
RUNTIME_CATEGORIES = frozenset({"cuda_runtime", "Runtime", "cuda_driver"})
DEVICE_CATEGORIES_NOT_ANALYSED = frozenset({"mtia_ccp_events", "mtia_runtime", "hpu_op", "xpu_runtime"})
RANK_IN_NAME = re.compile(r"(?:rank|worker)[-_ ]?(\d+)", re.IGNORECASE)
DTYPE_BYTES = {
    "float": 4, "float32": 4, "int": 4, "int32": 4, "uint32": 4, "bfloat16": 2, "half": 2, "float16": 2,
    "long": 8, "int64": 8, "double": 8, "float64": 8, "byte": 1, "char": 1, "int8": 1, "uint8": 1,
    "bool": 1, "float8_e4m3fn": 1, "float8_e5m2": 1,
}  # fmt: skip
CATEGORY_CODES: dict[TimelineCategory, int] = {"compute": 0, "comm": 1, "memcpy": 2}
_GPU, _RUNTIME, _CPU, _OTHER_DEVICE = range(4)
_KIND: dict[str, int] = {
    **dict.fromkeys(KERNEL_CATEGORIES | MEMORY_CATEGORIES, _GPU),
    **dict.fromkeys(RUNTIME_CATEGORIES, _RUNTIME),
    **dict.fromkeys(CPU_SPAN_CATEGORIES, _CPU),
    **dict.fromkeys(DEVICE_CATEGORIES_NOT_ANALYSED, _OTHER_DEVICE),
}


class _Collector:
    """Accumulates what the analysis needs while the events stream past."""

    def __init__(self) -> None:
        self.origin_us: float | None = None
        self.gpu_start = array("d")
        self.gpu_end = array("d")
        self.gpu_cat = array("b")
        self.gpu_corr = array("q")
        self.runtime_corr = array("q")
        self.runtime_ts = array("d")
        self.kernel_time: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
        self.kernel_category: dict[str, str] = {}
        self.steps: list[tuple[int, float, float]] = []
        self.dataloader: list[tuple[float, float]] = []
        self.checkpoint: list[tuple[float, float]] = []
        self.gc: list[tuple[float, float]] = []
        self.collectives: list[CollectiveSample] = []
        self.comm_annotations = 0
        self.graph_launches = 0
        self.launch_api_us = 0.0
        self.other_device_events: dict[str, int] = defaultdict(int)
        self.bad_events = 0

    def add(self, event: dict[str, Any]) -> None:
        try:
            if event["ph"] != "X":
                return
            cat = event["cat"]
            name = event["name"]
        except (KeyError, TypeError):
            return
        kind = _KIND.get(cat) if type(cat) is str else None
        if kind is None or type(name) is not str:
            return
        # cheap rejections first: most events are CPU ops and launches of no interest here
        if kind == _CPU:
            if name.startswith("aten::") or cat == "gpu_user_annotation":
                return
        elif kind == _RUNTIME:
            if "Launch" not in name and "Memcpy" not in name and "Memset" not in name:
                return
        elif kind == _OTHER_DEVICE:
            self.other_device_events[cat] += 1
            return
        ts: Any = event.get("ts")
        dur: Any = event.get("dur")
        try:
            start = float(ts)
            length = float(dur) if dur is not None else 0.0
        except (TypeError, ValueError):
            self.bad_events += 1
            return
        if not (isfinite(start) and isfinite(length)) or length < 0:
            self.bad_events += 1
            return
        if self.origin_us is None:
            self.origin_us = start
        start -= self.origin_us
        if kind == _GPU:
            self._gpu(cat, name, start, length, event.get("args"))
        elif kind == _RUNTIME:
            self._runtime(name, start, length, event.get("args"))
        else:
            self._cpu(cat, name, start, length)

    def _gpu(self, cat: str, name: str, start: float, length: float, args: Any) -> None:
        arguments = args if isinstance(args, dict) else None
        category = categorize(cat, name, arguments)
        self.gpu_start.append(start)
        self.gpu_end.append(start + length)
        self.gpu_cat.append(CATEGORY_CODES[category])
        correlation = arguments.get("correlation") if arguments else None
        self.gpu_corr.append(int(correlation) if isinstance(correlation, int) else -1)
        totals = self.kernel_time[name]
        totals[0] += length
        totals[1] += 1
        self.kernel_category[name] = category
        if category == "comm" and arguments and len(self.collectives) < MAX_COLLECTIVE_SAMPLES:
            size = _message_bytes(arguments)
            if size is not None and size >= MIN_COLLECTIVE_BYTES and length > 0:
                group = arguments.get("Group size")
                self.collectives.append(
                    CollectiveSample(
                        collective_of(name, arguments),
                        size,
                        length * US,
                        int(group) if isinstance(group, int) else 0,
                    )
                )

    def _runtime(self, name: str, start: float, length: float, args: Any) -> None:
        correlation = args.get("correlation") if isinstance(args, dict) else None
        if isinstance(correlation, int):
            self.runtime_corr.append(correlation)
            self.runtime_ts.append(start)
        self.launch_api_us += length
        if "GraphLaunch" in name:
            self.graph_launches += 1

    def _cpu(self, cat: str, name: str, start: float, length: float) -> None:
        if cat == "python_function":
            if GC_NAME.search(name):
                self.gc.append((start, start + length))
            return
        step = STEP_NAME.match(name)
        if step:
            self.steps.append((int(step.group(1)), start, start + length))
        elif DATALOADER_NAME.search(name):
            self.dataloader.append((start, start + length))
        elif CHECKPOINT_NAME.search(name):
            self.checkpoint.append((start, start + length))
        elif GC_NAME.search(name):
            self.gc.append((start, start + length))
        elif name.startswith(("nccl:", "record_param_comms", "c10d::")):
            self.comm_annotations += 1


def _message_bytes(args: dict[str, Any]) -> float | None:
    elements = args.get("In msg nelems")
    out_elements = args.get("Out msg nelems")
    dtype = args.get("dtype")
    if not isinstance(dtype, str):
        return None
    width = DTYPE_BYTES.get(dtype.lower())
    counts = [c for c in (elements, out_elements) if isinstance(c, int | float)]
    if width is None or not counts:
        return None
    return float(max(counts)) * width


def parse(path: Path) -> list[RankTrace]:
    stream = TraceEventStream(path)
    collector = _Collector()
    for event in stream.events():
        collector.add(event)
    return [_analyse(path, stream, collector)]


def _rank(path: Path, header: dict[str, Any]) -> tuple[int | None, str, int | None, str | None]:
    info = header.get("distributedInfo")
    world = None
    backend = None
    if isinstance(info, dict):
        world = info.get("world_size") if isinstance(info.get("world_size"), int) else None
        backend = info.get("backend") if isinstance(info.get("backend"), str) else None
        if isinstance(info.get("rank"), int):
            return int(info["rank"]), "distributedInfo", world, backend
    match = RANK_IN_NAME.search(path.name)
    if match:
        return int(match.group(1)), "file name", world, backend
    return None, "unknown", world, backend


def _analyse(path: Path, stream: TraceEventStream, c: _Collector) -> RankTrace:
    header = stream.header
    problems = list(stream.problems.notes)
    if stream.problems.corrupt_stretches:
        problems.append(
            f"{stream.problems.corrupt_stretches} corrupt stretch(es) skipped "
            f"({stream.problems.skipped_chars} characters)"
        )
    if c.bad_events:
        problems.append(f"{c.bad_events} events with a non-numeric or negative ts/dur ignored")
    rank, rank_source, world, backend = _rank(path, header)
    if rank_source == "file name":
        problems.append(f"no rank in distributedInfo: rank {rank} taken from the file name")
    elif rank_source == "unknown":
        problems.append(
            "no rank in distributedInfo nor in the file name: cross-rank comparison uses file order"
        )
    for cat, count in sorted(c.other_device_events.items()):
        problems.append(
            f"{count} events of device category {cat!r} are not CUDA/ROCm kernels and are not analysed"
        )
    devices = header.get("deviceProperties")
    device_name = None
    if isinstance(devices, list) and devices and isinstance(devices[0], dict):
        device_name = str(devices[0].get("name")) if devices[0].get("name") else None

    start = np.frombuffer(c.gpu_start, dtype=np.float64) * US
    end = np.frombuffer(c.gpu_end, dtype=np.float64) * US
    codes = np.frombuffer(c.gpu_cat, dtype=np.int8)
    steps, from_markers = _windows(c, start, end)
    if start.size == 0:
        problems.append(
            "no GPU kernels or memcpys: compute, communication and idle time cannot be judged from this "
            "trace (record it with ProfilerActivity.CUDA)"
        )
    breakdown = _breakdown(c, start, end, codes, steps) if start.size and steps else []
    durations = end - start
    kernels_only = durations[codes != CATEGORY_CODES["memcpy"]]
    totals = sorted(
        (
            KernelTotal(name, t * US, int(n), c.kernel_category[name], is_tensor_core(name))
            for name, (t, n) in c.kernel_time.items()
        ),
        key=lambda k: -k.total_s,
    )
    num_comm = int(np.sum(codes == CATEGORY_CODES["comm"]))
    timeline = _timeline(start, end, codes, breakdown)
    origin = (c.origin_us or 0.0) * US
    return RankTrace(
        file=str(path),
        rank=rank,
        rank_source=rank_source,
        world_size=world,
        backend=backend,
        device_name=device_name,
        steps=breakdown,
        steps_from_markers=from_markers,
        kernel_totals=totals[:50],
        num_kernels=int(kernels_only.size),
        num_short_kernels=int(np.sum(kernels_only < SHORT_KERNEL_S)),
        median_kernel_s=float(np.median(kernels_only)) if kernels_only.size else None,
        num_comm_kernels=num_comm,
        num_comm_annotations=c.comm_annotations,
        cuda_graph_launches=c.graph_launches,
        launch_api_s=c.launch_api_us * US,
        collectives=c.collectives,
        timeline=timeline,
        clock_origin_s=origin,
        problems=problems,
        events=stream.events_read,
    )


def _windows(
    c: _Collector, start: iv.Array, end: iv.Array
) -> tuple[list[tuple[int | None, float, float]], bool]:
    """The analysis windows: one per ProfilerStep marker, else the whole GPU-active span."""
    if c.steps:
        # a marker can repeat (several profiler cycles in one file); keep each occurrence in time order
        ordered = sorted((s * US, e * US, n) for n, s, e in c.steps if e > s)
        if not ordered:
            return [], True
        return [(n, s, e) for s, e, n in ordered], True
    if start.size:
        return [(None, float(start.min()), float(end.max()))], False
    return [], False


def _spans(spans: list[tuple[float, float]]) -> tuple[iv.Array, iv.Array]:
    if not spans:
        empty = np.zeros(0, dtype=np.float64)
        return empty, empty
    raw = np.asarray(spans, dtype=np.float64) * US
    return iv.union(raw[:, 0], raw[:, 1])


def _breakdown(
    c: _Collector,
    start: iv.Array,
    end: iv.Array,
    cat: Any,
    steps: list[tuple[int | None, float, float]],
) -> list[StepBreakdown]:
    compute = cat == CATEGORY_CODES["compute"]
    comm = cat == CATEGORY_CODES["comm"]
    busy_compute = iv.union(start[compute], end[compute])
    busy_comm = iv.union(start[comm], end[comm])
    busy_cc = iv.union(start[compute | comm], end[compute | comm])
    all_starts, all_ends = iv.union(start, end)
    lo = min(float(all_starts[0]), min(s for _, s, _ in steps))
    hi = max(float(all_ends[-1]), max(e for _, _, e in steps))
    gap_s, gap_e = iv.gaps(all_starts, all_ends, lo, hi)
    host_s, host_e, kern_s, kern_e = _split_gaps(c, start, gap_s, gap_e)
    short = (gap_e - gap_s) < LAUNCH_GAP_S
    dl = _spans(c.dataloader)
    ck = _spans(c.checkpoint)
    gc = _spans(c.gc)

    ws = np.asarray([s for _, s, _ in steps])
    we = np.asarray([e for _, _, e in steps])

    def measure(sets: tuple[iv.Array, iv.Array]) -> iv.Array:
        return iv.measure_in(sets[0], sets[1], ws, we)

    m_compute = measure(busy_compute)
    m_comm = measure(busy_comm)
    m_cc = measure(busy_cc)
    m_all = measure((all_starts, all_ends))
    m_host = iv.measure_in(host_s, host_e, ws, we)
    m_kern = iv.measure_in(kern_s, kern_e, ws, we)
    m_short = iv.measure_in(gap_s[short], gap_e[short], ws, we)
    idle_sets = (gap_s, gap_e)
    sorted_start = np.sort(start)
    counts = np.searchsorted(sorted_start, we) - np.searchsorted(sorted_start, ws)
    result = []
    for index, (number, s, e) in enumerate(steps):
        duration = e - s
        dl_in = _clip(dl, s, e)
        result.append(
            StepBreakdown(
                step=number,
                start_s=s,
                duration_s=duration,
                compute_s=float(m_compute[index]),
                comm_s=float(m_comm[index]),
                comm_exposed_s=float(m_cc[index] - m_compute[index]),
                memcpy_exposed_s=float(m_all[index] - m_cc[index]),
                idle_s=float(max(0.0, duration - m_all[index])),
                host_wait_s=float(m_host[index]),
                kernel_wait_s=float(m_kern[index]),
                launch_gap_s=float(m_short[index]),
                dataloader_s=float(np.sum(dl_in[1] - dl_in[0])),
                dataloader_exposed_s=iv.intersect_measure(*dl_in, *idle_sets),
                checkpoint_exposed_s=iv.intersect_measure(*_clip(ck, s, e), *idle_sets),
                gc_exposed_s=iv.intersect_measure(*_clip(gc, s, e), *idle_sets),
                num_kernels=int(counts[index]),
            )
        )
    return result


def _clip(sets: tuple[iv.Array, iv.Array], lo: float, hi: float) -> tuple[iv.Array, iv.Array]:
    s = np.clip(sets[0], lo, hi)
    e = np.clip(sets[1], lo, hi)
    keep = e > s
    return s[keep], e[keep]


def _split_gaps(
    c: _Collector, start: iv.Array, gap_s: iv.Array, gap_e: iv.Array
) -> tuple[iv.Array, iv.Array, iv.Array, iv.Array]:
    """Split each idle gap into host wait (before the next GPU op was launched) and kernel wait (after).

    The next op is the one starting where the gap ends; its launch time comes from the runtime call
    with the same correlation id (cudaLaunchKernel, cudaGraphLaunch, cudaMemcpyAsync). A gap whose
    next op has no known launch counts as host wait (the CPU had not handed over work).
    """
    corr = np.frombuffer(c.gpu_corr, dtype=np.int64)
    launch = np.full(start.size, np.nan)
    if len(c.runtime_corr):
        rc = np.frombuffer(c.runtime_corr, dtype=np.int64)
        rt = np.frombuffer(c.runtime_ts, dtype=np.float64) * US
        order = np.argsort(rc, kind="stable")
        rc, rt = rc[order], rt[order]
        position = np.clip(np.searchsorted(rc, corr), 0, rc.size - 1)
        found = (rc[position] == corr) & (corr >= 0)
        launch[found] = rt[position[found]]
    order = np.argsort(start, kind="stable")
    sorted_start = start[order]
    sorted_launch = launch[order]
    nxt = np.searchsorted(sorted_start, gap_e, side="left")
    has_next = nxt < sorted_start.size
    launch_at = np.full(gap_s.size, np.inf)
    launch_at[has_next] = sorted_launch[nxt[has_next]]
    launch_at = np.where(np.isnan(launch_at), np.inf, launch_at)
    split = np.clip(launch_at, gap_s, gap_e)
    return gap_s, split, split, gap_e


def _timeline(
    start: iv.Array, end: iv.Array, cat: Any, steps: list[StepBreakdown]
) -> list[tuple[float, float, TimelineCategory]]:
    """Busy intervals of the median step, per category, relative to the step start (for the report)."""
    if not steps or start.size == 0:
        return []
    chosen = sorted(steps, key=lambda s: s.duration_s)[len(steps) // 2]
    lo, hi = chosen.start_s, chosen.start_s + chosen.duration_s
    out: list[tuple[float, float, TimelineCategory]] = []
    for name, code in CATEGORY_CODES.items():
        mask = (cat == code) & (end > lo) & (start < hi)
        merged_s, merged_e = iv.union(np.clip(start[mask], lo, hi), np.clip(end[mask], lo, hi))
        out.extend((float(s - lo), float(e - lo), name) for s, e in zip(merged_s, merged_e, strict=True))
    out.sort()
    return out[:MAX_TIMELINE_INTERVALS]
