"""Fault injection for tests and drills: ``--inject kill@step=20``, ``hang@step=N``, ``crash-during-save@step=N``,
``slow-rank@rank=R:factor=F``.

Each one-shot fault fires once per run: the rank that fires it first creates a marker file with
``O_EXCL`` under ``<out>/faults/``, so the restarted job (which runs the same steps again after resuming)
does not fail forever. ``slow-rank`` is permanent: the rank stretches its compute by ``factor`` on every
step, which is what a throttled GPU or a noisy neighbour looks like to the rest of the job.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from mfukit.errors import InputError, UnknownNameError

FaultKind = Literal["kill", "hang", "crash-during-save", "slow-rank"]
KINDS: tuple[FaultKind, ...] = ("kill", "hang", "crash-during-save", "slow-rank")
EXIT_CRASH_IN_SAVE = 86
"""Exit status of a rank killed by ``crash-during-save`` (after the shards, before the commit)."""

_KEYS: dict[FaultKind, tuple[set[str], set[str]]] = {
    # kind: (required keys, optional keys)
    "kill": ({"step"}, {"rank"}),
    "hang": ({"step"}, {"rank"}),
    "crash-during-save": ({"step"}, set()),
    "slow-rank": ({"rank", "factor"}, set()),
}
_EXAMPLE = (
    "kill@step=20, kill@step=20:rank=1, hang@step=5, crash-during-save@step=10, slow-rank@rank=1:factor=3"
)


@dataclass(frozen=True)
class Fault:
    kind: FaultKind
    step: int | None = None
    rank: int = 0
    factor: float = 1.0
    index: int = 0

    @property
    def marker(self) -> str:
        return f"{self.index}-{self.kind}-step{self.step}.fired"

    def __str__(self) -> str:
        if self.kind == "slow-rank":
            return f"slow-rank@rank={self.rank}:factor={self.factor:g}"
        rank = f":rank={self.rank}" if self.kind in ("kill", "hang") else ""
        return f"{self.kind}@step={self.step}{rank}"


def parse(spec: str, *, index: int = 0) -> Fault:
    """One ``--inject`` value; an InputError naming the flag and the accepted forms otherwise."""
    kind_text, _, args = spec.strip().partition("@")
    if kind_text not in KINDS:
        raise UnknownNameError("fault", kind_text, KINDS, source="command line", field="--inject")
    kind: FaultKind = kind_text
    values: dict[str, str] = {}
    for part in filter(None, args.split(":")):
        key, equals, value = part.partition("=")
        if not equals:
            raise _bad(spec, f"{part!r} is not key=value")
        values[key.strip()] = value.strip()
    required, optional = _KEYS[kind]
    missing = required - set(values)
    extra = set(values) - required - optional
    if missing or extra:
        problem = f"needs {', '.join(sorted(missing))}" if missing else f"takes no {', '.join(sorted(extra))}"
        raise _bad(spec, f"{kind} {problem}")
    try:
        step = int(values["step"]) if "step" in values else None
        rank = int(values.get("rank", 0))
        factor = float(values.get("factor", 1.0))
    except ValueError:
        raise _bad(spec, "step and rank are integers, factor a number") from None
    if step is not None and step < 1:
        raise _bad(spec, "step counts from 1")
    if rank < 0:
        raise _bad(spec, "rank must be >= 0")
    if kind == "slow-rank" and factor <= 1:
        raise _bad(spec, "a slow rank needs factor > 1")
    return Fault(kind=kind, step=step, rank=rank, factor=factor, index=index)


def parse_all(specs: list[str], *, steps: int, world_size: int) -> list[Fault]:
    """Every ``--inject``, checked against the run's step count and world size."""
    faults = [parse(spec, index=i) for i, spec in enumerate(specs)]
    for fault in faults:
        if fault.step is not None and fault.step > steps:
            raise _bad(str(fault), f"the run has {steps} steps")
        if fault.rank >= world_size:
            raise _bad(str(fault), f"the run has ranks 0..{world_size - 1}")
    return faults


def _bad(spec: str, why: str) -> InputError:
    return InputError(why, source="command line", field="--inject", value=spec, expected=_EXAMPLE)


Recorder = Callable[..., None]


class FaultInjector:
    """What one rank does about the injected faults, step by step."""

    def __init__(self, faults: list[Fault], marker_dir: Path, rank: int, record: Recorder) -> None:
        self.faults = faults
        self.marker_dir = marker_dir
        self.rank = rank
        self.record = record
        marker_dir.mkdir(parents=True, exist_ok=True)

    def fired(self, fault: Fault) -> bool:
        return (self.marker_dir / fault.marker).exists()

    def _fire(self, fault: Fault, **fields: Any) -> bool:
        """Claim the fault (once per run, whichever attempt gets there first) and log it."""
        try:
            descriptor = os.open(self.marker_dir / fault.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return False
        os.close(descriptor)
        self.record("fault", fault=str(fault), rank=self.rank, **fields)
        return True

    def _pending(self, kind: FaultKind, step: int) -> list[Fault]:
        return [f for f in self.faults if f.kind == kind and f.step == step and not self.fired(f)]

    def before_step(self, step: int) -> None:
        """Fire a kill (SIGKILL, as the OOM killer would) or a hang (sleep forever) due at ``step``."""
        for fault in self._pending("kill", step) + self._pending("hang", step):
            if fault.rank != self.rank or not self._fire(fault, step=step):
                continue
            if fault.kind == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            while True:  # a hang: only the watchdog or the process-group timeout ends it
                time.sleep(3600)

    def forces_save(self, step: int) -> bool:
        """A crash-during-save needs a save at its step."""
        return bool(self._pending("crash-during-save", step))

    def crash_before_commit(self, step: int) -> None:
        """Die after the shards are written and before the commit (rank 0 commits)."""
        for fault in self.faults:
            if fault.kind != "crash-during-save" or fault.step is None or fault.step > step:
                continue
            if self.rank == 0 and self._fire(fault, step=step):
                os._exit(EXIT_CRASH_IN_SAVE)

    def slow_factor(self) -> float:
        return max([f.factor for f in self.faults if f.kind == "slow-rank" and f.rank == self.rank] or [1.0])
