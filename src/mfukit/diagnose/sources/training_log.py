"""Training logs: Megatron-LM, DeepSpeed, torchtitan, Hugging Face Trainer, Lightning, mfukit train's metrics.jsonl, generic.

Each line is matched against the framework's own format (detected from the file's head); whatever
carries a step number with a step time, a throughput, a loss or an MFU becomes a :class:`StepRecord`.
Checkpoint saves, GC passes and Megatron's straggler reports become :class:`LogEvent`. Megatron's
``elapsed time per iteration`` leaves out checkpoint saves; the wall-clock stamps of its lines do not,
so both are kept (``wall_s``) and the rules compare them.
"""

from __future__ import annotations

import ast
import calendar
import json
import math
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from mfukit.diagnose.records import LogEvent, StepRecord, TrainingLog
from mfukit.diagnose.sources import Source
from mfukit.diagnose.sources.jsonstream import open_text

ANSI = re.compile(r"\x1b\[[0-9;]*m")
# the fraction's digits follow a literal point: `\d[\d,]*\.?\d*` split a run of digits every way
NUMBER = r"[-+]?\d[\d,]*(?:\.\d*)?(?:[eE][-+]?\d+)?"
WALL = re.compile(r"(\d{4})-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)(?:[.,](\d+))?")

MEGATRON_ITER = re.compile(r"iteration\s+(\d+)/\s*\d+\s*\|")
MEGATRON_FIELDS = {
    "elapsed time per iteration (ms)": "step_time_ms",
    "throughput per GPU (TFLOP/s/GPU)": "tflops_per_gpu",
    "global batch size": "global_batch_size",
    "lm loss": "loss",
}
MEGATRON_TIMER = re.compile(r"^\s*([\w-]+) \.{3,}\s*:\s*\(\s*(" + NUMBER + r")\s*,\s*(" + NUMBER + r")\s*\)")
MEGATRON_TIMER_MAX = re.compile(r"^\s{0,8}([\w-]{1,80}) \.{3,80}\s{0,4}: ?(" + NUMBER + r")\s{0,4}$")
MEGATRON_SAVE = re.compile(r"saving checkpoint at iteration\s+(\d+)")
MEGATRON_SAVED = re.compile(r"successfully saved checkpoint (?:from|at) iteration\s+(\d+)")
STRAGGLER_FIELD = re.compile(r"(Mn|Mx)(\w+)/Rnk:\s*(" + NUMBER + r")\s*([A-Za-z%]*)/(\d+)")

TITAN_STEP = re.compile(r"step:\s*(\d+)")
TITAN_FIELDS = {
    "loss": re.compile(r"loss:\s*(" + NUMBER + ")"),
    "tps": re.compile(r"tps:\s*(" + NUMBER + ")"),
    "tflops": re.compile(r"tflops:\s*(" + NUMBER + ")"),
    "mfu": re.compile(r"mfu:\s*(" + NUMBER + r")%"),
}
TITAN_GC = re.compile(r"GC.*?took\s+(" + NUMBER + r")\s*s")
TITAN_CKPT = re.compile(r"[Ff]inished saving the checkpoint.*?in\s+(" + NUMBER + r")\s*seconds")

# DeepSpeed's ThroughputTimer (utils/timer.py): global samples/s over all DP replicas, timed on rank 0; and
# with wall_clock_breakdown, the per-GA-boundary timers in ms (print_dist, no logger prefix).
DS_THROUGHPUT = re.compile(
    r"global_step=(\d{1,12}), RunningAvgSamplesPerSec=(" + NUMBER + r"), CurrSamplesPerSec=(" + NUMBER + ")"
)
DS_TIMERS = re.compile(r"time \(ms\) \| fwd: ")
DS_TIMER_FIELD = re.compile(r"^\s{0,4}([a-z_]{1,40}): ?(" + NUMBER + r")\s{0,4}$")
DS_SAVED = re.compile(r"[Ss]aving model checkpoint|\[Torch\] Saved|zero checkpoint saved")

TQDM = re.compile(r"\|\s*(\d+)/(\d+)\s*\[[^\]<]*<[^\],]*,\s*(" + NUMBER + r")\s*(s/it|it/s)")
HF_DICT = re.compile(r"^\{'(loss|train_runtime)'", re.MULTILINE)
HF_SAVE = re.compile(r"Saving model checkpoint to .*checkpoint-(\d+)")
LIGHTNING_LOSS = re.compile(r"(?:train_loss|loss)=(" + NUMBER + ")")

