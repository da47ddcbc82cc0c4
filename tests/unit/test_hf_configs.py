"""Real Hugging Face config.json files (tests/data/models/, licences in its README) load through the
scenario path to exactly the parameter counts of the catalog presets."""

from __future__ import annotations

from pathlib import Path

import pytest

from mfukit import catalog
from mfukit.catalog import resolve
from mfukit.core.model import ModelSpec

DATA = Path(__file__).parents[1] / "data" / "models"


def _load(directory: str) -> ModelSpec:
    return resolve.model_spec({"hf_config": str(DATA / directory / "config.json")}, source="test")


@pytest.mark.parametrize("preset", ["mixtral-8x7b", "deepseek-v3", "llama3.1-8b"])
def test_hf_config_matches_the_preset(preset: str) -> None:
    from_hf = _load(preset)
    shipped = catalog.model(preset)
    assert from_hf.total_params() == shipped.total_params()
    assert from_hf.active_params() == shipped.active_params()
    assert from_hf.num_moe_layers == shipped.num_moe_layers
    assert (from_hf.kv_heads, from_hf.head_size) == (shipped.kv_heads, shipped.head_size)
    assert from_hf.num_nextn_predict_layers == shipped.num_nextn_predict_layers


def test_deepseek_structure_from_its_config() -> None:
    spec = _load("deepseek-v3")
    assert spec.mla is not None and spec.mla.kv_lora_rank == 512
    assert spec.moe is not None and spec.moe.shared_expert_intermediate_size == 2048
    assert (spec.num_dense_layers, spec.num_moe_layers) == (3, 58)


def test_bloom_config_with_null_n_inner_matches_its_model_card() -> None:
    """bigscience/bloom-560m card: 559,214,592 parameters (n_inner = null means 4h; ALiBi; tied output;
    a layer norm on the word embeddings)."""
    spec = _load("bloom-560m")
    assert spec.intermediate_size == 4 * spec.hidden_size
    assert spec.tie_word_embeddings and spec.word_embeddings_layernorm
    assert spec.total_params() == 559_214_592
