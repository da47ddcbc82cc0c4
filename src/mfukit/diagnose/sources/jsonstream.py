"""Read a (possibly huge, possibly gzipped, possibly damaged) Chrome-trace JSON file one event at a time.

A Kineto trace is one JSON object whose ``traceEvents`` array holds every event; per-rank files reach
hundreds of MB, so ``json.load`` of the whole file (what HTA does) costs several times the file size in
memory. This reader keeps a window of about ``CHUNK_CHARS`` characters: it walks the top-level object,
decodes small values (``distributedInfo``, ``deviceProperties``) whole and yields the events of
``traceEvents`` (or of a top-level array, the plain Chrome-trace form) one by one with the C scanner
of :mod:`json` (``raw_decode``), so memory stays bounded by the window plus one event.

Damage is reported, never raised: a file that ends early stops the stream with a note of how many
events were read; a corrupt stretch inside the array is skipped up to the next event with a note of
the bytes skipped.
"""

from __future__ import annotations

import gzip
import json
import re
import types
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

orjson: types.ModuleType | None
try:  # a faster decoder for whole blocks of events; the stdlib scanner handles everything it rejects
    import orjson
except ImportError:  # pragma: no cover - orjson is a dependency; this keeps the stdlib path working
    orjson = None

CHUNK_CHARS = 1 << 22
MAX_VALUE_CHARS = 1 << 26  # one event (or header value) larger than 64 Mi characters is corrupt
_EDGE = 64  # a decode error this close to the window's end means "the value continues"
_BLOCK_MIN_CHARS = 1 << 16
_BLOCK_MAX_CHARS = 1 << 19  # decoded events of one block cost ~10x its text: keep blocks small
_BOUNDARY = re.compile(r"\}\s*,\s*\{")
_WHITESPACE = re.compile(r"\s*")
_SEPARATOR = re.compile(r"\s*(?:,\s*)?")
_NEXT_ITEM = re.compile(r",\s*\{")
_DECODER = json.JSONDecoder()


def open_text(path: Path) -> IO[str]:
    """``path`` as text, decompressing ``.gz`` (by magic bytes, not by name)."""
    with path.open("rb") as raw:
        magic = raw.read(2)
    if magic == b"\x1f\x8b":
        return gzip.open(path, "rt", encoding="utf-8", errors="replace")
    return path.open("r", encoding="utf-8", errors="replace")


@dataclass
class StreamProblems:
    """What went wrong while reading: truncation, corrupt stretches, decompression errors."""

    truncated: bool = False
    skipped_chars: int = 0
    corrupt_stretches: int = 0
    notes: list[str] = field(default_factory=list)