GENERIC_STEP = re.compile(r"\b(?:step|iter(?:ation)?)\b\s*[:=#]?\s*(\d+)", re.IGNORECASE)
GENERIC_TIME = re.compile(
    r"\b(?:step[_ ]?time|time|elapsed|iter[_ ]?time|dt)\b\s*[:=]?\s*(" + NUMBER + r")\s*(ms|s)\b",
    re.IGNORECASE,
)
GENERIC_TPS = re.compile(
    r"\b(?:tokens?/s|tok/s|tps|tokens_per_s(?:ec)?)\b\s*[:=]?\s*(" + NUMBER + ")", re.IGNORECASE
)
GENERIC_LOSS = re.compile(r"\bloss\b\s*[:=]?\s*(" + NUMBER + ")", re.IGNORECASE)
GENERIC_CKPT = re.compile(r"(sav(?:e|ing)|wr(?:ote|iting)).{0,40}checkpoint", re.IGNORECASE)


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def wall_seconds(line: str) -> float | None:
    """Seconds since the epoch of the first ``YYYY-MM-DD HH:MM:SS[.fff]`` stamp in ``line`` (as UTC)."""
    match = WALL.search(line)
    if match is None:
        return None
    year, month, day, hour, minute, second = (int(match.group(i)) for i in range(1, 7))
    try:
        seconds = calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0))
    except (ValueError, OverflowError):
        return None
    fraction = match.group(7)
    return seconds + (float("0." + fraction) if fraction else 0.0)


def framework_of(head: str) -> str | None:
    """Which framework wrote the log, from its first lines."""
    lines = [ANSI.sub("", line).strip() for line in head.splitlines()[:400] if line.strip()]
    if lines and lines[0].startswith("{") and '"step"' in lines[0]:
        return "mfukit-jsonl"
    text = "\n".join(lines)
    if MEGATRON_ITER.search(text) and "elapsed time per iteration" in text:
        return "megatron"
    # DeepSpeed's own throughput line (``global_step=N, RunningAvgSamplesPerSec=``) or its config echo;
    # Megatron-DeepSpeed prints an older timer line (``0/10, RunningAvgSamplesPerSec=``) beside Megatron's
    # iteration lines, which are the ones to read there
    if DS_THROUGHPUT.search(text) or "DeepSpeedEngine configuration:" in text:
        return "deepspeed"
    if TITAN_STEP.search(text) and ("tps:" in text or "mfu:" in text) and "loss:" in text:
        return "torchtitan"
    if "Epoch" in text and TQDM.search(text):
        return "lightning"
    if HF_DICT.search(text) or (("/it]" in text or "it/s]" in text) and "{'loss'" in text):
        return "huggingface"
    if GENERIC_STEP.search(text) and (GENERIC_TIME.search(text) or GENERIC_TPS.search(text)):
        return "generic"
    return None


def detect(path: Path, head: str) -> bool:
    return framework_of(head) is not None


