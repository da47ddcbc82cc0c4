"""`mfukit train` and `mfukit bench` at the command line: missing torch, bad input."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

MICRO = str(Path(__file__).parents[1] / "data" / "train" / "micro.toml")


@pytest.fixture
def without_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any, **kwargs: Any) -> Any:
        return None if name == "torch" else real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


@pytest.mark.parametrize(
    "args",
    [
        ["train", MICRO],
        ["bench", "matmul"],
        ["bench", "collectives"],
        ["bench", "checkpoint"],
        ["bench", "step", MICRO],
    ],
)
def test_without_torch_exit_3_with_the_install_command(
    mfukit: Any, without_torch: None, args: list[str]
) -> None:
    run = mfukit(*args)
    assert run.exit_code == 3
    assert "torch is needed" in run.stderr
    assert "pip install 'mfukit[torch]'" in run.stderr


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["--inject", "kill@step=0"], "--inject"),
        (["--inject", "explode@step=2"], "unknown fault 'explode'"),
        (["--nnodes", "2:1"], "--nnodes"),
        (["--seq-len", "1"], "training.seq_len"),
        (["--timeout", "soon"], "--timeout"),
    ],
)
def test_bad_input_exits_2_naming_the_flag(mfukit: Any, tmp_path: Path, args: list[str], text: str) -> None:
    run = mfukit("train", MICRO, "--out", str(tmp_path), "--device", "cpu", *args)
    assert run.exit_code == 2, run.stderr
    assert text in run.stderr
    assert "Traceback" not in run.stderr


def test_bench_collectives_rejects_unknown_ops(mfukit: Any) -> None:
    run = mfukit("bench", "collectives", "--ops", "all_reduce,allreduce2")
    assert run.exit_code == 2
    assert "unknown collective 'allreduce2'" in run.stderr
