"""``mfukit bench collectives``: the collectives benchmark of :mod:`mfukit.comm.bench` run on torchrun
(gloo on CPU, NCCL on GPU), its rows in nccl-tests' own text layout, and the command's output."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mfukit.comm.bench import CollectiveRow, nccl_tests_text
from mfukit.core.results import Output
from mfukit.train import launch

ASSUMPTIONS = [
    "time per op averaged over ranks (nccl-tests -a 1); busbw factors of nccl-tests doc/PERFORMANCE.md",
    "out-of-place all_reduce/broadcast include a local copy (torch's are in place); in-place alltoall includes the copy back",
]


@dataclass(frozen=True)
class Sweep:
    """The sizes of the sweep, as nccl-tests' -b, -e and -f."""

    min_bytes: int
    max_bytes: int
    factor: int


class Stopped(Exception):  # noqa: N818 (a stop, not an error: the caller exits as the shell does)
    """torchrun and its ranks were ended by a signal (Ctrl-C, kill)."""

    def __init__(self, signal: int, name: str | None) -> None:
        super().__init__(f"stopped by {name}")
        self.signal = signal
        self.name = name


def measure(
    ops: list[str], sweep: Sweep, min_time_s: float, nproc: int, echo: Callable[[str], None]
) -> dict[str, Any]:
    """The measured rows per op of ``nproc`` ranks; raises :class:`Stopped` on a signal."""
    with tempfile.TemporaryDirectory(prefix="mfukit-bench-") as scratch:
        result_path = Path(scratch) / "collectives.json"
        job = launch.Torchrun(
            module="mfukit.comm.bench",
            args=[
                "collectives",
                str(result_path),
                f"--ops={','.join(ops)}",
                f"--min-bytes={sweep.min_bytes}",
                f"--max-bytes={sweep.max_bytes}",
                f"--factor={sweep.factor}",
                f"--min-time={min_time_s}",
            ],
            nproc_per_node=nproc,
        )
        finished = launch.run(job, log_path=Path(scratch) / "torchrun.log", echo=echo)
        if finished.signal is not None:
            raise Stopped(finished.signal, finished.signal_name)
        if finished.returncode != 0 or not result_path.exists():
            tail = "\n".join(finished.tail[-10:])
            raise RuntimeError(
                f"the collectives benchmark failed (torchrun exit {finished.returncode}):\n{tail}"
            )
        measured: dict[str, Any] = json.loads(result_path.read_text(encoding="utf-8"))
    return measured


def texts(measured: dict[str, Any], sweep: Sweep) -> dict[str, str]:
    """Each op's rows in nccl-tests' text layout."""
    return {
        op: nccl_tests_text(
            [CollectiveRow(**row) for row in rows],
            devices=measured["devices"],
            min_bytes=sweep.min_bytes,
            max_bytes=sweep.max_bytes,
            factor=sweep.factor,
        )
        for op, rows in measured["ops"].items()
    }


def collectives_output(measured: dict[str, Any], by_op: dict[str, str], echo: dict[str, Any]) -> Output:
    result = {
        "backend": measured["backend"],
        "ranks": measured["ranks"],
        "ops": measured["ops"],
        "nccl_tests": by_op,
        "environment": measured["environment"],
    }
    return Output("bench.collectives/1", result, inputs=echo, assumptions=list(ASSUMPTIONS))
