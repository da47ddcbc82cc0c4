"""Import boundaries of DESIGN.md: torch only in train/ and comm/bench.py; core/ imports no capability."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).parents[2] / "src" / "mfukit"
TORCH_ALLOWED = ("train/", "comm/bench.py")


def imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def test_torch_only_where_allowed() -> None:
    for path in SRC.rglob("*.py"):
        relative = path.relative_to(SRC).as_posix()
        if relative.startswith(TORCH_ALLOWED):
            continue
        bad = {name for name in imports(path) if name == "torch" or name.startswith("torch.")}
        assert not bad, f"{relative} imports {bad}"


def test_core_imports_no_capability_package() -> None:
    allowed_prefixes = ("mfukit.core", "mfukit.errors", "mfukit.units", "mfukit")
    for path in (SRC / "core").rglob("*.py"):
        for name in imports(path):
            if name.startswith("mfukit."):
                assert name.startswith(allowed_prefixes[:3]), f"core/{path.name} imports {name}"
