"""A library error names scenario fields; the command line shows each with the flag that sets it."""

from __future__ import annotations

from pathlib import Path

EXAMPLE = str(Path(__file__).parents[2] / "examples" / "llama3-405b_h100x16384.toml")


def test_a_fix_names_the_flag_and_the_field(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("ft", "plan", EXAMPLE, "--failure-distribution", "weibull")
    assert run.exit_code == 2, run.stdout
    assert "fix: give --weibull-shape (ft.weibull_shape) (< 1 when failures cluster" in run.stderr


def test_a_missing_node_names_both_flags(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("estimate", "--model", "llama-7b", "--gpus", "8")
    assert run.exit_code == 2, run.stdout
    assert "--system (cluster.system)" in run.stderr and "or --gpu (cluster.gpu)" in run.stderr
