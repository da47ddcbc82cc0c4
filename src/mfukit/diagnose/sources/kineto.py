"""PyTorch profiler (Kineto) traces, one per rank: stream the events, reduce them to a per-step breakdown.

Handles both schemas (``cat`` ``kernel``/``cpu_op``/``cuda_runtime`` and the PyTorch <= 1.9 ``Kernel``/
``Operator``/``Runtime``), gzip, missing ``distributedInfo`` (the rank then comes from the file name,
said so), CUDA-graph launches (kernels carry the graph launch's correlation), NCCL kernels of both
naming schemes, and truncated or corrupt files (what was read is analysed, the damage is noted).

Events arrive in blocks of :class:`TraceEvent` structs that hold only the fields read here (the JSON
reader skips every other key in C). Per rank, only the GPU intervals (start, duration, category, name
index, correlation), the launch times and a handful of CPU spans (ProfilerStep, DataLoader, checkpoint,
GC) are kept, in typed arrays; a kernel's category is decided once per distinct name; everything else is
counted and dropped as it streams past. The interval algebra of the breakdown is vectorised
(:mod:`mfukit.diagnose.intervals`).
"""

from __future__ import annotations

import re
from array import array
from collections import defaultdict
from math import isfinite
from pathlib import Path
from typing import Any, Protocol

import msgspec
import numpy as np

from mfukit import units
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
    StepChain,
    TimelineCategory,
)
from mfukit.diagnose.sources.jsonstream import StreamProblems, TraceEventStream

US = 1e-6
# A GPU gap shorter than this is launch latency, not waiting for work: 5-20 us per launch (HTA docs,
# "CUDA kernel launch statistics"), so two back-to-back launches fit.
LAUNCH_GAP_S = 50e-6
SHORT_KERNEL_S = 10e-6  # a kernel shorter than one launch: the CPU cannot keep such a GPU fed
MAX_COLLECTIVE_SAMPLES = 2000
MIN_COLLECTIVE_BYTES = 1 << 20
MAX_TIMELINE_INTERVALS = 4000
# Below these a trace cannot hold one training step, and a breakdown of it would be a verdict read from
# nothing (a file cut after its first kernel reads as "100 % exposed communication"). A forward and
# backward of the smallest model launches hundreds of kernels (the ResNet-50 trace in tests/data: thousands
# per step); without ProfilerStep markers the GPU-active span must also last a plausible step (1 ms: the
# launch latency of ~50-100 kernels at 10-20 us each, HTA's "CUDA kernel launch statistics").
MIN_GPU_OPS = 10
MIN_UNMARKED_SPAN_S = 1e-3

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
_COMM = CATEGORY_CODES["comm"]
_GPU, _RUNTIME, _CPU, _OTHER_DEVICE = range(4)
_KIND: dict[str, int] = {
    **dict.fromkeys(KERNEL_CATEGORIES | MEMORY_CATEGORIES, _GPU),
    **dict.fromkeys(RUNTIME_CATEGORIES, _RUNTIME),
    **dict.fromkeys(CPU_SPAN_CATEGORIES, _CPU),
    **dict.fromkeys(DEVICE_CATEGORIES_NOT_ANALYSED, _OTHER_DEVICE),
}


class EventArgs(msgspec.Struct, gc=False):
    """The ``args`` keys read: the launch correlation, and the message of a collective kernel."""

    correlation: Any = None
    collective: Any = msgspec.field(default=None, name="Collective name")
    in_elements: Any = msgspec.field(default=None, name="In msg nelems")
    out_elements: Any = msgspec.field(default=None, name="Out msg nelems")
    group_size: Any = msgspec.field(default=None, name="Group size")
    dtype: Any = None


class TraceEvent(msgspec.Struct, gc=False):
    """One Chrome-trace event, reduced to the keys the breakdown reads (times in microseconds)."""

    ph: str = ""
    cat: str = ""
    name: str = ""
    ts: float | None = None
    dur: float | None = None
    args: EventArgs | None = None


