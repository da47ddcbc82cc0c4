"""One log's lines to step records and events, with the parsers ``mfukit diagnose`` reads the whole file with.

The kind is detected as diagnose detects it (``training_log.framework_of``), on the file's first lines
and then on each new line until one is recognised (a job prints its start-up banner long before its first
step); the lines read before that are kept and replayed. Each line then goes through the same per-line
handler of ``diagnose.sources.training_log`` that ``mfukit diagnose`` runs, so a step read live is the
step the diagnosis reads later. DeepSpeed's ThroughputTimer line is the one kind that parser does not
read yet; :func:`deepspeed_line` reads it here.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from mfukit.diagnose.records import LogEvent, StepRecord
from mfukit.diagnose.sources import training_log
from mfukit.diagnose.sources.training_log import ANSI, NUMBER, framework_of, wall_seconds

HEAD_LINES = 400
"""Lines diagnose's detection looks at (``framework_of``); kept for replay until the kind is known."""

DEEPSPEED_THROUGHPUT = re.compile(
    r"global_step=(\d+),\s*RunningAvgSamplesPerSec=(" + NUMBER + r"),\s*CurrSamplesPerSec=(" + NUMBER + ")"
)
MEGATRON_WORLD = re.compile(r"using world size:\s*(\d+)")
MEGATRON_SIZES = {  # the world-size line's keys, main and 2023 (reference/logs-and-monitoring.md 1.2)
    "data-parallel size": "dp",
    "data-parallel-size": "dp",
    "context-parallel size": "cp",
    "tensor-model-parallel size": "tp",
    "pipeline-model-parallel size": "pp",
}
KINDS = ("megatron", "torchtitan", "huggingface", "lightning", "deepspeed", "mfukit-jsonl", "generic")


def kind_of(head: str) -> str | None:
    """The log kind of ``head`` (some lines of it): DeepSpeed's throughput line, else diagnose's detection."""
    if DEEPSPEED_THROUGHPUT.search(head):
        return "deepspeed"
    return framework_of(head)


def megatron_layout(line: str) -> dict[str, int] | None:
    """TP, PP, DP (and CP) from Megatron's ``using world size: ...`` line (rank 0, at start-up), read by key."""
    if "using world size" not in line or MEGATRON_WORLD.search(line) is None:
        return None
    layout: dict[str, int] = {}
    for part in line.split(","):
        key, _, value = part.partition(":")
        field_name = MEGATRON_SIZES.get(key.strip())
        if field_name and value.strip().isdigit():
            layout[field_name] = int(value.strip())
    return layout if {"tp", "pp", "dp"} <= set(layout) else None


@dataclass
class Parsed:
    steps: list[StepRecord] = field(default_factory=list)
    events: list[LogEvent] = field(default_factory=list)
    bad_lines: int = 0
    restarted: bool = False
    """The job's own attempt counter moved on (mfukit train's metrics.jsonl)."""


class _DeepSpeed:
    """DeepSpeed's ``ThroughputTimer`` line (``utils/timer.py``): every ``steps_per_print`` global steps on
    rank 0, ``CurrSamplesPerSec`` = the whole job's train batch over the latest step's timed seconds."""

    def __init__(self) -> None:
        self.steps: list[StepRecord] = []
        self.events: list[LogEvent] = []
        self.bad_lines = 0
        self.attempt: object = None
        self.last_step: int | None = None
        self.global_batch: int | None = None

    def handle(self, number: int, line: str) -> None:
        match = DEEPSPEED_THROUGHPUT.search(line)
        if match is None:
            return
        step = int(match.group(1))
        interval = step - self.last_step if self.last_step is not None and step > self.last_step else 1
        self.last_step = step
        self.steps.append(
            StepRecord(
                step=step,
                samples_per_s=float(match.group(3).replace(",", "")),
                wall_s=wall_seconds(line),
                interval_steps=interval,
            )
        )


class _Handler:
    """What both parsers offer: per-line ``handle`` and the lists it appends to."""

    steps: list[StepRecord]
    events: list[LogEvent]
    bad_lines: int
    attempt: object
    global_batch: int | None
    handle: Callable[[int, str], None]


class LineReader:
    """Feeds one log's lines, one at a time, to the parser of its kind."""

    def __init__(self, kind: str | None = None) -> None:
        self.kind: str | None = None
        self.handler: _Handler | None = None
        self.number = 0
        self.head: list[str] = []
        self.layout: dict[str, int] | None = None
        """The parallel layout the log states (Megatron's world-size line), once seen."""
        if kind is not None:
            self._start(kind)

    def _start(self, kind: str) -> None:
        self.kind = kind
        handler: object = _DeepSpeed() if kind == "deepspeed" else training_log._Parser(kind)
        self.handler = handler  # type: ignore[assignment]

    @property
    def global_batch_size(self) -> int | None:
        """The global batch (sequences) the log itself states (Megatron's iteration line)."""
        return self.handler.global_batch if self.handler is not None else None

    def feed(self, text: str, *, undecodable: bool = False) -> Parsed:
        """Step records and events from one more line (or from the replay of the head once its kind is
        known); a line the parser cannot read counts in ``bad_lines``."""
        self.number += 1
        parsed = Parsed(bad_lines=1 if undecodable else 0)
        if self.layout is None:
            self.layout = megatron_layout(text)
        if self.handler is None:
            self.head.append(text)
            kind = kind_of("\n".join(self.head)) if len(self.head) <= HEAD_LINES else kind_of(text)
            if kind is None:
                if len(self.head) > HEAD_LINES:
                    self.head = self.head[-HEAD_LINES:]
                return parsed
            self._start(kind)
            lines, self.head = self.head, []
            first = self.number - len(lines) + 1
            for offset, line in enumerate(lines):
                self._handle(first + offset, line, parsed)
            return parsed
        self._handle(self.number, text, parsed)
        return parsed

    def _handle(self, number: int, text: str, parsed: Parsed) -> None:
        handler = self.handler
        assert handler is not None
        before_bad, attempt, kept = handler.bad_lines, handler.attempt, len(handler.steps)
        for piece in text.split("\r"):  # progress bars redraw with carriage returns
            line = ANSI.sub("", piece)
            if not line:
                continue
            try:
                handler.handle(number, line)
            except (
                Exception
            ):  # a line the parser cannot survive is one unreadable line, never a dead exporter
                handler.bad_lines += 1
        parsed.steps.extend(handler.steps[kept:])
        parsed.events.extend(handler.events)
        parsed.bad_lines += handler.bad_lines - before_bad
        parsed.restarted = parsed.restarted or (attempt is not None and handler.attempt != attempt)
        # the parser looks back at its last step only (a restart, a loss line after a progress bar)
        del handler.steps[:-1]
        handler.events.clear()
