"""CLI tests run the real entry point on a fixed-width, colourless console."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
from click.testing import CliRunner

from mfukit.cli.main import cli

WIDTH = 100


@dataclass
class Run:
    exit_code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


@pytest.fixture
def mfukit(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """Call as ``mfukit("size", "--model", ...)``; returns exit code, stdout and stderr."""
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    monkeypatch.setenv("NO_COLOR", "1")

    def run(*args: str) -> Run:
        result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
        return Run(result.exit_code, result.stdout, result.stderr)

    return run
