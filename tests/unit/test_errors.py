from __future__ import annotations

from mfukit.errors import ExitCode, InputError, MissingComponentError, UnknownNameError, suggest


def test_unknown_name_suggests_prefix_matches_first() -> None:
    error = UnknownNameError("accelerator", "h100", ["h100-sxm", "h100-pcie", "a100-80gb-sxm", "h200-sxm"])
    assert error.exit_code == ExitCode.BAD_INPUT
    assert error.render() == "unknown accelerator 'h100' — did you mean h100-sxm, h100-pcie?"


def test_unknown_name_without_close_match_lists_choices() -> None:
    error = UnknownNameError("policy", "zzz", ["fifo", "easy"])
    assert "choose one of: easy, fifo" in error.render()


def test_input_error_names_file_field_value_and_fix() -> None:
    error = InputError(
        "must not be negative", source="run.toml", field="training.tokens", value="-1T", hint="use 1.4T"
    )
    assert error.render() == "run.toml: training.tokens: '-1T': must not be negative\n  fix: use 1.4T"


def test_missing_component_exit_code() -> None:
    error = MissingComponentError("torch", purpose="to train", install="pip install 'mfukit[torch]'")
    assert error.exit_code == ExitCode.MISSING_COMPONENT
    assert "pip install" in error.render()


def test_suggest_fuzzy() -> None:
    assert suggest("lama-65b", ["llama-65b", "llama-7b", "gpt3-175b"])[0] == "llama-65b"