class Collector:
    """Accumulates what the analysis needs while the blocks of events stream past."""

    def __init__(self) -> None:
        self.origin_us: float | None = None
        self.gpu_start = array("d")
        self.gpu_dur = array("d")
        self.gpu_cat = array("b")
        self.gpu_name = array("l")
        self.gpu_corr = array("q")
        self.runtime_corr = array("q")
        self.runtime_ts = array("d")
        self.names: dict[tuple[str, str], tuple[int, int]] = {}
        """(cat, name) of a GPU event -> (index into ``name_list``, category code)."""
        self.name_list: list[tuple[str, str]] = []
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

    def add(self, events: list[TraceEvent]) -> None:
        """One block of events. The loop is the hot path: cheap rejections first (most events are CPU
        ops, launches and flow arrows of no interest here), one dict lookup per GPU event's name."""
        kinds = _KIND
        for event in events:
            cat = event.cat
            kind = kinds.get(cat)
            if kind is None or event.ph != "X":
                continue
            name = event.name
            if kind == _CPU:
                if name.startswith("aten::") or cat == "gpu_user_annotation":
                    continue
            elif kind == _RUNTIME:
                if "Launch" not in name and "Memcpy" not in name and "Memset" not in name:
                    continue
            elif kind == _OTHER_DEVICE:
                self.other_device_events[cat] += 1
                continue
            start = event.ts
            length = event.dur
            if length is None:
                length = 0.0
            if start is None or not (isfinite(start) and isfinite(length)) or length < 0:
                self.bad_events += 1
                continue
            if self.origin_us is None:
                self.origin_us = start
            if kind == _GPU:
                self._gpu(cat, name, start, length, event.args)
            elif kind == _RUNTIME:
                self._runtime(name, start, length, event.args)
            else:
                self._cpu(cat, name, start, length)

    def _gpu(self, cat: str, name: str, start: float, length: float, args: EventArgs | None) -> None:
        key = (cat, name)
        known = self.names.get(key)
        if known is None:
            known = (len(self.name_list), CATEGORY_CODES[categorize(cat, name, None)])
            self.names[key] = known
            self.name_list.append(key)
        index, code = known
        correlation = -1
        if args is not None:
            if type(args.correlation) is int:
                correlation = args.correlation
            if args.collective is not None and code != CATEGORY_CODES["memcpy"]:
                code = _COMM  # PyTorch names the collective of a kernel it launched for c10d
            if code == _COMM and len(self.collectives) < MAX_COLLECTIVE_SAMPLES:
                self._collective(name, length, args)
        self.gpu_start.append(start)
        self.gpu_dur.append(length)
        self.gpu_cat.append(code)
        self.gpu_name.append(index)
        self.gpu_corr.append(correlation)

    def _collective(self, name: str, length: float, args: EventArgs) -> None:
        size = _message_bytes(args)
        if size is not None and size >= MIN_COLLECTIVE_BYTES and length > 0:
            group = args.group_size
            named = args.collective
            self.collectives.append(
                CollectiveSample(
                    named if isinstance(named, str) and named else collective_of(name, None),
                    size,
                    length * US,
                    int(group) if isinstance(group, int) else 0,
                )
            )

    def _runtime(self, name: str, start: float, length: float, args: EventArgs | None) -> None:
        if args is not None and type(args.correlation) is int:
            self.runtime_corr.append(args.correlation)
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


def _message_bytes(args: EventArgs) -> float | None:
    dtype = args.dtype
    if not isinstance(dtype, str):
        return None
    width = DTYPE_BYTES.get(dtype.lower())
    counts = [c for c in (args.in_elements, args.out_elements) if isinstance(c, int | float)]
    if width is None or not counts:
        return None
    return float(max(counts)) * width


def parse(path: Path) -> list[RankTrace]:
    stream = TraceEventStream(path, TraceEvent)
    collector = Collector()
    for block in stream.blocks():
        collector.add(block)
    return [analyse(path, stream, collector)]


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


class TraceSource(Protocol):
    """What :func:`analyse` reads of where the events came from (a trace stream, an nsys export)."""

    header: dict[str, Any]
    problems: StreamProblems
    events_read: int


def analyse(path: Path, stream: TraceSource, c: Collector) -> RankTrace:
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

    origin_us = c.origin_us or 0.0
    start = (np.frombuffer(c.gpu_start, dtype=np.float64) - origin_us) * US
    durations = np.frombuffer(c.gpu_dur, dtype=np.float64) * US
    end = start + durations
    codes = np.frombuffer(c.gpu_cat, dtype=np.int8)
    steps, from_markers = _windows(c, start, end)
    if start.size == 0:
        problems.append(
            "no GPU kernels or memcpys: compute, communication and idle time cannot be judged from this "
            "trace (record it with ProfilerActivity.CUDA)"
        )
    elif (thin := _too_thin(start, end, from_markers)) is not None:
        problems.append(thin)
        steps = []
    breakdown = _breakdown(c, start, end, codes, steps) if start.size and steps else []
    kernels_only = durations[codes != CATEGORY_CODES["memcpy"]]
    totals = _kernel_totals(c, durations, codes)
    num_comm = int(np.sum(codes == CATEGORY_CODES["comm"]))
    timeline = _timeline(start, end, codes, breakdown)
    chains = _chains(start, end, codes, breakdown)
    return RankTrace(
        file=str(path),
        rank=rank,
        rank_source=rank_source,
        world_size=world,
        backend=backend,
        device_name=device_name,
        steps=breakdown,
        steps_from_markers=from_markers,
        kernel_totals=totals,
        num_kernels=int(kernels_only.size),
        num_short_kernels=int(np.sum(kernels_only < SHORT_KERNEL_S)),
        median_kernel_s=float(np.median(kernels_only)) if kernels_only.size else None,
        num_comm_kernels=num_comm,
        num_comm_annotations=c.comm_annotations,
        cuda_graph_launches=c.graph_launches,
        launch_api_s=c.launch_api_us * US,
        collectives=c.collectives,
        timeline=timeline,
        clock_origin_s=origin_us * US,
        problems=problems,
        events=stream.events_read,
        chains=chains,
    )


