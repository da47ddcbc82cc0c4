"""What one interruption costs besides lost work: detection, a replacement node, relaunch, checkpoint load.

A restart is: detection (watchdog or heartbeat notices the failure; the job is dead meanwhile), then,
for hardware failures, a replacement node (a hot spare at once when one is free, else the scheduler's
or provider's pool), then process start + rendezvous + NCCL init, checkpoint load and data-loader
fast-forward. Everything after detection can itself be hit by a failure and starts over (Daly 2006's
e^{R/M} term). Defaults come from ``ft/data/recovery.toml``, each with its source.

Hot spares: a failed node is swapped for a free spare and goes to repair, returning to the spare pool
after ``repair_s`` (never, when no repair time is given). With failures needing a replacement arriving
at rate a and repair time T, the chance that no spare is free is Erlang's loss formula B(H, a*T) — exact
for the M/G/c/c loss system whatever the repair-time distribution (Erlang 1917).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from pydantic import Field

from mfukit.core.hardware import Source
from mfukit.core.scenario import FtSection, read_document
from mfukit.core.schema import Seconds, Strict, validate_as

RECOVERY_FILE = Path(__file__).parent / "data" / "recovery.toml"


class SourcedDuration(Source):
    value_s: Seconds = Field(alias="value")


class RecoveryDefaults(Strict):
    detection: SourcedDuration
    init: SourcedDuration
    replacement: SourcedDuration


@cache
def recovery_defaults() -> RecoveryDefaults:
    return validate_as(RecoveryDefaults, read_document(RECOVERY_FILE), source=str(RECOVERY_FILE))


@dataclass(frozen=True)
class RestartParts:
    """Seconds each part of a restart takes; ``load_s`` is the checkpoint read."""

    detection_s: float
    replacement_s: float
    init_s: float
    load_s: float
    fast_forward_s: float
    hot_spares: int
    repair_s: float | None

    @property
    def relaunch_s(self) -> float:
        """From a working set of nodes to the first resumed step: init + load + fast-forward."""
        return self.init_s + self.load_s + self.fast_forward_s

    def typical_restart_s(self, replacement_wait_s: float) -> float:
        """Failure to resumed training when no further failure strikes during the restart."""
        return self.detection_s + replacement_wait_s + self.relaunch_s


def restart_parts(ft: FtSection, *, load_s: float, assumptions: list[str]) -> RestartParts:
    """The parts of a restart from the scenario, defaults from sourced data, noted in ``assumptions``.

    A total ``restart`` given by the user replaces every part (as Daly's single R)."""
    if ft.restart_s is not None:
        assumptions.append(
            f"restart = {ft.restart_s:g} s in total as given (detection, replacement, init and load included)"
        )
        return RestartParts(0.0, 0.0, ft.restart_s, 0.0, 0.0, ft.hot_spares, ft.repair_s)
    defaults = recovery_defaults()

    def pick(given: float | None, default: SourcedDuration, what: str) -> float:
        if given is not None:
            return given
        assumptions.append(f"{what} = {default.value_s:g} s: {default.what} ({default.url})")
        return default.value_s

    detection = pick(ft.detection_s, defaults.detection, "detection")
    replacement = pick(ft.replacement_s, defaults.replacement, "replacement without a free spare")
    init = pick(ft.init_s, defaults.init, "init (process start, rendezvous, NCCL)")
    if ft.fast_forward_s is None:
        assumptions.append(
            "data-loader fast-forward = 0 s: a stateful data loader is checkpointed (torchtitan, DCP Stateful)"
        )
    if ft.hot_spares and ft.repair_s is None:
        assumptions.append("a failed node does not return to the spare pool during the run (no --repair)")
    return RestartParts(
        detection_s=detection,
        replacement_s=replacement,
        init_s=init,
        load_s=load_s,
        fast_forward_s=ft.fast_forward_s or 0.0,
        hot_spares=ft.hot_spares,
        repair_s=ft.repair_s,
    )


def erlang_b(servers: int, offered_load: float) -> float:
    """Erlang's loss probability B(c, A) by the stable recurrence B(k) = A B(k-1) / (k + A B(k-1))."""
    blocking = 1.0
    for k in range(1, servers + 1):
        blocking = offered_load * blocking / (k + offered_load * blocking)
    return blocking


def no_spare_probability(parts: RestartParts, replacement_rate_per_s: float, run_wall_s: float) -> float:
    """Chance that a failure needing a replacement finds no free hot spare.

    With a repair time: Erlang B. Without one, spares are used up: of the N expected replacements
    over the run, the first H find a spare."""
    if parts.hot_spares == 0 or replacement_rate_per_s <= 0:
        return 1.0
    if parts.repair_s is not None:
        return erlang_b(parts.hot_spares, replacement_rate_per_s * parts.repair_s)
    expected = replacement_rate_per_s * run_wall_s
    if math.isinf(expected):  # a run that never finishes uses up any finite pool
        return 1.0
    return max(0.0, expected - parts.hot_spares) / expected if expected > 0 else 0.0


def spares_for(parts: RestartParts, replacement_rate_per_s: float, target: float) -> int | None:
    """The fewest hot spares for which at most ``target`` of replacements find none free (Erlang B);
    None without a repair time (spares that never come back only delay the wait)."""
    if parts.repair_s is None:
        return None
    spares = 0
    while erlang_b(spares, replacement_rate_per_s * parts.repair_s) > target:
        spares += 1
    return spares