class _Parser:
    def __init__(self, framework: str) -> None:
        self.framework = framework
        self.steps: list[StepRecord] = []
        self.events: list[LogEvent] = []
        self.global_batch: int | None = None
        self.last_step: int | None = None
        self.attempt: object = None
        self.bad_lines = 0
        self.summary = False
        self.timers_ms: dict[str, list[float]] = {}
        self.handle: Callable[[int, str], None] = getattr(self, "_" + framework.replace("-", "_"))

    def _mfukit_jsonl(self, number: int, line: str) -> None:
        """One line of ``mfukit train``'s metrics.jsonl (``train.metrics.StepMetrics``, written by rank 0):
        step, attempt, t_start / t_end (epoch seconds), step_time_s, data_time_s, loss, tokens_per_s, mfu,
        memory_bytes (not weighed here). ``tokens_per_s`` is the whole job's (global batch tokens / step time), as it is in
        every log read here; per GPU it is that over the GPUs. A step run again after a restart (not past the
        furthest step reached) is rework: kept, with ``interval_steps`` 0, so that wall-clock throughput
        counts progress only; the first step of each later attempt carries no wall stamp, so the restart's
        gap is not taken for a stall (the run's goodput ledger accounts for it)."""
        if not line.startswith("{"):
            return
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            self.bad_lines += 1
            return
        if not isinstance(record, dict) or not isinstance(record.get("step"), int):
            return
        step = record["step"]
        attempt = record.get("attempt")
        restarted = bool(self.steps) and attempt != self.attempt
        self.attempt = attempt
        interval = 1 if self.last_step is None else max(0, step - self.last_step)
        self.last_step = step if self.last_step is None else max(self.last_step, step)
        self.steps.append(
            StepRecord(
                step=step,
                step_time_s=_float(record.get("step_time_s")),
                tokens_per_s=_float(record.get("tokens_per_s")),
                loss=_float(record.get("loss")),
                mfu=_float(record.get("mfu")),
                data_time_s=_float(record.get("data_time_s")),
                wall_s=None if restarted else _float(record.get("t_end")),
                interval_steps=interval,
            )
        )

    def _megatron(self, number: int, line: str) -> None:
        iteration = MEGATRON_ITER.search(line)
        if iteration:
            values: dict[str, float] = {}
            for part in line.split("|"):
                key, _, value = part.partition(":")
                field = MEGATRON_FIELDS.get(key.strip())
                if field and re.fullmatch(NUMBER, value.strip()):
                    values[field] = _number(value.strip())
            step = int(iteration.group(1))
            interval = step - self.last_step if self.last_step is not None and step > self.last_step else 1
            self.last_step = step
            if "global_batch_size" in values:
                self.global_batch = int(values["global_batch_size"])
            step_ms = values.get("step_time_ms")
            self.steps.append(
                StepRecord(
                    step=step,
                    step_time_s=step_ms / 1e3 if step_ms is not None else None,
                    loss=values.get("loss"),
                    tflops_per_gpu=values.get("tflops_per_gpu"),
                    wall_s=wall_seconds(line),
                    interval_steps=interval,
                )
            )
            return
        timer = MEGATRON_TIMER.match(line)
        only_max = None if timer else MEGATRON_TIMER_MAX.match(line)
        if timer or only_max:
            if timer:
                name, slowest = timer.group(1), _number(timer.group(3))
            else:
                assert only_max is not None  # one of the two matched
                name, slowest = only_max.group(1), _number(only_max.group(2))
            self.timers_ms.setdefault(name, []).append(slowest)
            if name == "save-checkpoint":
                self.events.append(
                    LogEvent("checkpoint", number, line.strip(), self.last_step, slowest / 1e3)
                )
            elif name in ("batch-generator", "data-loading"):
                self.events.append(
                    LogEvent("straggler_report", number, line.strip(), self.last_step, slowest / 1e3,
                             values=(("data_time_max_s", slowest / 1e3),))
                )  # fmt: skip
            return
        save = MEGATRON_SAVED.search(line) or MEGATRON_SAVE.search(line)
        if save:
            self.events.append(
                LogEvent("checkpoint", number, line.strip(), int(save.group(1)), None, wall_seconds(line))
            )
            return
        if "/Rnk:" in line:
            values_found = tuple(
                (f"{kind}{metric}", _number(value))
                for kind, metric, value, _unit, _rank in STRAGGLER_FIELD.findall(line)
            ) + tuple(
                (f"{kind}{metric}_rank", float(rank))
                for kind, metric, _v, _u, rank in STRAGGLER_FIELD.findall(line)
            )
            if values_found:
                self.events.append(
                    LogEvent("straggler_report", number, line.strip(), self.last_step, values=values_found)
                )

    def _deepspeed(self, number: int, line: str) -> None:
        """ThroughputTimer lines (``epoch=0/micro_step=40/global_step=10, RunningAvgSamplesPerSec=...,
        CurrSamplesPerSec=...``: the whole job's samples/s at that global step) and, with
        ``wall_clock_breakdown``, ``time (ms) | fwd: ... | bwd: ... | bwd_allreduce: ... | step: ...`` at each
        gradient-accumulation boundary (each the sum over its micro-steps), kept as timers."""
        found = DS_THROUGHPUT.search(line)
        if found:
            step = int(found.group(1))
            interval = step - self.last_step if self.last_step is not None and step > self.last_step else 1
            self.last_step = step
            self.steps.append(
                StepRecord(step=step, samples_per_s=_number(found.group(3)), wall_s=wall_seconds(line),
                           interval_steps=interval)
            )  # fmt: skip
            return
        if DS_TIMERS.search(line):
            for part in line.split("|")[1:]:
                field = DS_TIMER_FIELD.match(part)
                if field:
                    self.timers_ms.setdefault(field.group(1), []).append(_number(field.group(2)))
            return
        if DS_SAVED.search(line):
            self.events.append(
                LogEvent("checkpoint", number, line.strip(), self.last_step, None, wall_seconds(line))
            )

    def _torchtitan(self, number: int, line: str) -> None:
        gc = TITAN_GC.search(line)
        if gc:
            self.events.append(LogEvent("gc", number, line.strip(), self.last_step, _number(gc.group(1))))
            return
        saved = TITAN_CKPT.search(line)
        if saved:
            self.events.append(
                LogEvent("checkpoint", number, line.strip(), self.last_step, _number(saved.group(1)))
            )
            return
        step = TITAN_STEP.search(line)
        if not step or "loss:" not in line:
            return
        found = {
            key: _number(m.group(1)) for key, pattern in TITAN_FIELDS.items() if (m := pattern.search(line))
        }
        current = int(step.group(1))
        interval = current - self.last_step if self.last_step is not None and current > self.last_step else 1
        self.last_step = current
        mfu = found.get("mfu")
        wall = wall_seconds(line)
        previous = self.steps[-1].wall_s if self.steps else None
        # torchtitan prints no step time: the logger's stamps give it (the interval's wall time per step,
        # checkpoint saves and GC inside the interval included, as they are in its own tps)
        step_s = (
            (wall - previous) / interval
            if wall is not None and previous is not None and wall > previous
            else None
        )
        self.steps.append(
            StepRecord(
                step=current,
                step_time_s=step_s,
                tokens_per_s_per_gpu=found.get("tps"),
                loss=found.get("loss"),
                mfu=mfu / 100.0 if mfu is not None else None,
                tflops_per_gpu=found.get("tflops"),
                wall_s=wall,
                interval_steps=interval,
            )
        )

    def _progress(self, number: int, line: str, loss: float | None) -> None:
        bar = TQDM.search(line)
        if not bar:
            return
        step = int(bar.group(1))
        rate = _number(bar.group(3))
        if step == 0 or rate <= 0 or step == self.last_step:
            return
        self.last_step = step
        seconds = rate if bar.group(4) == "s/it" else 1.0 / rate
        self.steps.append(StepRecord(step=step, step_time_s=seconds, loss=loss))

    def _huggingface(self, number: int, line: str) -> None:
        saved = HF_SAVE.search(line)
        if saved:
            self.events.append(LogEvent("checkpoint", number, line.strip(), int(saved.group(1))))
            return
        if line.startswith("{'train_runtime'"):
            self._hf_summary(line)
            return
        if HF_DICT.search(line):
            loss = re.search(r"'loss':\s*'?(" + NUMBER + ")", line)
            if loss and self.steps and self.steps[-1].loss is None:
                last = self.steps[-1]
                self.steps[-1] = StepRecord(
                    step=last.step, step_time_s=last.step_time_s, loss=_number(loss.group(1))
                )
            return
        self._progress(number, line, None)

    def _hf_summary(self, line: str) -> None:
        """The Trainer's closing ``{'train_runtime': ..., 'train_samples_per_second': ..., ...}`` (printed by
        its ProgressCallback or PrinterCallback; values are numbers, or strings in the newest versions).
        ``train_samples_per_second`` is the whole job's: max_steps x the total batch (per device x gradient
        accumulation x world size), or the dataset's samples x epochs, over ``train_runtime`` — the whole
        training loop, evaluation and checkpoint saves included."""
        try:
            summary = ast.literal_eval(line.strip())
        except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError) as error:
            raise ValueError("not a Python dict") from error
        if not isinstance(summary, dict):
            raise ValueError("not a Python dict")
        try:
            samples = float(summary.get("train_samples_per_second", 0.0))
            total = round(
                float(summary.get("train_runtime", 0.0)) * float(summary.get("train_steps_per_second", 0.0))
            )
        except TypeError as error:
            raise ValueError("a value is not a number") from error
        if samples > 0:
            self.steps.append(
                StepRecord(
                    step=max(total, self.last_step or 0), samples_per_s=samples, interval_steps=total or 1
                )
            )
            self.summary = True

    def _lightning(self, number: int, line: str) -> None:
        loss = LIGHTNING_LOSS.search(line)
        self._progress(number, line, _number(loss.group(1)) if loss else None)

    def _generic(self, number: int, line: str) -> None:
        if GENERIC_CKPT.search(line):
            self.events.append(
                LogEvent("checkpoint", number, line.strip(), self.last_step, None, wall_seconds(line))
            )
        step = GENERIC_STEP.search(line)
        if not step:
            return
        seconds = GENERIC_TIME.search(line)
        tps = GENERIC_TPS.search(line)
        loss = GENERIC_LOSS.search(line)
        if not (seconds or tps):
            return
        self.last_step = int(step.group(1))
        value = (
            _number(seconds.group(1)) / (1e3 if seconds.group(2).lower() == "ms" else 1.0)
            if seconds
            else None
        )
        self.steps.append(
            StepRecord(
                step=self.last_step,
                step_time_s=value,
                tokens_per_s=_number(tps.group(1)) if tps else None,
                loss=_number(loss.group(1)) if loss else None,
                wall_s=wall_seconds(line),
            )
        )


