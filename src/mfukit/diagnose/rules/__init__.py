"""Rule families: each module's ``analyze(ctx)`` returns findings; later families see earlier findings.

Order matters where one finding explains another: throttling before stragglers (a straggler on a
throttled GPU is explained by the throttling), stragglers before the network and exposed communication
(waiting for a straggler inside NCCL is not a network cost), the network (socket fallback, missing rails,
low bus bandwidth: ``comm``'s judges) before exposed communication, which such a fault explains.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from functools import cache

from mfukit.diagnose.context import Context
from mfukit.diagnose.findings import Finding

RULE_MODULES: tuple[str, ...] = (
    "inputs",
    "throttling",
    "bench",
    "straggler",
    "data",
    "network",
    "sync_timers",
    "communication",
    "pipeline",
    "launch",
    "stalls",
    "hardware",
)

Rule = Callable[[Context], list[Finding]]


@cache
def rules() -> tuple[Rule, ...]:
    return tuple(importlib.import_module(f"mfukit.diagnose.rules.{name}").analyze for name in RULE_MODULES)
