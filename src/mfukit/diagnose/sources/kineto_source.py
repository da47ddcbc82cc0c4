"""Registration of the Kineto trace parser (:mod:`.kineto`) as a source kind."""

from __future__ import annotations

import re
from pathlib import Path

from mfukit.diagnose.sources import Source
from mfukit.diagnose.sources.kineto import parse

_KINETO = re.compile(r'"(traceEvents|schemaVersion|deviceProperties|distributedInfo)"|"ph"\s*:\s*"[XMisfC]"')


def detect(path: Path, head: str) -> bool:
    stripped = head.lstrip()
    return stripped[:1] in ("{", "[") and _KINETO.search(head) is not None


SOURCE = Source(
    kind="kineto",
    description="PyTorch profiler (Kineto) trace, one per rank (.json / .json.gz)",
    detect=detect,
    parse=parse,
)