def _float(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def parse(path: Path) -> list[TrainingLog]:
    with open_text(path) as stream:
        head_text = stream.read(1 << 16)
    framework = framework_of(head_text) or "generic"
    parser = _Parser(framework)
    problems: list[str] = []
    with open_text(path) as stream:
        for number, raw in enumerate(stream, start=1):
            for piece in raw.split("\r"):
                line = ANSI.sub("", piece).rstrip("\n")
                if line:
                    try:
                        parser.handle(number, line)
                    except (ValueError, OverflowError):
                        parser.bad_lines += 1
    if framework == "mfukit-jsonl":
        from mfukit.diagnose.sources.train_ledger import checkpoint_events

        parser.events.extend(checkpoint_events(path))
    steps, out_of_range = _in_range(parser.steps)
    if parser.bad_lines:
        problems.append(f"{parser.bad_lines} lines could not be read and were skipped")
    if out_of_range:
        problems.append(
            f"{out_of_range} steps logged an impossible value (a time, rate or count below zero, or an MFU "
            "outside 0-100 %): those values were ignored"
        )
    if framework == "lightning" or (framework == "huggingface" and not parser.summary):
        problems.append("step times come from the progress bar's smoothed rate: single slow steps are damped")
    if not steps:
        problems.append("no training steps found in the log")
    return [
        TrainingLog(
            str(path), framework, steps, parser.events, parser.global_batch, problems, parser.timers_ms
        )
    ]


def read_line(framework: str, line: str) -> StepRecord | LogEvent | None:
    """One line of a ``framework`` log (a :func:`framework_of` name) as the record it holds, or None: the
    per-line parser of :func:`parse` without its memory of earlier lines (so a step's ``interval_steps``
    is 1). For tools that follow a log as it grows (``mfukit watch``)."""
    parser = _Parser(framework)
    text = ANSI.sub("", line).rstrip("\n")
    if text:
        parser.handle(0, text)
    if parser.steps:
        return parser.steps[0]
    return parser.events[0] if parser.events else None


_POSITIVE = ("step_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "samples_per_s", "mfu", "tflops_per_gpu")
"""Step fields that a step that ran cannot log as zero or less (a zero step time would divide by zero)."""


def _in_range(steps: list[StepRecord]) -> tuple[list[StepRecord], int]:
    """The steps with every impossible value (non-positive time or rate, negative data time, NaN, an MFU
    above 1) set to None, and how many steps had one: a log's number is evidence only when it can be."""
    kept: list[StepRecord] = []
    changed = 0
    for step in steps:
        bad: dict[str, Any] = {
            name: None
            for name in _POSITIVE
            if (value := getattr(step, name)) is not None and not (math.isfinite(value) and value > 0)
        }
        if step.mfu is not None and step.mfu > 1.0:
            bad["mfu"] = None
        if step.data_time_s is not None and not (math.isfinite(step.data_time_s) and step.data_time_s >= 0):
            bad["data_time_s"] = None
        changed += bool(bad)
        kept.append(replace(step, **bad) if bad else step)
    return kept, changed


SOURCE = Source(
    kind="training_log",
    description="training log: Megatron-LM, DeepSpeed, torchtitan, HF Trainer, Lightning, mfukit train metrics.jsonl, generic",
    detect=detect,
    parse=parse,
)
