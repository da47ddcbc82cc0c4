"""The collectives mfukit models and judges, their names in every tool, and nccl-tests' busbw factors.

nccl-tests reports ``algbw = S / t`` and ``busbw = algbw x factor`` where the factor makes busbw comparable
to the hardware bottleneck whatever the rank count (nccl-tests doc/PERFORMANCE.md; src/*.cu ``*GetBw``):

==============  =================================  ===========
collective      S (the "size" column)              factor
==============  =================================  ===========
all_reduce      buffer bytes per rank              2(n-1)/n
reduce_scatter  total array bytes (recv x n)       (n-1)/n
all_gather      total array bytes (send x n)       (n-1)/n
all_to_all      bytes sent per rank (count x n)    (n-1)/n
broadcast       bytes                              1
reduce          bytes                              1
send_recv       bytes                              1
==============  =================================  ===========

With one rank the factor of all_reduce / reduce_scatter / all_gather / all_to_all is 0: a "busbw 0" run
is a 1-rank communicator, typically nccl-tests built without ``MPI=1`` under mpirun (nccl-tests#182).
"""

from __future__ import annotations

import re
from typing import Final, Literal

import numpy as np
import numpy.typing as npt

from mfukit.errors import UnknownNameError

Collective = Literal[
    "all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast", "reduce", "send_recv"
]
COLLECTIVES: Final[tuple[Collective, ...]] = (
    "all_reduce",
    "reduce_scatter",
    "all_gather",
    "all_to_all",
    "broadcast",
    "reduce",
    "send_recv",
)
# The nccl-tests / rccl-tests binary of each collective.
BINARIES: Final[dict[Collective, str]] = {
    "all_reduce": "all_reduce_perf",
    "reduce_scatter": "reduce_scatter_perf",
    "all_gather": "all_gather_perf",
    "all_to_all": "alltoall_perf",
    "broadcast": "broadcast_perf",
    "reduce": "reduce_perf",
    "send_recv": "sendrecv_perf",
}


def _key(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower()).removesuffix("perf")


_ALIASES: Final[dict[str, Collective]] = {_key(name): name for name in COLLECTIVES} | {
    _key(binary): name for name, binary in BINARIES.items()
}


def collective_named(text: str, *, field: str | None = None) -> Collective:
    """``"all_reduce"``, ``"allreduce"``, ``"AllReduce"`` or ``"all_reduce_perf"`` -> ``"all_reduce"``."""
    found = _ALIASES.get(_key(text))
    if found is None:
        raise UnknownNameError("collective", text, COLLECTIVES, field=field)
    return found


def busbw_factor(collective: Collective, num_ranks: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """nccl-tests' busbw/algbw ratio for ``num_ranks`` ranks (0 for a 1-rank all_reduce)."""
    n = np.asarray(num_ranks, dtype=np.float64)
    if collective == "all_reduce":
        return np.asarray(2.0 * (n - 1.0) / n)
    if collective in ("reduce_scatter", "all_gather", "all_to_all"):
        return np.asarray((n - 1.0) / n)
    return np.ones_like(n)
