"""Readers of an emitted sbatch script as Slurm and bash see it, and stub Slurm commands that record what runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

RECORDER = """#!{python}
import json, os, sys
name = os.path.basename(sys.argv[0])
with open(os.environ["STUB_LOG"], "a", encoding="utf-8") as log:
    log.write(json.dumps([name, *sys.argv[1:]]) + "\\n")
if name == "scontrol" and sys.argv[1:3] == ["show", "hostnames"]:
    print("gpu01")
    print("gpu02")
elif name == "scontrol" and sys.argv[1:3] == ["show", "node"]:
    print(f"NodeName={{sys.argv[3]}} Arch=x86_64 NodeAddr=10.9.8.7 NodeHostName={{sys.argv[3]}}")
elif name == "srun":
    args = sys.argv[1:]
    command = args[next(i for i, arg in enumerate(args) if not arg.startswith("-")) :]  # after srun's options
    # the stub beside this one (the script's venv activation puts the real torchrun first on PATH)
    os.execv(os.path.join(os.path.dirname(sys.argv[0]), command[0]), command)
"""
BLANKS = " \t\n\v\f\r"
STUBS = ("sbatch", "srun", "scontrol", "torchrun", "touch", "curl", "rm")
"""The Slurm commands and torchrun, plus commands an injected line would reach for: any call is recorded."""


def sbatch_words(text: str) -> list[str] | None:
    """The arguments sbatch takes from one ``#SBATCH`` line (``_get_argument`` in Slurm's src/sbatch/opt.c):
    blanks separate words outside quotes, a backslash escapes the next character, ``"`` and ``'`` quote,
    an unquoted ``#`` ends the line; blank is C's isspace() on bytes (ASCII only, as in the C and UTF-8
    locales). None when the line is not an ``#SBATCH`` line."""
    if not text.startswith("#SBATCH"):
        return None
    line = text.removeprefix("#SBATCH")
    words: list[str] = []
    index = 0
    while True:
        while index < len(line) and line[index] in BLANKS:
            index += 1
        if index >= len(line):
            return words
        word: list[str] = []
        quote = ""
        escaped = False
        while index < len(line) and (quote or line[index] not in BLANKS):
            char = line[index]
            index += 1
            if escaped:
                word.append(char)
                escaped = False
            elif char == "\\":
                escaped = True
            elif quote:
                if char == quote:
                    quote = ""
                else:
                    word.append(char)
            elif char in "\"'":
                quote = char
            elif char == "#":
                return [*words, "".join(word)] if word else words
            else:
                word.append(char)
        words.append("".join(word))


def sbatch_options(script: str) -> list[str]:
    """Every argument sbatch reads from the script's ``#SBATCH`` lines (they end at the first command)."""
    options: list[str] = []
    for line in script.splitlines()[1:]:
        words = sbatch_words(line)
        if words is not None:
            options.extend(words)
        elif line.strip() and not line.lstrip().startswith("#"):
            break
    return options


def install_stubs(bin_dir: Path) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name in STUBS:
        stub = bin_dir / name
        stub.write_text(RECORDER.format(python=sys.executable))
        stub.chmod(0o755)


def run_with_stubs(script: Path, bin_dir: Path, cwd: Path, timeout_s: float = 30) -> list[list[str]]:
    """Run ``script`` with bash as a Slurm batch job would, the stubs first on PATH; every stub call."""
    log = cwd / "stub-calls.jsonl"
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "STUB_LOG": str(log),
        "SLURM_JOB_NODELIST": "gpu[01-02]",
        "SLURM_JOB_ID": "42",
    }
    done = subprocess.run(
        ["bash", str(script)], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout_s
    )
    assert done.returncode == 0, done.stderr
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