def _chains(start: iv.Array, end: iv.Array, cat: Any, steps: list[StepBreakdown]) -> list[StepChain]:
    """Each step's communication kernels (start from the step's start, duration), in start order, and the
    end of its last GPU work: what the what-if replay of the ranks' collectives needs."""
    chains = []
    comm = cat == CATEGORY_CODES["comm"]
    for step in steps:
        lo, hi = step.start_s, step.start_s + step.duration_s
        inside = (start >= lo) & (start < hi)
        mask = inside & comm
        order = np.argsort(start[mask], kind="stable")
        starts = start[mask][order] - lo
        durations = end[mask][order] - start[mask][order]
        last = float(end[inside].max() - lo) if inside.any() else step.duration_s
        chains.append(StepChain(step.step, tuple(starts.tolist()), tuple(durations.tolist()), last))
    return chains


def _kernel_totals(c: Collector, durations: iv.Array, codes: Any) -> list[KernelTotal]:
    """The 50 GPU ops that took longest in total, by name (a name any of whose runs was a collective
    counts as communication)."""
    names = np.frombuffer(c.gpu_name, dtype=np.int64)
    if names.size == 0:
        return []
    count = len(c.name_list)
    total_s = np.bincount(names, weights=durations, minlength=count)
    runs = np.bincount(names, minlength=count)
    comm_runs = np.bincount(names[codes == _COMM], minlength=count)
    first_code = [code for _, code in sorted(c.names.values())]
    category = {code: name for name, code in CATEGORY_CODES.items()}
    top = np.argsort(-total_s, kind="stable")[:50]
    return [
        KernelTotal(
            c.name_list[i][1],
            float(total_s[i]),
            int(runs[i]),
            category[_COMM if comm_runs[i] else first_code[i]],
            is_tensor_core(c.name_list[i][1]),
        )
        for i in top
    ]


def _windows(
    c: Collector, start: iv.Array, end: iv.Array
) -> tuple[list[tuple[int | None, float, float]], bool]:
    """The analysis windows: one per ProfilerStep marker, else the whole GPU-active span."""
    if c.steps:
        # a marker can repeat (several profiler cycles in one file); keep each occurrence in time order
        o = c.origin_us or 0.0
        ordered = sorted(((s - o) * US, (e - o) * US, n) for n, s, e in c.steps if e > s)
        if not ordered:
            return [], True
        return [(n, s, e) for s, e, n in ordered], True
    if start.size:
        return [(None, float(start.min()), float(end.max()))], False
    return [], False


def _too_thin(start: iv.Array, end: iv.Array, from_markers: bool) -> str | None:
    """Why the GPU ops of a trace cannot make up a training step, or None when they can."""
    span_s = float(end.max() - start.min())
    if start.size >= MIN_GPU_OPS and (from_markers or span_s >= MIN_UNMARKED_SPAN_S):
        return None
    markers = "" if from_markers else ", no ProfilerStep markers"
    return (
        f"too short to hold a training step ({start.size} GPU op(s) over {units.format_duration(span_s)}"
        f"{markers}; at least {MIN_GPU_OPS} ops"
        + ("" if from_markers else f" over {units.format_duration(MIN_UNMARKED_SPAN_S)}")
        + "): the trace was cut or recorded nothing; its time breakdown is not judged"
    )


def _spans(spans: list[tuple[float, float]], origin_us: float) -> tuple[iv.Array, iv.Array]:
    if not spans:
        empty = np.zeros(0, dtype=np.float64)
        return empty, empty
    raw = (np.asarray(spans, dtype=np.float64) - origin_us) * US
    return iv.union(raw[:, 0], raw[:, 1])


def _breakdown(
    c: Collector,
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
    origin_us = c.origin_us or 0.0
    dl = _spans(c.dataloader, origin_us)
    ck = _spans(c.checkpoint, origin_us)
    gc = _spans(c.gc, origin_us)

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
    m_dataloader = measure(dl)
    exposed = {
        name: iv.intersect_in_windows(*spans, gap_s, gap_e, ws, we)
        for name, spans in (("dataloader", dl), ("checkpoint", ck), ("gc", gc))
    }
    sorted_start = np.sort(start)
    counts = np.searchsorted(sorted_start, we) - np.searchsorted(sorted_start, ws)
    result = []
    for index, (number, s, e) in enumerate(steps):
        duration = e - s
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
                dataloader_s=float(m_dataloader[index]),
                dataloader_exposed_s=float(exposed["dataloader"][index]),
                checkpoint_exposed_s=float(exposed["checkpoint"][index]),
                gc_exposed_s=float(exposed["gc"][index]),
                num_kernels=int(counts[index]),
            )
        )
    return result


def _split_gaps(
    c: Collector, start: iv.Array, gap_s: iv.Array, gap_e: iv.Array
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
        rt = (np.frombuffer(c.runtime_ts, dtype=np.float64) - (c.origin_us or 0.0)) * US
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
