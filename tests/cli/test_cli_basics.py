"""The contract every command keeps: version, help, formats, exit codes, errors without tracebacks."""

from __future__ import annotations

from pathlib import Path

from mfukit import __version__
from mfukit.cli.reference import reference


def test_version(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("--version")
    assert run.exit_code == 0 and __version__ in run.stdout


def test_help_lists_exit_codes(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("--help")
    assert run.exit_code == 0 and "101 internal error" in run.stdout


def test_unknown_catalog_entry_exits_2_with_suggestions(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("catalog", "show", "h100")
    assert run.exit_code == 2
    suggestions = run.stderr.partition("did you mean")[2]
    assert "h100-sxm" in suggestions and "h100-pcie" in suggestions
    assert "Traceback" not in run.stderr and run.stdout == ""


def test_json_envelope(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("catalog", "show", "llama-65b", "--format", "json")
    assert run.exit_code == 0
    envelope = run.json()
    assert set(envelope) == {"mfukit_version", "schema", "inputs", "assumptions", "result", "warnings"}
    assert envelope["schema"] == "catalog.show/1"
    assert envelope["result"]["derived"]["total_params"] == 65_285_660_672


def test_csv_has_si_values(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("catalog", "list", "accelerators", "--format", "csv")
    header, *rows = run.stdout.splitlines()
    assert header.startswith("name,display_name,bf16_flops_per_s")
    h100 = next(row for row in rows if row.startswith("h100-sxm,"))
    assert "989400000000000.0" in h100


def test_table_fits_the_console(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("catalog", "list", "models")
    assert run.exit_code == 0
    assert "llama-65b" in run.stdout
    assert max(len(line) for line in run.stdout.splitlines()) <= 100


def test_cli_reference_is_current() -> None:
    """docs/cli.md is generated from --help: regenerate with `make docs`."""
    committed = (Path(__file__).parents[2] / "docs" / "cli.md").read_text()
    assert committed == reference(), "docs/cli.md is stale: run `make docs`"


def test_every_command_is_documented() -> None:
    text = (Path(__file__).parents[2] / "docs" / "cli.md").read_text()
    from mfukit.cli.main import COMMANDS

    for name in COMMANDS:
        assert f"## `mfukit {name}`" in text


def test_catalog_show_formats_nested_quantities_with_their_units(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("catalog", "show", "mi300x")
    assert run.exit_code == 0
    text = " ".join(run.stdout.split())
    assert "bf16=(flops_per_s=708.0 TFLOP/s, m=4096, n=4864, k=32896)" in text
    assert "708000000000000" not in text
