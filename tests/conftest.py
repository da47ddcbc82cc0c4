"""Shared fixtures and the rules for optional components.

Tests that need torch carry the ``torch`` marker, tests that need the dev Slurm the ``slurm`` marker.
When the component is missing they are skipped, unless MFUKIT_REQUIRE_TORCH=1 / MFUKIT_REQUIRE_SLURM=1
(CI sets both), in which case the run fails instead: nothing skips silently in CI.
"""

from __future__ import annotations

import importlib.util
import os
import shutil

import pytest

REQUIREMENTS = {
    "torch": ("MFUKIT_REQUIRE_TORCH", lambda: importlib.util.find_spec("torch") is not None),
    "slurm": ("MFUKIT_REQUIRE_SLURM", lambda: shutil.which("slurmctld") is not None),
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for marker, (variable, available) in REQUIREMENTS.items():
        marked = [item for item in items if marker in item.keywords]
        if not marked or available():
            continue
        if os.environ.get(variable) == "1":
            raise pytest.UsageError(f"{variable}=1 but {marker} is not available: install it (see .ci/run)")
        for item in marked:
            item.add_marker(
                pytest.mark.skip(reason=f"{marker} is not available (set {variable}=1 to fail instead)")
            )
