"""Columns of a delimited trace (Arrow binary arrays), parsed a whole column at a time.

Each column parser reads the spelling that nearly every row uses (``2026-01-01T00:10:00``, ``3600``)
with Arrow's C++ parsers, and says which rows it read; the caller parses the rest (``Unknown``, an
epoch time, a value with spaces around it) with its row-at-a-time function, once per distinct value
(:func:`distinct`). A column whose values repeat (partitions, users, states, TRES strings) is parsed
only through :func:`distinct`: one call per distinct value.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, TypeVar, cast

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

Bools = npt.NDArray[np.bool_]
Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]
Codes = npt.NDArray[np.int32]
T = TypeVar("T")
_UNSEEN = object()

CACHE_VALUES = 1 << 14
"""Distinct values whose parse is remembered across batches (a column's repeated spellings)."""
_ISO_BYTES = 19  # YYYY-MM-DDTHH:MM:SS
_ISO_SEPARATORS = {4: ord("-"), 7: ord("-"), 10: ord("T"), 13: ord(":"), 16: ord(":")}
FIRST_SECOND = -62135596800  # 0001-01-01T00:00:00 UTC: Arrow reads year 0, Python's datetime has none
_MAX_DIGITS = 18  # every count of at most 18 digits fits in int64


def lengths(array: pa.Array) -> Ints:
    """The length of each value of a binary array (from its offsets, without touching the bytes)."""
    return np.diff(_offsets(array)).astype(np.int64)


def _offsets(array: pa.Array) -> npt.NDArray[np.int32]:
    return np.frombuffer(array.buffers()[1], dtype=np.int32)[array.offset : array.offset + len(array) + 1]


def _as_text(array: pa.Array, read: Bools, filler: bytes) -> pa.Array | None:
    """The values that are read, as strings (``filler`` for the others), or None if bad UTF-8 is among them."""
    if not read.all():
        array = pc.if_else(pa.array(read), array, pa.scalar(filler, pa.binary()))
    try:
        return array.cast(pa.string())
    except pa.ArrowInvalid:
        return None


def decimal_integers(array: pa.Array) -> tuple[Ints, Bools]:
    """(value, read) of each value of a binary array that is a number as Python prints it: 1 to 18
    ASCII digits, the first not 0 unless it is the only one. Arrow's integer parser reads the column;
    it also takes a sign or ``0x`` first, which a value that starts with 1-9 cannot have."""
    sizes = lengths(array)
    read = (sizes >= 1) & (sizes <= _MAX_DIGITS)
    if read.any():
        first = np.zeros(len(array), dtype=np.uint8)
        first[read] = np.frombuffer(array.buffers()[2], dtype=np.uint8)[_offsets(array)[:-1][read]]
        read &= ((first > ord("0")) & (first <= ord("9"))) | ((first == ord("0")) & (sizes == 1))
    try:
        return np.asarray(array.cast(pa.int64())), read
    except pa.ArrowInvalid:  # bad UTF-8, or a value that is no integer: Arrow reads only ASCII digits
        pass
    text = _as_text(array, read, b"0")
    if text is None:
        read &= pc.match_substring_regex(array, "^[0-9]+$").to_numpy(zero_copy_only=False)
        text = _as_text(array, read, b"0")
        assert text is not None  # ASCII digits only
    else:
        read &= pc.ascii_is_decimal(text).to_numpy(zero_copy_only=False)
        text = pc.if_else(pa.array(read), text, "0")
    return np.asarray(text.cast(pa.int64())), read


def iso_seconds(array: pa.Array) -> tuple[Floats, Bools]:
    """(epoch seconds, read) of each value of a binary array spelled ``YYYY-MM-DDTHH:MM:SS`` (UTC, as
    sacct prints naive times); Arrow's ISO 8601 parser, given only values of that shape, refuses the
    dates and times Python's ``fromisoformat`` refuses (30 February, 24:00, a leap second), and year 0
    is left unread."""
    read = lengths(array) == _ISO_BYTES
    rows = np.flatnonzero(read)
    if rows.size:
        data = np.frombuffer(array.buffers()[2], dtype=np.uint8)
        starts = _offsets(array)[rows]
        for at, separator in _ISO_SEPARATORS.items():
            read[rows] &= data[starts + at] == separator
    text = _as_text(array, read, b"1970-01-01T00:00:00")
    if text is None:
        return np.zeros(len(array)), np.zeros(len(array), dtype=bool)
    try:
        moments = text.cast(pa.timestamp("s"))
    except pa.ArrowInvalid:  # a value of that shape that is no date: the caller parses them all
        return np.zeros(len(array)), np.zeros(len(array), dtype=bool)
    seconds = moments.cast(pa.int64()).to_numpy()
    return seconds.astype(np.float64), read & (seconds >= FIRST_SECOND)


def distinct(
    array: pa.Array | None,
    rows: int,
    parse: Callable[[str], T],
    cache: dict[Hashable, T | ValueError],
) -> tuple[list[T | None], Codes, dict[int, str]]:
    """``parse`` of each distinct value of a binary or dictionary array (decoded with U+FFFD for bad
    UTF-8, spaces stripped): (result per distinct value, None where it raised ValueError; each row's
    distinct value; value -> the error's message). A missing column (None) is ``rows`` empty values."""
    if array is None:
        values: list[Any] = [b""]
        codes = np.zeros(rows, dtype=np.int32)
    else:
        encoded = array if pa.types.is_dictionary(array.type) else pc.dictionary_encode(array)
        values = encoded.dictionary.to_pylist()
        codes = np.asarray(encoded.indices, dtype=np.int32)
    results: list[T | None] = []
    failed: dict[int, str] = {}
    for index, value in enumerate(values):
        known = cache.get(value, _UNSEEN)
        if known is _UNSEEN:
            try:
                known = parse(value.decode("utf-8", "replace").strip())
            except ValueError as error:
                known = error
            if len(cache) >= CACHE_VALUES:
                cache.clear()
            cache[value] = known
        if isinstance(known, ValueError):
            failed[index] = str(known)
            results.append(None)
        else:
            results.append(cast(T, known))
    return results, codes, failed


def row_errors(codes: Codes, failed: dict[int, str], rows: Ints | None = None) -> dict[int, str]:
    """Row -> message for the rows whose distinct value failed (``rows``: the row of each code)."""
    if not failed:
        return {}
    at = np.flatnonzero(np.isin(codes, np.fromiter(failed, dtype=np.int32, count=len(failed))))
    where = at if rows is None else rows[at]
    return {int(row): failed[int(codes[i])] for row, i in zip(where.tolist(), at.tolist(), strict=True)}


def take(results: list[T | None], codes: Codes, missing: T, dtype: Any) -> npt.NDArray[Any]:
    """Each row's result as an array (``missing`` where its value did not parse); ``int`` for counts:
    int64, or Python ints where one does not fit."""
    values = [missing if value is None else value for value in results]
    table = integers(values) if dtype is int else np.array(values, dtype=dtype)
    return table[codes]


def integers(values: list[Any]) -> npt.NDArray[Any]:
    """Python ints as an int64 array, or an object array if one does not fit (never uint64 or float)."""
    try:
        return np.array(values, dtype=np.int64)
    except OverflowError:
        return np.array(values, dtype=object)
