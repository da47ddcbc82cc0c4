"""The trained model is the planner's ModelSpec: same parameter count, causal, rotary, GQA."""

from __future__ import annotations

import math

import pytest
import torch

from mfukit.core.model import ModelSpec
from mfukit.train.model import Transformer, apply_rope, count_parameters, rope_tables

pytestmark = pytest.mark.torch

SPECS = {
    "gqa": ModelSpec(
        num_hidden_layers=2,
        hidden_size=64,
        num_attention_heads=8,
        num_key_value_heads=2,
        intermediate_size=96,
        vocab_size=100,
    ),
    "mha-tied": ModelSpec(
        num_hidden_layers=3,
        hidden_size=48,
        num_attention_heads=4,
        intermediate_size=80,
        vocab_size=64,
        tie_word_embeddings=True,
    ),
    "head-dim": ModelSpec(
        num_hidden_layers=1,
        hidden_size=32,
        num_attention_heads=2,
        head_dim=24,
        intermediate_size=64,
        vocab_size=50,
    ),
}


@pytest.mark.parametrize("name", SPECS)
def test_parameter_count_is_the_planners(name: str) -> None:
    spec = SPECS[name]
    assert count_parameters(Transformer(spec, seq_len=16)) == spec.total_params()


def test_initial_loss_is_uniform_guessing() -> None:
    torch.manual_seed(0)
    spec = SPECS["gqa"]
    tokens = torch.randint(spec.vocab_size, (4, 17))
    loss = Transformer(spec, seq_len=16)(tokens[:, :-1], tokens[:, 1:])
    assert loss.item() == pytest.approx(math.log(spec.vocab_size), abs=0.15)


def test_attention_is_causal() -> None:
    torch.manual_seed(0)
    model = Transformer(SPECS["gqa"], seq_len=16).eval()
    tokens = torch.randint(100, (1, 16))
    changed = tokens.clone()
    changed[0, 10] = (changed[0, 10] + 1) % 100
    with torch.no_grad():
        before, after = model.logits(tokens), model.logits(changed)
    assert torch.equal(before[0, :10], after[0, :10])
    assert not torch.allclose(before[0, 10:], after[0, 10:])


def test_rope_scores_depend_on_the_relative_position_only() -> None:
    cos, sin = rope_tables(32, 8)
    q = torch.randn(1, 1, 1, 8).expand(1, 1, 32, 8)
    k = torch.randn(1, 1, 1, 8).expand(1, 1, 32, 8)
    rq, rk = apply_rope(q, cos, sin)[0, 0], apply_rope(k, cos, sin)[0, 0]
    assert float(rq[5] @ rk[2]) == pytest.approx(float(rq[20] @ rk[17]), rel=1e-4)
    assert torch.allclose(rq.norm(dim=-1), q[0, 0].norm(dim=-1))
