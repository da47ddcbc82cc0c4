"""Flags and the scenario file follow one rule for what they leave out (given: fixed, left out: searched),
and the assumptions say which knobs were fixed and which searched."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
SIZING = (ROOT / "docs" / "sizing.md").read_text(encoding="utf-8")


def _rule(envelope: dict[str, object]) -> str:
    assumptions = envelope["assumptions"]
    assert isinstance(assumptions, list)
    return next(line for line in assumptions if line.startswith("layout knobs"))


def test_plan_states_which_knobs_were_fixed_and_which_searched(mfukit) -> None:  # type: ignore[no-untyped-def]
    base = (
        "plan",
        "--model",
        "gpt3-1.3b",
        "--gpu",
        "a100-80gb-sxm",
        "--gpus",
        "8",
        "--global-batch-size",
        "64",
    )
    searched = _rule(mfukit(*base, "--top", "1", "--format", "json").json())
    assert "searched: micro-batch size, tp, pp" in searched and "fixed: none" in searched
    run = mfukit(*base, "--micro-batch-size", "2", "--tp", "2", "--top", "1", "--format", "json").json()
    fixed = _rule(run)
    assert "fixed: micro-batch size 2, tp 2;" in fixed and "searched: pp" in fixed
    best = run["result"]["plans"][0]
    assert best["micro_batch_size"] == 2 and best["layout"]["tp"] == 2


def test_size_at_an_assumed_mfu_states_its_micro_batch(mfukit) -> None:  # type: ignore[no-untyped-def]
    envelope = mfukit(
        "size", "--model", "llama-65b", "--tokens", "1.4T", "--deadline", "14d", "--gpu", "a100-80gb-sxm",
        "--format", "json",
    ).json()  # fmt: skip
    assert any("micro-batch size 1 (default, --micro-batch-size)" in line for line in envelope["assumptions"])


@pytest.mark.slow
def test_the_documented_flags_equal_the_example_file(mfukit) -> None:  # type: ignore[no-untyped-def]
    """docs/sizing.md says its flags do what examples/llama-65b_a100_14d.toml does; they must give one answer."""
    found = re.search(r"flags do the same: `(mfukit size [^`]+)`", " ".join(SIZING.split()))
    assert found is not None
    flags = shlex.split(found.group(1))[1:]
    by_flags = mfukit(*flags, "--format", "json").json()
    by_file = mfukit("size", str(ROOT / "examples" / "llama-65b_a100_14d.toml"), "--format", "json").json()
    keys = ("gpus", "layout", "mfu", "num_microbatches", "memory_per_gpu_bytes", "days")
    assert {k: by_flags["result"][k] for k in keys} == {k: by_file["result"][k] for k in keys}
    assert _rule(by_flags) == _rule(by_file)
