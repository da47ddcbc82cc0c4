"""FLOP counts against the papers' closed forms."""

from __future__ import annotations

import pytest

from mfukit import catalog
from mfukit.perf import flops

GPT3 = catalog.model("gpt3-175b")


def test_full_recompute_hardware_flops_follow_sc21_eq3() -> None:
    # Narayanan et al. SC21, eq. 3: F = 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)) per iteration: recompute runs
    # the transformer layers' forward again, not the output layer (logits counted fwd + bwd only).
    s, layers, h, vocab = 2048, GPT3.num_hidden_layers, GPT3.hidden_size, GPT3.vocab_size
    eq3_per_token = 96 * layers * h**2 * (1 + s / (6 * h) + vocab / (16 * layers * h))
    assert flops.hardware_flops_per_token(GPT3, s, "full") == pytest.approx(eq3_per_token, rel=1e-12)


def test_without_recompute_hardware_flops_are_model_flops_korthikanti() -> None:
    # Korthikanti et al. 2022, model FLOPs: 72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h)).
    s, layers, h, vocab = 2048, GPT3.num_hidden_layers, GPT3.hidden_size, GPT3.vocab_size
    model_per_token = 72 * layers * h**2 * (1 + s / (6 * h) + vocab / (12 * layers * h))
    assert flops.model_flops_per_token(GPT3, s) == pytest.approx(model_per_token, rel=1e-12)
    assert flops.hardware_flops_per_token(GPT3, s, "none") == pytest.approx(model_per_token, rel=1e-12)


def test_full_recompute_hfu_is_below_four_thirds_of_mfu() -> None:
    # The logits are not recomputed, so HFU/MFU falls short of 4/3 by the output layer's share.
    ratio = flops.hardware_flops_per_token(GPT3, 2048, "full") / flops.model_flops_per_token(GPT3, 2048)
    assert 1.32 < ratio < 4 / 3
