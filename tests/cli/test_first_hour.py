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


def test_a_flag_that_names_its_unit_takes_a_bare_number(mfukit) -> None:  # type: ignore[no-untyped-def]
    base = ("comm", "predict", "--collective", "all_reduce", "--system", "dgx-h100", "--nodes", "2")
    bare = mfukit(*base, "--bytes", "8", "--format", "json")
    assert bare.exit_code == 0, bare.stderr
    with_unit = mfukit(*base, "--bytes", "8B", "--format", "json")
    assert bare.json()["result"] == with_unit.json()["result"]
    sweep = mfukit("comm", "sweep", "--collective", "all_reduce", "--system", "dgx-h100", "--nodes", "2",
                   "--min-bytes", "8", "--max-bytes", "1024", "--format", "json")  # fmt: skip
    assert sweep.exit_code == 0, sweep.stderr


def test_a_bare_number_stays_an_error_where_the_unit_is_ambiguous(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("size", "--model", "llama-65b", "--tokens", "1.4T", "--deadline", "14", "--gpu", "h100-sxm")
    assert run.exit_code == 2 and "bare number" in run.stderr and "Traceback" not in run.stderr
