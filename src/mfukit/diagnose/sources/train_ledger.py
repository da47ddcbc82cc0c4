"""An ``mfukit train`` run directory's goodput ledger: ``ledger.jsonl`` (launch, attempts, saves, commits,
faults, hangs; one JSON object per line with ``t``, ``kind`` and ``attempt``) read together with the
``metrics.jsonl`` beside it, and accounted by ``ft.ledger.account`` exactly as ``mfukit train`` does:
restarts and what each cost, checkpoint saves and their blocking time, the measured ETTR.

The failure-rate gate takes the run's own interruptions and its measured checkpoint interval and save
time from it; the storage gate the blocking time of a save. ``metrics.jsonl`` itself is a training log
(``training_log``: ``mfukit-jsonl``), which also takes the saves from this ledger to place its stalls.
"""

from __future__ import annotations

import json
from pathlib import Path

from mfukit.diagnose.records import DamagedInput, LogEvent, TrainLedger
from mfukit.diagnose.sources import Source
from mfukit.ft.ledger import account, read_records

METRICS = "metrics.jsonl"
LEDGER = "ledger.jsonl"


def detect(path: Path, head: str) -> bool:
    first = head.lstrip().split("\n", 1)[0]
    if not first.startswith("{"):
        return False
    try:
        record = json.loads(first)
    except json.JSONDecodeError:
        return False
    return isinstance(record, dict) and {"t", "kind", "attempt"} <= set(record)


def parse(path: Path) -> list[TrainLedger | DamagedInput]:
    try:
        events, torn_events = read_records(path)
        steps, torn_steps = read_records(path.parent / METRICS)
        goodput = account(events, steps)
    except (OSError, UnicodeDecodeError, KeyError, ValueError, TypeError) as error:
        return [
            DamagedInput(
                str(path), f"not an mfukit train ledger with its metrics ({type(error).__name__}: {error})"
            )
        ]
    problems = []
    if not (path.parent / METRICS).is_file():
        problems.append(f"no {METRICS} beside the ledger: productive time and recoveries are unknown")
    if torn_events or torn_steps:
        problems.append(f"{torn_events + torn_steps} unreadable line(s) (a write cut by a kill) were skipped")
    worlds = [int(e["world_size"]) for e in events if isinstance(e.get("world_size"), int)]
    return [TrainLedger(str(path), goodput, worlds[-1] if worlds else None, problems)]


def checkpoint_events(metrics_path: Path) -> list[LogEvent]:
    """The saves recorded in the ledger beside ``metrics_path``, as the training log's checkpoint events
    (step, blocking seconds, wall-clock time); none when there is no ledger."""
    try:
        events, _ = read_records(metrics_path.parent / LEDGER)
    except (OSError, UnicodeDecodeError):
        return []
    return [
        LogEvent(
            "checkpoint",
            number,
            f"checkpoint at step {event.get('step')} ({LEDGER})",
            int(event["step"]),
            float(event.get("blocking_s", 0.0)),
            float(event["t"]),
        )
        for number, event in enumerate(events, start=1)
        if event.get("kind") == "checkpoint"
        and isinstance(event.get("step"), int)
        and isinstance(event.get("t"), int | float)
        and isinstance(event.get("blocking_s", 0.0), int | float)
    ]


SOURCE = Source(
    kind="train_ledger",
    description="mfukit train goodput ledger (ledger.jsonl, with the metrics.jsonl beside it)",
    detect=detect,
    parse=parse,
)
