#!/usr/bin/env python3
"""Rerun the example commands of the README and docs/*.md and rewrite their outputs (``make readme``);
``--check`` only reports the blocks that are stale (the test in tests/cli/test_readme_examples.py runs it).

A checked block is a fenced block right after an HTML comment ``<!-- readme: full -->`` or
``<!-- readme: excerpt -->``; its lines ``$ mfukit ...`` (a trailing ``\\`` continues one) are run in
order from the repository root on a 100-column colourless console, each followed by its output, and
``$ echo $?`` prints the exit code of the command before. ``full`` blocks show the whole output; an
``excerpt`` shows chosen lines: each is matched by its label (the text before the first run of two
spaces) to the output's line of the same label and rewritten from it, and ``...`` lines stay. A block
that cannot be rerun here says why: ``<!-- readme: skip (needs the dev Slurm) -->``.

Only numbers that differ from run to run (search and simulation seconds, jobs per second) are ignored when
comparing, so a rerun with no change leaves the file as it is: the regenerator is deterministic.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
WIDTH = 100
MARKER = re.compile(r"^<!-- readme: (full|excerpt|skip \(.+\)) -->$")
# what varies between runs of the same command on the same input: wall-clock seconds of a search or a
# simulation and the rates derived from them
VOLATILE = [
    re.compile(r"\(\d[\d,.]* s\)"),  # plan: "top 5 of 21,771 layouts (14.2 s)"
    re.compile(
        r"in \d[\d,.]* s \(\d[\d,.]* jobs/s\)"
    ),  # sched simulate: "simulated 20,000 jobs in 2.60 s (...)"
]


def documents() -> list[Path]:
    """The pages whose examples are checked: the README and every page of docs/."""
    return [README, *sorted((ROOT / "docs").glob("*.md"))]


@dataclass
class Block:
    mode: str  # "full" or "excerpt"
    start: int  # index of the first line inside the fence
    end: int  # index of the closing fence
    lines: list[str]


def _normal(line: str) -> str:
    text = line.rstrip()
    for pattern in VOLATILE:
        text = pattern.sub("<varies>", text)
    return text


def blocks(text: list[str], name: str = "README.md") -> list[Block]:
    """The checked blocks of a page (skipped ones are left out); a ``$ mfukit`` block without a marker is an
    error, so that no example goes unchecked."""
    found: list[Block] = []
    index = 0
    while index < len(text):
        if text[index].startswith("```"):
            close = next(i for i in range(index + 1, len(text)) if text[i].startswith("```"))
            body = text[index + 1 : close]
            marker = MARKER.match(text[index - 1]) if index > 0 else None
            if body and body[0].startswith("$ mfukit"):
                if marker is None:
                    raise SystemExit(
                        f"{name}:{index + 1}: a `$ mfukit` block needs a <!-- readme: ... --> marker"
                    )
                if not marker.group(1).startswith("skip"):
                    found.append(Block(marker.group(1), index + 1, close, body))
            index = close + 1
        else:
            index += 1
    return found


def _commands(lines: list[str]) -> list[tuple[str, list[str]]]:
    """(command, the page's output lines after it) for each ``$`` line of a block."""
    result: list[tuple[str, list[str]]] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        if not line.startswith("$ "):
            raise SystemExit(f"example block line {line!r} is not after a `$` command")
        command = line[2:]
        while command.rstrip().endswith("\\"):
            index += 1
            command = command.rstrip()[:-1] + " " + lines[index].strip()
        index += 1
        output: list[str] = []
        while index < len(lines) and not lines[index].startswith("$ "):
            output.append(lines[index])
            index += 1
        result.append((command, output))
    return result


def run(command: str, previous_exit: int) -> tuple[list[str], int]:
    """The output lines (stdout, then stderr, trailing spaces stripped) and exit code of one command."""
    from click.testing import CliRunner

    from mfukit.cli.main import cli

    words = shlex.split(command, comments=True)
    if words == ["echo", "$?"]:
        return [str(previous_exit)], previous_exit
    if words[0] != "mfukit":
        raise SystemExit(f"only mfukit commands can be rerun, not {command!r}")
    result = CliRunner().invoke(
        cli, words[1:], catch_exceptions=False, env={"COLUMNS": str(WIDTH), "NO_COLOR": "1"}
    )
    text = result.stdout + result.stderr
    lines = [line.rstrip() for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return lines, result.exit_code


def _label(line: str) -> str:
    return re.split(r"\s{2,}", line.strip(), maxsplit=1)[0]


def excerpt(old: list[str], new: list[str]) -> tuple[list[str], list[str]]:
    """A page's excerpt lines rewritten from ``new`` by label, and the labels no longer in it."""
    by_label: dict[str, str] = {}
    for line in new:
        by_label.setdefault(_label(line), line)
    rewritten: list[str] = []
    missing: list[str] = []
    for line in old:
        if line.strip().startswith("...") or not line.strip():
            rewritten.append(line)
            continue
        found = by_label.get(_label(line))
        shortened = line.rstrip()[:-3].rstrip() if line.rstrip().endswith("...") else None
        if found is None and shortened:  # a line cut short in the page: the output line it begins
            found = line if any(_normal(other).startswith(_normal(shortened)) for other in new) else None
        if found is None and _normal(line) in {_normal(other) for other in new}:
            found = line  # a wrapped continuation line, unchanged
        if found is None:
            missing.append(line.strip())
            rewritten.append(line)
        else:
            rewritten.append(line if _normal(found) == _normal(line) else found)
    return rewritten, missing


def regenerate(text: list[str], name: str = "README.md") -> tuple[list[str], list[str]]:
    """The page ``name`` with every checked block's outputs rerun, and what could not be rewritten."""
    os.chdir(ROOT)
    updated = list(text)
    problems: list[str] = []
    for block in reversed(blocks(text, name)):
        body: list[str] = []
        exit_code = 0
        for command, old in _commands(block.lines):
            new, exit_code = run(command, exit_code)
            if block.mode == "full":
                same = [_normal(line) for line in old] == [_normal(line) for line in new]
                output = old if same else new
            else:
                output, missing = excerpt(old, new)
                problems.extend(f"{name}:{block.start}: `{command}` no longer prints {m!r}" for m in missing)
            body.extend(_command_lines(block.lines, command))
            body.extend(output)
        updated[block.start : block.end] = body
    return updated, problems


def _command_lines(lines: list[str], command: str) -> list[str]:
    """The page's own lines of ``command`` (with its continuation lines and comment)."""
    for index, line in enumerate(lines):
        if not line.startswith("$ "):
            continue
        joined, end = line[2:], index
        while joined.rstrip().endswith("\\"):
            end += 1
            joined = joined.rstrip()[:-1] + " " + lines[end].strip()
        if joined == command:
            return lines[index : end + 1]
    raise SystemExit(f"command {command!r} not found in its block")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="report stale blocks, write nothing (exit 1)")
    args = parser.parse_args()
    failed = False
    for path in documents():
        name = path.relative_to(ROOT).as_posix()
        text = path.read_text(encoding="utf-8").split("\n")
        updated, problems = regenerate(text, name)
        for problem in problems:
            print(problem, file=sys.stderr)
        failed = failed or bool(problems)
        if updated == text:
            continue
        if args.check:
            print(f"{name} examples are stale: run `make readme`", file=sys.stderr)
            failed = True
        else:
            from mfukit.core.files import write_text_atomic

            write_text_atomic(path, "\n".join(updated))
            print(f"rewrote {name}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
