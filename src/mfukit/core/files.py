"""Writing files so that a reader never sees half of one."""

from __future__ import annotations

import os
from pathlib import Path


def write_bytes_atomic(path: Path, data: bytes, *, durable: bool = False) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename: the old file or the whole new one.

    ``durable`` also fsyncs the data before the rename (the caller fsyncs the directory if it must).
    """
    temporary = path.with_name(path.name + ".tmp")
    with temporary.open("wb") as handle:
        handle.write(data)
        if durable:
            handle.flush()
            os.fsync(handle.fileno())
    temporary.replace(path)


def write_text_atomic(path: Path, text: str, *, durable: bool = False) -> None:
    """:func:`write_bytes_atomic` of ``text`` in UTF-8."""
    write_bytes_atomic(path, text.encode("utf-8"), durable=durable)


def append_line(path: Path, line: str) -> None:
    """Append one line with a single ``O_APPEND`` write, so lines from several processes never interleave."""
    descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(descriptor, (line + "\n").encode())
    finally:
        os.close(descriptor)
