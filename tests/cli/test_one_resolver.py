"""Every command resolves the scenario the same way: a GPU count that disagrees with the node count is the
same error everywhere, and the batch is whole sequences everywhere."""

from __future__ import annotations

import pytest

MODEL = ("--model", "llama-7b", "--gpu", "h100-sxm", "--global-batch-tokens", "4M")


@pytest.mark.parametrize(
    "command",
    [("estimate", "--tp", "8"), ("plan",), ("size",), ("mfu", "--step-time", "10s"), ("ft", "plan"),
     ("ft", "simulate")],
    ids=lambda command: " ".join(command),
)  # fmt: skip
def test_gpus_and_nodes_that_disagree_exit_2_naming_both(mfukit, command: tuple[str, ...]) -> None:  # type: ignore[no-untyped-def]
    tokens = () if command[0] == "mfu" else ("--tokens", "1T")
    run = mfukit(*command, *MODEL, *tokens, "--gpus", "1024", "--nodes", "4")
    assert run.exit_code == 2, run.stdout
    assert "--nodes (cluster.num_nodes)" in run.stderr and "not num_gpus = 1024" in run.stderr


def test_mfu_takes_the_batch_in_whole_sequences(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("mfu", *MODEL, "--gpus", "64", "--step-time", "10s", "--format", "json")
    assert run.exit_code == 0, run.stderr
    # 4M tokens of 2,048-token sequences: 1,953 whole sequences per step, as estimate and plan run it
    assert run.json()["result"]["tokens_per_s_per_gpu"] == pytest.approx(1953 * 2048 / 10 / 64)
