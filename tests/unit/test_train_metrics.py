"""Per-step metrics: the straggler ratio and MFU."""

from __future__ import annotations

import pytest

from mfukit.core.model import ModelSpec
from mfukit.perf.flops import model_flops_per_token
from mfukit.train.metrics import step_mfu, straggler


@pytest.mark.parametrize(
    ("compute_s", "expected"),
    [
        ([1.0, 1.0, 1.0, 4.0], (3, 4.0)),
        ([1.0, 3.0], (1, 3.0)),  # two ranks: not capped at 2 by a median that includes the straggler
        ([2.0, 2.0], (0, 1.0)),
        ([5.0], (0, 1.0)),
    ],
)
def test_straggler(compute_s: list[float], expected: tuple[int, float]) -> None:
    assert straggler(compute_s) == (expected[0], pytest.approx(expected[1]))


def test_step_mfu_is_model_flops_per_device_over_peak() -> None:
    spec = ModelSpec(
        num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128, vocab_size=100
    )
    per_token = model_flops_per_token(spec, 32)
    # 8 devices at 1e6 tokens/s in total against a 1e12 FLOP/s peak each
    assert step_mfu(per_token, 1e6, 8, 1e12) == pytest.approx(per_token * 1e6 / 8 / 1e12)
    assert step_mfu(per_token, 1e6, 8, None) is None
