"""Artifact kinds: each module here detects one kind of file and parses it into records.

A source is a :class:`Source`: a ``detect(path, head)`` that looks at the file name and its first
64 KiB of text (decompressed), and a ``parse(path)`` that returns records (dataclasses from
:mod:`mfukit.diagnose.records`). Adding a kind is one module exposing ``SOURCE`` plus its name in
``SOURCE_MODULES``; the rule family that reads its records is one module in ``rules/``.

A file is read by the first source that detects it, plus every *embedded* source that detects it: NCCL
INFO lines are interleaved with training logs and nccl-tests output, so such a file feeds both.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from mfukit.diagnose.records import Record
from mfukit.diagnose.sources.jsonstream import open_text

HEAD_CHARS = 1 << 16


@dataclass(frozen=True)
class Source:
    kind: str
    description: str
    detect: Callable[[Path, str], bool]
    parse: Callable[[Path], Sequence[Record]]
    embedded: bool = False
    """Reads lines that other outputs interleave: considered beside the file's first-matching source."""


# Order is priority: the first source whose detect() accepts a file parses it (embedded ones as well).
SOURCE_MODULES: tuple[str, ...] = (
    "pipeline_timeline",
    "kineto_source",
    "nsys",
    "mfukit_bench",
    "nccl_tests",
    "nvidia_smi",
    "dcgm",
    "dcgmi_diag",
    "sacct",
    "kernel_log",
    "train_ledger",
    "training_log",
    "launch_config",
    "nccl_log",
)


@cache
def sources() -> tuple[Source, ...]:
    found = []
    for name in SOURCE_MODULES:
        module = importlib.import_module(f"mfukit.diagnose.sources.{name}")
        found.append(module.SOURCE)
    return tuple(found)


def head(path: Path) -> str:
    """The first 64 KiB of ``path`` as text (gzip decompressed); '' when unreadable."""
    try:
        with open_text(path) as stream:
            return stream.read(HEAD_CHARS)
    except (OSError, EOFError, ValueError):
        return ""


def detect(path: Path) -> list[Source]:
    """The sources that read ``path``: the first that matches, plus each embedded one that matches."""
    text = head(path)
    found: list[Source] = []
    for source in sources():
        primary = any(not chosen.embedded for chosen in found)
        if (source.embedded or not primary) and source.detect(path, text):
            found.append(source)
    return found
