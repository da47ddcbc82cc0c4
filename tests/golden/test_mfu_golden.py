"""`mfukit mfu` against published MFU/HFU figures (tests/golden/mfu.toml)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from mfukit import catalog
from mfukit.catalog import resolve
from mfukit.perf.utilization import measure

CASES: list[dict[str, Any]] = tomllib.loads((Path(__file__).parent / "mfu.toml").read_text())["case"]


@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_published_mfu(case: dict[str, Any]) -> None:
    model = resolve.model_spec(case["model"], source="mfu.toml")
    peak = catalog.accelerator(case["gpu"]).peak_flops("bf16")
    result = measure(
        model,
        seq_len=case["seq_len"],
        tokens_per_s_per_gpu=case["tokens_per_s_per_gpu"],
        peak_flops_per_s=peak,
        recompute=case["recompute"],
        convention="full",
    )
    assert result.mfu == pytest.approx(case["mfu"], rel=case["tolerance"]), case["why"]
    if "hfu" in case:
        assert result.hfu == pytest.approx(case["hfu"], rel=case["tolerance"]), case["why"]
