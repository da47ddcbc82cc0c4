"""Follow a growing log file like ``tail -F``: new complete lines, across rotation and truncation.

A follower keeps the inode and the byte offset of the file it reads. On each :meth:`Follower.poll`:

* the path now names another inode (``logrotate`` moved the file, the job reopened a new one): the rest
  of the old file is read through the descriptor still open on it, then the new file from its start;
* the file is shorter than the offset (truncated in place, ``copytruncate``): reading restarts at 0;
* the path is missing (not created yet, or between a move and the new file): nothing, until it appears.

Only complete lines (ending in a newline) are returned; a partial last line waits for its newline. Bytes
that are not UTF-8 are replaced (U+FFFD) and NULs dropped; the caller counts such lines as unreadable.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from mfukit.errors import InputError

READ_CHUNK_BYTES = 1 << 20
MAX_READ_BYTES = 64 << 20
"""Bytes read from a file per poll at most: a long backlog is read over several polls in bounded memory."""
MAX_PARTIAL_BYTES = 1 << 20
"""A "line" longer than this without a newline (binary junk) is cut and returned as one line."""


@dataclass(frozen=True)
class Line:
    text: str
    mtime_s: float
    """The file's modification time when the line was read: no later than when it was written."""
    undecodable: bool = False


@dataclass
class Follower:
    path: Path
    fd: int | None = None
    inode: tuple[int, int] | None = None
    offset: int = 0
    partial: bytes = b""
    rotations: int = 0
    truncations: int = 0

    def poll(self) -> list[Line]:
        """The complete lines written since the last poll (oldest first)."""
        lines: list[Line] = []
        try:
            status = self.path.stat()
        except FileNotFoundError:
            status = None
        identity = (status.st_dev, status.st_ino) if status is not None else None
        if self.fd is not None and identity != self.inode:
            if identity is not None:  # rotated: drain the old file, then start the new one
                lines.extend(self._read(limit_bytes=None))
                self._flush_partial(lines)
                self.rotations += 1
            self._close()
        if self.fd is None and status is not None:
            self._open()
        if self.fd is not None:
            size = os.fstat(self.fd).st_size
            if size < self.offset:
                self.offset = 0
                self.partial = b""
                self.truncations += 1
            lines.extend(self._read(limit_bytes=MAX_READ_BYTES))
        return lines

    def close(self) -> None:
        self._close()

    def _open(self) -> None:
        try:
            self.fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return
        except PermissionError:
            raise InputError(
                "cannot be read (permission denied)",
                source=str(self.path),
                hint="run mfukit watch as a user who may read the job's log (the job's own user, or its group)",
            ) from None
        status = os.fstat(self.fd)
        self.inode = (status.st_dev, status.st_ino)
        self.offset = 0
        self.partial = b""

    def _close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
        self.fd = None
        self.inode = None

    def _read(self, *, limit_bytes: int | None) -> list[Line]:
        assert self.fd is not None
        lines: list[Line] = []
        read_bytes = 0
        while limit_bytes is None or read_bytes < limit_bytes:
            chunk = os.pread(self.fd, READ_CHUNK_BYTES, self.offset)
            if not chunk:
                break
            self.offset += len(chunk)
            read_bytes += len(chunk)
            mtime_s = os.fstat(self.fd).st_mtime
            data = self.partial + chunk
            *complete, self.partial = data.split(b"\n")
            lines.extend(_decode(raw, mtime_s) for raw in complete)
            if len(self.partial) > MAX_PARTIAL_BYTES:
                lines.append(_decode(self.partial, mtime_s))
                self.partial = b""
        return lines

    def _flush_partial(self, lines: list[Line]) -> None:
        """The old file's unterminated last line is complete once the file is rotated away."""
        if self.partial and self.fd is not None:
            lines.append(_decode(self.partial, os.fstat(self.fd).st_mtime))
        self.partial = b""


def _decode(raw: bytes, mtime_s: float) -> Line:
    """One line as text; bytes that are not UTF-8, or NULs (the hole a crash leaves in a file written
    through a page cache or NFS), make it unreadable."""
    raw = raw.rstrip(b"\r")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return Line(raw.decode("utf-8", errors="replace"), mtime_s, undecodable=True)
    if "\x00" in text:
        return Line(text.replace("\x00", ""), mtime_s, undecodable=True)
    return Line(text, mtime_s)
