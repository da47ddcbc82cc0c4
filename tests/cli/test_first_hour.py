"""What a new user typed in their first hour: model names as the Hub spells them, numbers in the unit a flag
names, and the smaller defects they met (power, gates, labels)."""

from __future__ import annotations


def test_a_hub_id_names_the_model_on_the_command_line(mfukit) -> None:  # type: ignore[no-untyped-def]
    shown = mfukit("catalog", "show", "meta-llama/Llama-2-13b-hf", "--format", "json")
    assert shown.exit_code == 0, shown.stderr
    assert shown.json()["result"]["name"] == "llama2-13b"
    typed = mfukit(
        "mfu", "--model", "llama-2-13b", "--gpu", "A100-80GB-SXM", "--tokens-per-s-per-gpu", "1000"
    )
    assert typed.exit_code == 0, typed.stderr
    assert "Llama 2 13B" in typed.stdout
