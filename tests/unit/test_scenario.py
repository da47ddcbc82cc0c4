from __future__ import annotations

from pathlib import Path

import pytest

from mfukit.catalog import resolve
from mfukit.core.scenario import CheckpointInterval, load_scenario, parse_interval
from mfukit.errors import InputError, UnknownNameError


def write(tmp_path: Path, text: str, name: str = "s.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_full_scenario_parses_units(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
[model]
preset = "llama-65b"
[training]
tokens = "1.4T"
global_batch_tokens = "4M"
deadline = "14d"
[cluster]
system = "dgx-a100-80gb"
num_nodes = 4
[parallelism]
tp = 8
[ft]
checkpoint_interval = "500steps"
""",
    )
    scenario = load_scenario(path)
    assert scenario.training.tokens == 1.4e12
    assert scenario.training.deadline_s == 14 * 86400
    assert scenario.training.global_batch_sequences == 1953  # 4e6 // 2048, as the LLaMA sizing expects
    assert scenario.parallelism is not None and scenario.parallelism.tp == 8
    cluster = resolve.cluster(scenario.cluster, source=str(path))
    assert cluster.num_gpus == 32 and cluster.accelerator.name == "a100-80gb-sxm"


def test_yaml_is_accepted(tmp_path: Path) -> None:
    path = write(tmp_path, "model:\n  preset: llama-65b\ntraining:\n  seq_len: 4096\n", "s.yaml")
    assert load_scenario(path).training.seq_len == 4096


def test_malformed_toml_names_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "[model\npreset = 1")
    with pytest.raises(InputError) as caught:
        load_scenario(path)
    assert str(path) in caught.value.render() and "malformed TOML" in caught.value.render()


def test_negative_tokens_names_field_and_value(tmp_path: Path) -> None:
    path = write(tmp_path, '[model]\npreset = "llama-65b"\n[training]\ntokens = "-1T"\n')
    with pytest.raises(InputError) as caught:
        load_scenario(path)
    text = caught.value.render()
    assert "training.tokens" in text and "'-1T'" in text and "negative" in text


def test_unknown_field_suggests_the_right_one(tmp_path: Path) -> None:
    path = write(tmp_path, '[model]\npreset = "llama-65b"\n[training]\nseq_length = 2048\n')
    with pytest.raises(InputError) as caught:
        load_scenario(path)
    assert "training.seq_length" in caught.value.render() and "seq_len" in caught.value.render()


def test_flag_override_errors_point_at_the_command_line(tmp_path: Path) -> None:
    path = write(tmp_path, '[model]\npreset = "llama-65b"\n')
    with pytest.raises(InputError) as caught:
        load_scenario(path, {"training.tokens": "lots"})
    assert caught.value.source == "command line"


def test_unknown_preset_suggests(tmp_path: Path) -> None:
    scenario = load_scenario(None, {"model.preset": "llama-66b"})  # a true miss ("llama65b" is a spelling)
    with pytest.raises(UnknownNameError) as caught:
        resolve.model_spec(scenario.model, source="command line")
    assert "llama-65b" in caught.value.render()


def test_inline_model_and_overrides() -> None:
    scenario = load_scenario(None, {"model.preset": "llama-65b"})
    spec = resolve.model_spec({**scenario.model, "vocab_size": 64000}, source="x")
    assert spec.vocab_size == 64000 and spec.hidden_size == 8192


def test_hf_config_file(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(
        '{"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4,'
        ' "num_key_value_heads": 2, "intermediate_size": 512, "vocab_size": 1000, "hidden_act": "silu"}'
    )
    spec = resolve.model_spec({"hf_config": "config.json"}, source="s.toml", base_dir=tmp_path)
    assert spec.mlp == "swiglu" and spec.kv_heads == 2


def test_intervals() -> None:
    assert parse_interval("30min") == CheckpointInterval("30min", seconds=1800.0)
    assert parse_interval("500steps") == CheckpointInterval("500steps", steps=500.0)
    with pytest.raises(ValueError):
        parse_interval("often")
