"""Per-stage pipeline timelines in Chrome-trace form (Megatron-LM timers, ByteDance StragglerAnalysis).

Threads are named ``"PP rank <stage>, TP rank <t>, compute"`` (also ``pp-comm``, ``dp-comm``, ``misc``),
processes ``"DP rank [<d>]"``; ``forward-compute`` / ``backward-compute`` events carry ``args.step`` and
``args.mb_id``. Reduced to each stage's compute time per step and the step's span, which is what the
pipeline rules need (stage imbalance and bubble).
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path
from typing import Any

from mfukit.diagnose.records import PipelineTimeline, StagePhase, TimelineOps
from mfukit.diagnose.sources import Source
from mfukit.diagnose.sources.jsonstream import TraceEventStream

US = 1e-6
COMPUTE = frozenset({"forward-compute", "backward-compute"})
_STAGE = re.compile(r"PP rank (\d+)")
_DP = re.compile(r"DP rank \[?(\d+)")


def detect(path: Path, head: str) -> bool:
    return '"forward-compute"' in head or '"backward-compute"' in head or "PP rank 0, TP rank" in head


def parse(path: Path) -> list[PipelineTimeline]:
    stream = TraceEventStream(path, dict)
    thread_names: dict[tuple[Any, Any], str] = {}
    process_names: dict[Any, str] = {}
    compute: dict[tuple[Any, Any, int], float] = defaultdict(float)
    span: dict[tuple[Any, int], list[float]] = {}
    forwards: dict[tuple[Any, Any, int], int] = defaultdict(int)
    chunks: set[Any] = set()
    gc_us = 0.0
    steps_seen: set[int] = set()
    spans: list[tuple[int, Any, Any, str, int, float, float]] = []
    for event in stream.events():
        phase = event.get("ph")
        if phase == "M":
            name = event.get("args", {}).get("name") if isinstance(event.get("args"), dict) else None
            if event.get("name") == "thread_name" and isinstance(name, str):
                thread_names[(event.get("pid"), event.get("tid"))] = name
            elif event.get("name") == "process_name" and isinstance(name, str):
                process_names[event.get("pid")] = name
            continue
        args = event.get("args")
        if phase != "X" or not isinstance(args, dict) or not isinstance(args.get("step"), int):
            continue
        try:
            ts = float(event["ts"])
            dur = float(event.get("dur", 0.0))
        except (KeyError, TypeError, ValueError):
            continue
        step = int(args["step"])
        steps_seen.add(step)
        key = (event.get("pid"), step)
        bounds = span.setdefault(key, [ts, ts + dur])
        bounds[0] = min(bounds[0], ts)
        bounds[1] = max(bounds[1], ts + dur)
        cat = event.get("cat") or event.get("name")
        seq = args.get("seq_id")
        if isinstance(cat, str) and isinstance(seq, int):
            spans.append((step, event.get("pid"), event.get("tid"), cat, seq, ts * US, dur * US))
        if cat in COMPUTE:
            compute[(event.get("pid"), event.get("tid"), step)] += dur
            if cat == "forward-compute":
                forwards[(event.get("pid"), event.get("tid"), step)] += 1
                if args.get("model_chunk") is not None:
                    chunks.add(args.get("model_chunk"))
        elif cat == "gc":
            gc_us += dur
    problems = list(stream.problems.notes)
    phases: list[StagePhase] = []
    stages: set[int] = set()
    dps: set[int] = set()
    for (pid, tid, step), busy_us in sorted(compute.items(), key=lambda item: str(item[0])):
        stage_match = _STAGE.search(thread_names.get((pid, tid), ""))
        dp_match = _DP.search(process_names.get(pid, ""))
        if stage_match is None:
            problems.append(f"thread {tid} of process {pid} has no 'PP rank' name: its stage is unknown")
            continue
        stage = int(stage_match.group(1))
        dp = int(dp_match.group(1)) if dp_match else int(pid) if isinstance(pid, int) else 0
        stages.add(stage)
        dps.add(dp)
        lo, hi = span[(pid, step)]
        phases.append(StagePhase(step, stage, dp, busy_us * US, (hi - lo) * US))
    ops = _ops(spans, thread_names, process_names)
    # one forward per micro-batch and model chunk (interleaved schedules run several chunks per stage)
    counts = [count // max(1, len(chunks)) for count in forwards.values()]
    return [
        PipelineTimeline(
            file=str(path),
            num_stages=len(stages),
            num_microbatches=max(counts) if counts else 0,
            dp_size=len(dps),
            phases=phases,
            gc_s_per_step=gc_us * US / max(1, len(steps_seen) * max(1, len(dps))),
            problems=problems,
            ops=ops,
        )
    ]


def _ops(
    spans: list[tuple[int, Any, Any, str, int, float, float]],
    thread_names: dict[tuple[Any, Any], str],
    process_names: dict[Any, str],
) -> TimelineOps | None:
    """Every span with its DP rank (the process) and stage (the thread's ``PP rank``), for the replay."""
    rows = []
    for step, pid, tid, optype, seq, start_s, duration_s in spans:
        stage = _STAGE.search(thread_names.get((pid, tid), ""))
        dp_match = _DP.search(process_names.get(pid, ""))
        dp = int(dp_match.group(1)) if dp_match else pid if isinstance(pid, int) else None
        if stage is None or dp is None:
            return None
        rows.append((step, dp, int(stage.group(1)), optype, seq, start_s, duration_s))
    if not rows:
        return None
    columns = list(zip(*rows, strict=True))
    return TimelineOps(*(tuple(column) for column in columns))


SOURCE = Source(
    kind="pipeline_timeline",
    description="per-stage pipeline timeline (Megatron timers / StragglerAnalysis Chrome trace)",
    detect=detect,
    parse=parse,
)
