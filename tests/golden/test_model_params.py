"""Golden: every catalog model's parameter count (core/model.py) against its published total."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from mfukit import catalog

ROWS: list[dict[str, Any]] = tomllib.loads((Path(__file__).parent / "model_params.toml").read_text())["case"]


def test_every_catalog_model_has_a_golden_row() -> None:
    assert sorted(row["model"] for row in ROWS) == catalog.names("models")


@pytest.mark.parametrize("row", ROWS, ids=lambda row: row["model"])
def test_published_parameter_count(row: dict[str, Any]) -> None:
    assert {"source", "table", "tolerance", "why"} <= set(row), "each row needs its source, table and why"
    spec = catalog.model(row["model"])
    assert spec.total_params() == pytest.approx(row["total"], rel=row["tolerance"], abs=0)
    if "active" in row:
        assert spec.is_moe
        assert spec.active_params() == pytest.approx(row["active"], rel=row["tolerance"], abs=0)
    else:
        assert spec.active_params() == spec.total_params()
