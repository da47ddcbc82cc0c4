"""CSV carries SI values, so every label and header must name the SI unit, never a display unit."""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import pytest

from mfukit import units
from mfukit.cli.render import render_csv
from mfukit.core.results import Output, Table, csv_label, shown

DISPLAY_UNIT = re.compile(r"(?<![\w/])([TPG]FLOP/s|GiB|MiB|TiB|GB/s|Gb/s|TB/s|TB|GB|MB|ms|us|%)(?![\w/])")


def _csv(*tables: Table) -> list[list[list[str]]]:
    stream = io.StringIO()
    render_csv(Output(schema="t/1", result={}, tables=list(tables)), stream)
    return [list(csv.reader(io.StringIO(block))) for block in stream.getvalue().split("\n\n")]


def test_quantity_rows_name_the_si_unit_of_the_value() -> None:
    table = Table("t", ["quantity", "value"])
    table.add("memory per GPU (peak)", shown(55.7e9, units.format_bytes))
    table.add("model FLOP/s per GPU", shown(1.5e14, units.format_flops_rate))
    table.add("exposed traffic per step", shown(0.1, units.format_duration))
    table.add("MFU", shown(0.49, units.format_percent))
    table.add("GPUs", shown(3472, lambda v: f"{v:,.0f}"))
    [rows] = _csv(table)
    assert rows[1:] == [
        ["memory per GPU (peak) [bytes]", "55700000000.0"],
        ["model FLOP/s per GPU", "150000000000000.0"],
        ["exposed traffic per step [s]", "0.1"],
        ["MFU", "0.49"],
        ["GPUs", "3472"],
    ]


def test_a_column_of_one_unit_names_it_in_the_header() -> None:
    table = Table("t", ["part", "GiB"])
    table.add("weights", shown(2.0**30, lambda v: f"{v / 2**30:.1f}", unit="bytes"))
    [rows] = _csv(table)
    assert rows[0] == ["part", "gib_bytes"] and rows[1] == ["weights", "1073741824.0"]
    named = Table("t", ["part", "GiB"], csv_columns=["part", "bytes"])
    named.add("weights", shown(1.0, units.format_bytes))
    assert _csv(named)[0][0] == ["part", "bytes"]


@pytest.mark.parametrize(
    ("label", "unit", "expected"),
    [
        ("total training FLOPs", "FLOP", "total training FLOPs [FLOP]"),
        ("rate (FLOP/s)", "FLOP/s", "rate (FLOP/s)"),
        ("energy", "kWh", "energy [kWh]"),
        ("steps", None, "steps"),
    ],
)
def test_csv_label(label: str, unit: str | None, expected: str) -> None:
    assert csv_label(label, unit) == expected


COMMANDS = [
    ["size", str(Path(__file__).parents[2] / "examples" / "llama-65b_a100_14d.toml"), "--mfu", "0.45"],
    ["mfu", "--model", "llama-65b", "--gpu", "a100-80gb-sxm", "--tokens-per-s", "778k", "--gpus", "2048"],
    [
        "estimate",
        "--model",
        "gpt3-175b",
        "--gpu",
        "a100-80gb-sxm",
        "--gpus",
        "1024",
        "--global-batch-size",
        "1536",
        "--tp",
        "8",
        "--pp",
        "8",
    ],
    ["plan", "--model", "llama2-7b", "--gpu", "h100-sxm", "--gpus", "64", "--global-batch-size", "256"],
    [
        "comm",
        "predict",
        "--collective",
        "all_reduce",
        "--bytes",
        "1GiB",
        "--system",
        "dgx-h100",
        "--nodes",
        "16",
    ],
    ["fabric", "design", "--system", "dgx-h100", "--nodes", "127", "--switch", "qm9700"],
]


@pytest.mark.parametrize("args", COMMANDS, ids=[" ".join(a[:2]) for a in COMMANDS])
def test_no_command_writes_a_display_unit_over_an_si_value(mfukit, args: list[str]) -> None:  # type: ignore[no-untyped-def]
    run = mfukit(*args, "--format", "csv")
    assert run.exit_code in (0, 1), run.stderr
    number = re.compile(r"-?[0-9.]+(e[+-]?[0-9]+)?")
    for block in run.stdout.split("\n\n"):
        rows = list(csv.reader(io.StringIO(block)))
        header, body = rows[0], rows[1:]
        for index, name in enumerate(header):
            if any(index < len(r) and number.fullmatch(r[index]) for r in body):
                assert not DISPLAY_UNIT.search(name), (args[0], name)
        for row in body:
            if len(row) == 2 and number.fullmatch(
                row[1]
            ):  # a quantity/value row: the label is the unit's place
                assert not DISPLAY_UNIT.search(re.sub(r"\([^)]*\)", "", row[0])), (args[0], row)
