"""Every module here needs torch (CPU is enough) and carries the ``torch`` marker.

Without torch they are not collected, so their module-level imports cannot fail collection; with
MFUKIT_REQUIRE_TORCH=1 (CI) they are collected anyway and a missing torch fails the run.
"""

from __future__ import annotations

import importlib.util
import os

collect_ignore_glob = (
    ["test_*.py"]
    if importlib.util.find_spec("torch") is None and os.environ.get("MFUKIT_REQUIRE_TORCH") != "1"
    else []
)
