"""The CLI stays thin (DESIGN.md: "parse, call library, render"): no module of ``cli/`` over
``MAX_MODULE_LINES`` lines and no function over ``MAX_FUNCTION_LINES`` (from its ``def`` to its last line;
the click decorators above it are the flag table, counted in the module's lines only)."""

from __future__ import annotations

import ast
from pathlib import Path

CLI = Path(__file__).parents[2] / "src" / "mfukit" / "cli"
MAX_MODULE_LINES = 300
MAX_FUNCTION_LINES = 60


def too_long(path: Path) -> list[str]:
    """What in ``path`` is over the limits: the module, and each function too long."""
    text = path.read_text()
    found = []
    lines = len(text.splitlines())
    if lines > MAX_MODULE_LINES:
        found.append(f"{path.name}: {lines} lines")
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            span = (node.end_lineno or node.lineno) - node.lineno + 1
            if span > MAX_FUNCTION_LINES:
                found.append(f"{path.name}:{node.lineno} {node.name}: {span} lines")
    return found


def test_cli_modules_are_thin() -> None:
    over = [problem for path in sorted(CLI.glob("*.py")) for problem in too_long(path)]
    assert over == [], "move the logic into its package:\n" + "\n".join(over)
