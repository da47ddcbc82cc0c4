"""Read a (possibly huge, possibly gzipped, possibly damaged) Chrome-trace JSON file in blocks of events.

A Kineto trace is one JSON object whose ``traceEvents`` array holds every event; per-rank files reach
hundreds of MB, so ``json.load`` of the whole file (what HTA does) costs several times the file size in
memory. This reader keeps a window of about ``CHUNK_CHARS`` characters: it walks the top-level object,
decodes small values (``distributedInfo``, ``deviceProperties``) whole and yields the events of
``traceEvents`` (or of a top-level array, the plain Chrome-trace form) in blocks, so memory stays bounded
by the window plus one block.

Each block (up to ``_BLOCK_MAX_CHARS`` of complete events) is decoded by one msgspec call straight into
the caller's event type: a ``msgspec.Struct`` that declares only the fields the caller reads (the
Kineto reader: ``ph``, ``cat``, ``name``, ``ts``, ``dur`` and a few ``args``), so every other key is
skipped in C without building a Python object, and the structs are not tracked by the garbage
collector. A block msgspec rejects (a cut inside a string, NaN, a field of an unexpected type) is read
event by event with the stdlib scanner instead and each event converted to the event type; an event
that does not convert is counted in ``invalid_events``, never raised.

Damage is reported, never raised: a file that ends early stops the stream with a note of how many
events were read; a corrupt stretch inside the array is skipped up to the next event with a note of
the bytes skipped.
"""

from __future__ import annotations

import gzip
import json
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Generic, TypeVar

import msgspec

CHUNK_CHARS = 1 << 20
MAX_VALUE_CHARS = 1 << 26  # one event (or header value) larger than 64 Mi characters is corrupt
_EDGE = 64  # a decode error this close to the window's end means "the value continues"
_BLOCK_MIN_CHARS = 1 << 16
_BLOCK_MAX_CHARS = 1 << 18
_BOUNDARY = re.compile(r"\}\s*,\s*\{")
_WHITESPACE = re.compile(r"\s*")
_SEPARATOR = re.compile(r"\s*(?:,\s*)?")
_NEXT_ITEM = re.compile(r",\s*\{")
_DECODER = json.JSONDecoder()

E = TypeVar("E")


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


class TraceEventStream(Generic[E]):
    """Iterate ``blocks()`` (lists of events) or ``events()``; ``header`` fills with the top-level keys
    as they are met. ``event_type`` is what each event becomes: ``dict`` for every key, or a
    ``msgspec.Struct`` declaring the keys the caller reads.

    Keys that come after ``traceEvents`` (Kineto writes ``distributedInfo`` first, some writers
    last) are in ``header`` once the events are exhausted.
    """

    def __init__(self, path: Path, event_type: type[E], chunk_chars: int = CHUNK_CHARS) -> None:
        self.path = path
        self.event_type = event_type
        self.chunk_chars = chunk_chars
        self.header: dict[str, Any] = {}
        self.problems = StreamProblems()
        self.events_read = 0
        self.invalid_events = 0
        """Events that are valid JSON objects but do not convert to ``event_type`` (skipped)."""
        self.top_level_array = False
        self._block_decoder: msgspec.json.Decoder[list[E]] = msgspec.json.Decoder(list[event_type])  # type: ignore[valid-type]
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

    def events(self) -> Iterator[E]:
        for block in self.blocks():
            yield from block

    def blocks(self) -> Iterator[list[E]]:
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

    def _object_members(self) -> Iterator[list[E]]:
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

    def _array_items(self) -> Iterator[list[E]]:
        """The items of an array, in blocks, the cursor just past its ``[``.

        The fast path decodes a block of complete events in one msgspec call; a block it rejects, and
        the stretch at the window's edge, go event by event through the C scanner of :mod:`json`;
        anything unusual (the closing ``]``, damage) drops to the careful path below.
        """
        scan = _DECODER.scan_once  # type: ignore[attr-defined]
        separator = _SEPARATOR.match
        while True:
            buffer = self._buffer
            pos = separator(buffer, self._pos).end()  # type: ignore[union-attr]
            events, limit = self._block(buffer, pos)
            if events is not None:
                self._pos = limit
                self.events_read += len(events)
                yield events
                if len(buffer) - limit < _BLOCK_MIN_CHARS:
                    self._fill()
                continue
            scanned: list[E] = []
            try:
                while pos < limit:
                    value, end = scan(buffer, pos)
                    if type(value) is not dict:
                        break
                    self._convert(value, scanned)
                    pos = separator(buffer, end).end()  # type: ignore[union-attr]
            except (StopIteration, json.JSONDecodeError):
                pass  # the careful path below decides: end of array, window edge, or damage
            self._pos = pos
            if scanned:
                yield scanned
            if pos >= limit and limit < len(buffer):
                continue  # a rejected block was read event by event: try the next block fast again
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
                single: list[E] = []
                self._convert(value, single)
                yield single
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

    def _convert(self, value: dict[str, Any], into: list[E]) -> None:
        """Append one decoded event as ``event_type``; one that does not convert is counted and skipped."""
        self.events_read += 1
        if self.event_type is dict:
            into.append(value)  # type: ignore[arg-type]
            return
        try:
            into.append(msgspec.convert(value, self.event_type))
        except msgspec.ValidationError:
            self.invalid_events += 1

    def _block(self, buffer: str, pos: int) -> tuple[list[E] | None, int]:
        """Decode the complete events of ``buffer[pos:]`` in one msgspec call, up to the last ``}, {``.

        Returns the events and the position after the last one's comma; or None and the end of the
        stretch the fast path could not take (too little text, a cut that fell inside a string, a value
        msgspec rejects such as NaN, a field of the wrong type), which the caller then reads event by event.
        """
        if len(buffer) - pos < _BLOCK_MIN_CHARS or not buffer.startswith("{", pos):
            return None, len(buffer)
        limit = min(len(buffer) - 1, pos + _BLOCK_MAX_CHARS)
        cut = buffer.rfind("}", pos, limit)
        while cut > pos:
            match = _BOUNDARY.match(buffer, cut)
            if match is not None:
                break
            cut = buffer.rfind("}", pos, cut)
        else:
            return None, len(buffer)
        try:
            return self._block_decoder.decode("[" + buffer[pos : cut + 1] + "]"), match.end() - 1
        except (msgspec.DecodeError, msgspec.ValidationError):
            return None, match.end() - 1

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