class TraceEventStream:
    """Iterate ``events()``; ``header`` fills with the top-level keys as they are met.

    Keys that come after ``traceEvents`` (Kineto writes ``distributedInfo`` first, some writers
    last) are in ``header`` once ``events()`` is exhausted.
    """

    def __init__(self, path: Path, chunk_chars: int = CHUNK_CHARS) -> None:
        self.path = path
        self.chunk_chars = chunk_chars
        self.header: dict[str, Any] = {}
        self.problems = StreamProblems()
        self.events_read = 0
        self.top_level_array = False
        self._stream: IO[str] | None = None
        self._buffer = ""
        self._pos = 0
        self._eof = False
        self._consumed = 0

    # ------------------------------------------------------------------ low-level buffer

    def _fill(self) -> bool:
        """Append one chunk; False at end of input (or on a decompression error, noted)."""
        if self._eof or self._stream is None:
            return False
        try:
            chunk = self._stream.read(self.chunk_chars)
        except (EOFError, OSError, zlib.error) as error:
            self.problems.notes.append(
                f"compressed data ends or breaks after {self._offset()} characters: {error}"
            )
            self.problems.truncated = True
            chunk = ""
        if not chunk:
            self._eof = True
            return False
        if self._pos > self.chunk_chars:
            self._consumed += self._pos
            self._buffer = self._buffer[self._pos :]
            self._pos = 0
        self._buffer += chunk
        return True

    def _offset(self) -> int:
        return self._consumed + self._pos

    def _skip_ws(self) -> str:
        """Skip whitespace and return the next character ('' at end of input)."""
        while True:
            match = _WHITESPACE.match(self._buffer, self._pos)
            self._pos = match.end() if match else self._pos
            if self._pos < len(self._buffer):
                return self._buffer[self._pos]
            if not self._fill():
                return ""

    def _decode(self) -> tuple[bool, Any]:
        """Decode one JSON value at the cursor, reading more input while the value runs past the window.

        A value that fails mid-window (not at its edge, not an unterminated string) is corrupt; one
        larger than ``MAX_VALUE_CHARS`` is treated as corrupt too, so memory stays bounded.
        """
        previous = -1
        if not self._skip_ws():
            return False, None
        while True:
            try:
                value, end = _DECODER.raw_decode(self._buffer, self._pos)
            except json.JSONDecodeError as error:
                absolute = self._consumed + error.pos
                runs_past = error.pos >= len(self._buffer) - _EDGE or error.msg.startswith("Unterminated")
                too_big = len(self._buffer) - self._pos > MAX_VALUE_CHARS
                if self._eof or not runs_past or too_big or (absolute == previous and not runs_past):
                    return False, error
                previous = absolute
                if not self._fill():
                    return False, error
                continue
            self._pos = end
            return True, value

    # ------------------------------------------------------------------ structure

    def events(self) -> Iterator[dict[str, Any]]:
        with open_text(self.path) as stream:
            self._stream = stream
            first = self._skip_ws()
            if first == "[":
                self.top_level_array = True
                self._pos += 1
                yield from self._array_items()
            elif first == "{":
                self._pos += 1
                yield from self._object_members()
            elif first == "":
                self.problems.notes.append("the file is empty")
                self.problems.truncated = True
            else:
                self.problems.notes.append(f"not JSON: starts with {first!r}")
            self._stream = None

    def _object_members(self) -> Iterator[dict[str, Any]]:
        while True:
            char = self._skip_ws()
            if char == "}":
                self._pos += 1
                return
            if char == ",":
                self._pos += 1
                continue
            if char != '"':
                self._truncated_or_corrupt("a key of the top-level object")
                return
            ok, key = self._decode()
            if not ok or self._skip_ws() != ":":
                self._truncated_or_corrupt("a key of the top-level object")
                return
            self._pos += 1
            if key == "traceEvents" and self._skip_ws() == "[":
                self._pos += 1
                yield from self._array_items()
                if self.problems.truncated:
                    return
                continue
            ok, value = self._decode()
            if not ok:
                self._truncated_or_corrupt(f"the value of {key!r}")
                return
            self.header[str(key)] = value

    def _array_items(self) -> Iterator[dict[str, Any]]:
        """The items of an array, the cursor just past its ``[``.

        The fast path calls the C scanner directly and steps over ``,`` with one regex match; anything
        unusual (the window's edge, the closing ``]``, damage) drops to the careful path below.
        """
        scan = _DECODER.scan_once  # type: ignore[attr-defined]
        separator = _SEPARATOR.match
        while True:
            buffer = self._buffer
            pos = separator(buffer, self._pos).end()  # type: ignore[union-attr]
            block = _block(buffer, pos)
            if block is not None:
                events, pos = block
                self._pos = pos
                self.events_read += len(events)
                yield from events
                if len(buffer) - pos < _BLOCK_MIN_CHARS:
                    self._fill()
                continue
            try:
                while True:
                    value, end = scan(buffer, pos)
                    if type(value) is not dict:
                        break
                    self.events_read += 1
                    yield value
                    pos = separator(buffer, end).end()  # type: ignore[union-attr]
            except (StopIteration, json.JSONDecodeError):
                pass  # the careful path below decides: end of array, window edge, or damage
            self._pos = pos
            char = self._skip_ws()
            if char == "]":
                self._pos += 1
                return
            if char == ",":
                self._pos += 1
                continue
            if char == "":
                self._truncated_or_corrupt("the event array")
                return
            start = self._offset()
            ok, value = self._decode()
            if ok and isinstance(value, dict):
                self.events_read += 1
                yield value
                continue
            if ok:  # a stray non-object item: skip it
                self.problems.corrupt_stretches += 1
                continue
            if self._eof and self._remaining_is_partial():
                self._truncated_or_corrupt("an event")
                return
            if not self._resync(start):
                self._truncated_or_corrupt("an event")
                return

    def _remaining_is_partial(self) -> bool:
        """At end of input, an undecodable rest with no further event start means the file was cut."""
        return _NEXT_ITEM.search(self._buffer, self._pos + 1) is None

    def _resync(self, start: int) -> bool:
        """Skip a corrupt stretch to the next ``, {`` (the start of the next event)."""
        while True:
            match = _NEXT_ITEM.search(self._buffer, self._pos + 1)
            if match is not None:
                skipped = self._consumed + match.end() - 1 - start
                self._pos = match.end() - 1
                self.problems.corrupt_stretches += 1
                self.problems.skipped_chars += skipped
                return True
            if not self._fill():
                return False

    def _truncated_or_corrupt(self, what: str) -> None:
        self.problems.truncated = True
        self.problems.notes.append(
            f"the file ends (or breaks) inside {what} after {self.events_read} events "
            f"({self._offset()} characters read)"
        )


def _block(buffer: str, pos: int) -> tuple[list[dict[str, Any]], int] | None:
    """Decode the complete events of ``buffer[pos:]`` in one orjson call, up to the last ``}, {``.

    Returns the events and the position after the last one's comma, or None (no orjson, too little
    text, a cut that fell inside a string, a value orjson rejects such as NaN or a 65-bit integer):
    the caller then goes event by event with the stdlib scanner.
    """
    if orjson is None or len(buffer) - pos < _BLOCK_MIN_CHARS or not buffer.startswith("{", pos):
        return None
    limit = min(len(buffer) - 1, pos + _BLOCK_MAX_CHARS)
    cut = buffer.rfind("}", pos, limit)
    while cut > pos:
        match = _BOUNDARY.match(buffer, cut)
        if match is not None:
            break
        cut = buffer.rfind("}", pos, cut)
    else:
        return None
    try:
        events = orjson.loads("[" + buffer[pos : cut + 1] + "]")
    except orjson.JSONDecodeError:
        return None
    if not all(type(event) is dict for event in events):
        return None
    return events, match.end() - 1
