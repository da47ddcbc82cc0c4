"""The library's errors and fixes name scenario fields, never the flags that set them: the CLI shows each
field with its flag (cli/common.py's show_flags), so a message reads right from a scenario file, the API and
the command line alike."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from mfukit.cli.common import FLAG_FIELDS, show_flags
from mfukit.errors import InputError

SRC = Path(__file__).parents[2] / "src" / "mfukit"
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
ERRORS = {"InputError", "UnknownNameError", "MfukitError", "MissingComponentError", "OutputError"}
# flags the library may name: none of them sets a scenario field, so there is no field to name instead
ALLOWED = {
    # a command's own option, read by the library function it calls, with no scenario field
    "--collective": "comm check's collective, when the output does not name it",
    "--switch": "the comm commands' leaf switch",
    "--trace-format": "the sched commands' trace format",
    "--skip-bad-rows": "the sched commands' choice to skip bad trace rows",
    "--emit": "train's job kind",
    "--image": "train --emit k8s's container image",
    "--out": "train's run directory",
    "--steps": "train's step count",
    "--nnodes": "train's node count (torchrun's MIN:MAX)",
    "--listen": "watch's address",
    "--kind": "watch's log kind",
    "--detect-timeout": "watch's detection timeout",
    "--tokens-per-s-per-gpu": "mfu's measured rate",
    "--tokens-per-s": "mfu's measured rate of the whole job",
    # another tool's command line, which the user types or copies
    "--output": "sbatch --output, in a message about the pattern it takes",
    "--partition": "sbatch's partition, as sinfo prints it",
    "--json": "sacct --json, the output a reader expects",
    "--dtype": "the `mfukit bench matmul` command line a fix gives to copy",
    "--format": "the `mfukit bench matmul` command line a fix gives to copy",
}


def _message_flags(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, flag) of every flag in the message, expectation or fix of an error, and in any ``hint=``."""
    found = []
    for call in ast.walk(tree):
        if not isinstance(call, ast.Call):
            continue
        func = call.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        texts = [k.value for k in call.keywords if k.arg == "hint"]
        if name in ERRORS:
            texts += [*call.args[:1], *(k.value for k in call.keywords if k.arg in ("message", "expected"))]
        for text in texts:
            for part in ast.walk(text):
                if isinstance(part, ast.Constant) and isinstance(part.value, str):
                    found += [(part.lineno, flag) for flag in FLAG.findall(part.value)]
    return found


def test_library_errors_name_fields_not_flags() -> None:
    named = []
    for path in sorted(SRC.rglob("*.py")):
        module = path.relative_to(SRC).as_posix()
        if module.startswith("cli/"):
            continue
        for line, flag in _message_flags(ast.parse(path.read_text(encoding="utf-8"))):
            if flag not in ALLOWED:
                field = FLAG_FIELDS.get(flag)
                named.append(f"{module}:{line}: {flag}" + (f" (name {field})" if field else ""))
    assert named == []


def test_the_allowed_flags_set_no_scenario_field() -> None:
    assert not ALLOWED.keys() & FLAG_FIELDS.keys()


def test_the_scan_finds_a_flag_in_a_fix() -> None:
    tree = ast.parse('raise InputError("needs a count", field="cluster", hint=f"e.g. --gpus {n}")')
    assert _message_flags(tree) == [(1, "--gpus")]


def test_the_cli_shows_the_flag_beside_each_field_it_offers() -> None:
    error = InputError(
        "needs ft.weibull_shape", field="ft.weibull_shape", hint="give ft.weibull_shape or set ft.work."
    )
    shown = show_flags(error, {"ft.weibull_shape": "--weibull-shape"})
    assert shown.message == "needs --weibull-shape (ft.weibull_shape)"
    assert shown.hint == "give --weibull-shape (ft.weibull_shape) or set ft.work."  # ft.work: no flag here
    assert shown.field == "ft.weibull_shape"  # where the error is stays as blame_flag decides
