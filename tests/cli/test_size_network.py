"""`mfukit size`: the NIC recommendation stays within the node's NIC cages, what the fabric cannot hide is
said with the layout change that hides it, and the help's example is one that gets the performance model."""

from __future__ import annotations

import shlex

import pytest

NO_BATCH = ("size", "--model", "llama-65b", "--tokens", "1.4T", "--deadline", "14d", "--gpu", "a100-80gb-sxm")


def test_nics_never_exceed_the_cages_and_the_exposed_part_is_said(mfukit) -> None:  # type: ignore[no-untyped-def]
    envelope = mfukit(*NO_BATCH, "--format", "json").json()
    result = envelope["result"]
    cages = result["nics_per_node"]
    assert cages == 8  # a DGX A100 has 8 compute NICs
    assert result["nics_needed_per_node"] > cages  # TP 8 x DP 466 moves more than 8 NICs hide
    assert result["recommended_nics_per_node"] == cages
    assert result["fabric_hides_traffic"] is False and result["exposed_comm_s_per_step"] > 0
    note = next(w for w in envelope["warnings"] if "cannot hide" in w)
    hiding = result["layout_that_hides_traffic"]
    assert f"TP {hiding['tp']} x PP {hiding['pp']} x DP {hiding['dp']}" in note
    assert f"leave {result['exposed_comm_s_per_step']:.1f} s exposed" in note
    # the layout it names does hide the traffic on the same GPUs, at the same NICs
    fixed = mfukit(*NO_BATCH, "--tp", str(hiding["tp"]), "--pp", str(hiding["pp"]), "--format", "json").json()
    assert fixed["result"]["gpus"] == result["gpus"]
    assert fixed["result"]["fabric_hides_traffic"] is True
    assert not any("cannot hide" in w for w in fixed["warnings"])


def test_the_table_says_the_cages(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit(*NO_BATCH)
    row = next(line for line in run.stdout.splitlines() if "NICs per node" in line)
    assert "of 8 cages" in row and row.split()[-1] == "8"


def test_omit_mfu_is_said_only_when_mfu_was_given(mfukit) -> None:  # type: ignore[no-untyped-def]
    omitted = mfukit(*NO_BATCH, "--format", "json").json()
    assert not any("omit --mfu" in line for line in omitted["assumptions"])
    assert any("needs the global batch" in line for line in omitted["assumptions"])
    given = mfukit(*NO_BATCH, "--mfu", "0.45", "--format", "json").json()
    assert any("omit --mfu" in line for line in given["assumptions"])


@pytest.mark.slow
def test_the_help_example_gets_the_performance_model(mfukit) -> None:  # type: ignore[no-untyped-def]
    help_text = mfukit("size", "--help").stdout
    example = " ".join(help_text.split("Example:")[1].split("\n\n")[0].split())
    args = shlex.split(example)
    assert args[:2] == ["mfukit", "size"]
    envelope = mfukit(*args[1:], "--format", "json").json()
    result = envelope["result"]
    assert result["mfu_source"].startswith("performance model")
    assert not any("no global batch" in w for w in envelope["warnings"])
    assert result["recommended_nics_per_node"] <= result["nics_per_node"]
    assert result["meets_deadline"] is True
