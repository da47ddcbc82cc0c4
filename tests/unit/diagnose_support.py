"""The case-set generator (scripts/diagnose_cases.py), imported once for the diagnosis tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).parents[2] / "scripts" / "diagnose_cases.py"


def load_cases() -> ModuleType:
    if "diagnose_cases" in sys.modules:
        return sys.modules["diagnose_cases"]
    spec = importlib.util.spec_from_file_location("diagnose_cases", SCRIPT)
    if spec is None or spec.loader is None:
        raise ImportError(SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["diagnose_cases"] = module
    spec.loader.exec_module(module)
    return module
