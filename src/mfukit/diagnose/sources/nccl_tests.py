"""nccl-tests (and rccl-tests) output of any era, or its ``-J`` JSON report, read by ``comm.nccl_tests``."""

from __future__ import annotations

import re
from pathlib import Path

from mfukit.diagnose.records import NcclTestsResult
from mfukit.diagnose.sources import Source
from mfukit.diagnose.sources.jsonstream import open_text
from mfukit.errors import InputError

# The table header, the run header, the footer or the version banner of a text run; the keys only the
# -J report has. (nccl-tests src/common.cu; shared/reference/comms/nccl-tests.md)
_TEXT = re.compile(
    r"#\s*(?:size\s+count\s+type\b|nThread\s+\d+\s+nGpus|Avg bus bandwidth|[nr]ccl-tests version)"
    r"|^\s*size\s+count\s+type\s+redop\b",
    re.MULTILINE,
)
_JSON = re.compile(r'"(?:average_bus_bandwidth|out_of_bounds)"\s*:')
MAX_CHARS = 1 << 26  # nccl-tests output is kilobytes; a file this large is something else


def detect(path: Path, head: str) -> bool:
    if head.lstrip()[:1] == "{":
        return '"results"' in head and _JSON.search(head) is not None
    return _TEXT.search(head) is not None


def parse(path: Path) -> list[NcclTestsResult]:
    from mfukit.comm.nccl_tests import parse_nccl_tests  # loaded only when such a file is read

    with open_text(path) as stream:
        text = stream.read(MAX_CHARS)
    try:
        return [NcclTestsResult(str(path), parse_nccl_tests(text, name_hint=path.name, source=str(path)))]
    except InputError as error:  # nothing to judge: said as degraded input, never raised
        return [NcclTestsResult(str(path), None, error.message)]


SOURCE = Source(
    kind="nccl_tests",
    description="nccl-tests / rccl-tests output (any era) or its -J JSON report",
    detect=detect,
    parse=parse,
)
