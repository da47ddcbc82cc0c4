"""Memory inputs through the CLI: the HBM headroom warning of `mfukit estimate`."""

from __future__ import annotations

import json

GIB = 2.0**30
HBM = 80 * GIB
# Llama 2 7B at 6,144 tokens, DP 8 with the distributed optimizer: 78.7 GiB of the H100's 80 GiB
NEAR_FULL = [
    *("--model", "llama2-7b", "--system", "dgx-h100", "--gpus", "8", "--seq-len", "6144"),
    *("--global-batch-size", "64", "--micro-batch-size", "1", "--zero", "1", "--recompute", "none"),
    *("--format", "json"),
]


def test_estimate_warns_inside_the_headroom(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("estimate", *NEAR_FULL)
    assert run.exit_code == 0, run.stderr
    envelope = json.loads(run.stdout)
    peak = envelope["result"]["memory_per_gpu_bytes"]
    assert HBM - 4 * GIB < peak <= HBM  # fits, but inside the default 5 %
    assert envelope["result"]["fits"] is True
    assert any("inside the 4.0 GiB of headroom" in warning for warning in envelope["warnings"])
    relaxed = json.loads(mfukit("estimate", *NEAR_FULL, "--hbm-headroom", "1GiB").stdout)
    assert not any("headroom" in warning for warning in relaxed["warnings"])
