"""The goodput `size` divides by: expected ETTR from the failure model, or the flat allowance."""

from __future__ import annotations

from pathlib import Path

import pytest

from mfukit.catalog.resolved import load_resolved
from mfukit.errors import InputError
from mfukit.ft.goodput import expected_goodput
from mfukit.ft.interval import expected_run
from mfukit.ft.setup import ft_inputs

EXAMPLE = Path(__file__).parents[2] / "examples" / "llama3-405b_h100x16384.toml"


def test_expected_goodput_falls_with_scale() -> None:
    scene = load_resolved(EXAMPLE, {"ft.checkpoint_interval": "10min"})
    small = expected_goodput(scene, num_gpus=4096)
    large = expected_goodput(scene, num_gpus=32768, step_time_s=3.0)
    assert 0 < large.ettr < small.ettr < 1
    assert large.interval_s == pytest.approx(600.0, abs=3.0)  # whole steps of 3 s
    assert "llama3" in large.how and large.assumptions


def test_flat_allowance_when_given() -> None:
    goodput = expected_goodput(load_resolved(EXAMPLE, {"ft.goodput": "85%"}), num_gpus=1024)
    assert goodput.ettr == 0.85 and goodput.interval_s is None


def test_stragglers_cost_their_mean_slowdown() -> None:
    flags = {"ft.straggler_rate_per_1000_node_days": 10.0, "ft.straggler_slowdown": "30%"}
    with pytest.raises(InputError, match="duration"):
        ft_inputs(load_resolved(EXAMPLE, flags))
    slow = ft_inputs(load_resolved(EXAMPLE, {**flags, "ft.straggler_duration": "20min"}))
    # 2,048 nodes x 10 per 1,000 node-days x 20 min present = 28 % of the time, 30 % slower
    present = 2048 * 10 / 1000 / 86400 * 1200
    assert slow.run.straggler_loss_frac == pytest.approx(present * 0.3)
    fast = ft_inputs(load_resolved(EXAMPLE))
    assert expected_run(slow.run).ettr < expected_run(fast.run).ettr
    assert expected_run(slow.run).straggler > 0
