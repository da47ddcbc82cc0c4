"""`mfukit size` against the LLaMA paper's training run (tests/golden/size.toml)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from mfukit import catalog
from mfukit.perf.utilization import measure

CASES: list[dict[str, Any]] = tomllib.loads((Path(__file__).parents[1] / "golden" / "size.toml").read_text())[
    "case"
]


def llama_mfu_at_380() -> str:
    model = catalog.model("llama-65b")
    peak = catalog.accelerator("a100-80gb-sxm").peak_flops("bf16")
    result = measure(
        model,
        seq_len=2048,
        tokens_per_s_per_gpu=380,
        peak_flops_per_s=peak,
        recompute="none",
        convention="full",
    )
    return f"{result.mfu:.6f}"


@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_llama_paper(mfukit, case: dict[str, Any]) -> None:  # type: ignore[no-untyped-def]
    args = ["size", "--model", "llama-65b", "--tokens", "1.4T", "--gpu", "a100-80gb-sxm", "--goodput", "1"]
    args += ["--mfu", llama_mfu_at_380(), "--format", "json"]
    if "gpus" in case:
        args += ["--gpus", str(case["gpus"])]
    if "deadline" in case:
        args += ["--deadline", case["deadline"]]
    run = mfukit(*args)
    assert run.exit_code == 0, run.stderr
    result = run.json()["result"]
    if "days" in case:
        assert result["gpus"] == case["gpus"]
        assert result["days"] == pytest.approx(case["days"], rel=case["tolerance"]), case["why"]
    if "gpus_min" in case:
        assert result["gpus_min"] == pytest.approx(case["gpus_min"], rel=case["tolerance"]), case["why"]
        assert result["gpus"] >= result["gpus_min"] and result["gpus"] % 8 == 0
