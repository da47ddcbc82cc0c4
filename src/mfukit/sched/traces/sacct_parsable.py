"""``sacct -P`` text read a column at a time, by Arrow's C++ CSV parser, in blocks of whole lines.

sacct -P output is ``|``-separated and never quoted (a ``"`` in a job name is a character), so the
parser runs with quoting off and converts only the columns the analysis uses: times straight to
timestamps while Arrow's ISO 8601 parser takes every value of the column, values that repeat (users,
partitions, states, TRES strings, node lists) dictionary-encoded, the rest as bytes, parsed a whole
column at a time (:mod:`~mfukit.sched.traces.columns`). A value no column parser takes (``Unknown``,
an epoch time, spaces around a number), and each distinct value of a repeated column, goes through the
row-at-a-time functions of :mod:`~mfukit.sched.traces.sacct`: every field reads as it does row by row,
and a bad one makes the same bad row with the same message. A block that Arrow would split or read
otherwise than Python's text file (a blank line, a lone ``\\r``, a row of another width, a BOM at its
start) is halved until the halves Arrow can read are read by it,
and the rest, at most ``SPLIT_BYTES`` each, is split into lines by Python, with ``errors="replace"``
for bad UTF-8 as a text file reads it. The next block is read and parsed in a worker thread while this
one is settled; memory is two blocks and the attempts' columns.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, BinaryIO, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv

from mfukit.errors import InputError
from mfukit.sched.traces.attempts import Attempts, Fields
from mfukit.sched.traces.columns import (
    FIRST_SECOND,
    Bools,
    Floats,
    Ints,
    decimal_integers,
    distinct,
    integers,
    iso_seconds,
    lengths,
    row_errors,
    take,
)
from mfukit.sched.traces.common import Rows, TraceRead, column_index
from mfukit.sched.traces.hostlists import HostlistCheck
from mfukit.sched.traces.sacct import (
    ALIASES,
    count,
    gpus_in_tres,
    is_number,
    job_number,
    raw_limit_s,
    sacct_time,
    slurm_duration_s,
    started_by_backfill,
    state_code,
)
from mfukit.sched.traces.shape import JobFactory

BLOCK_BYTES = 4 << 20  # read and parsed at a time: larger batches cost less per row, and more memory
HEAD_BYTES = 64 << 10  # the first block
SPLIT_BYTES = 64 << 10  # a block Arrow cannot read is halved down to this, then split by Python
EXPECTED = "sacct -P output with its header (no -n) and --format as in `mfukit sched analyze --help`"
# read as bytes (their values are mostly distinct, or numbers); the others dictionary-encoded
_AS_BYTES = frozenset({"id", "submit", "eligible", "start", "end", "elapsed", "nodes", "limit_min", "limit"})
_TIMES = ("submit", "eligible", "start", "end")
_UNREAD = "unread"  # a block parsed before the header was known
_Parsed: TypeAlias = "pa.Table | str | None"  # a block as Arrow read it, or _UNREAD; None: it cannot
_PARSE = pcsv.ParseOptions(
    delimiter="|",
    quote_char=False,
    double_quote=False,
    escape_char=False,
    newlines_in_values=False,
    ignore_empty_lines=False,
)


def read_sacct_parsable(path: Path, factory: JobFactory, rows: Rows) -> TraceRead:
    """Stream the file in blocks, the next block read and parsed while this one is settled; a job
    step is dropped before any other field of it is parsed."""
    attempts = Attempts(factory, rows)
    try:
        handle = path.open("rb")
    except OSError as error:
        raise InputError(f"cannot read the trace: {error}", source=str(path)) from None
    with handle, ThreadPoolExecutor(max_workers=1) as pool:
        reader = _Reader(str(path), attempts)
        blocks = _blocks(handle)
        for block in blocks:  # up to the header: the rows after it are parsed ahead
            reader.read(block, _UNREAD)
            if reader.header is not None:
                break
        for block, parsed in _read_ahead(pool, blocks, reader.parse):
            reader.read(block, parsed)
    if reader.header is None:
        raise InputError("the file is empty", source=str(path), expected=EXPECTED)
    return attempts.finish("sacct-p")


def _blocks(handle: BinaryIO) -> Iterator[bytes]:
    """The file in blocks of whole lines (a line longer than a block is a block of its own), the first
    small: it holds the header."""
    size = HEAD_BYTES
    while block := handle.read(size):
        if not block.endswith(b"\n"):
            block += handle.readline()
        yield block
        size = BLOCK_BYTES


def _read_ahead(
    pool: ThreadPoolExecutor, blocks: Iterator[bytes], parse: Callable[[bytes], _Parsed]
) -> Iterator[tuple[bytes, _Parsed]]:
    """Each block and ``parse`` of it, the next one read and parsed in ``pool`` (Arrow's parser and
    the file reads release the GIL) while the caller works on this one."""

    def step() -> tuple[bytes, _Parsed] | None:
        block = next(blocks, None)
        return None if block is None else (block, parse(block))

    ahead = pool.submit(step)
    while (item := ahead.result()) is not None:
        ahead = pool.submit(step)
        yield item


def _regular(block: bytes) -> bool:
    """Whether Arrow splits ``block`` into the lines Python's text file does (no ``\\r`` but in
    ``\\r\\n``), and reads its first field as written (Arrow drops a BOM at the start of its input)."""
    lone_cr = b"\r" in block and block.count(b"\r") != block.count(b"\r\n")
    return not lone_cr and not block.startswith(b"\xef\xbb\xbf")


class _Header:
    """The header line: where each wanted column is, and how Arrow reads them.

    Times are parsed by Arrow's CSV reader (its ISO 8601 parser takes only spellings that Python's
    ``fromisoformat`` reads as the same instant); a column found with another spelling (``Unknown``)
    is read as bytes from then on.
    """

    def __init__(self, fields: list[str], line: int, source: str) -> None:
        at = column_index(fields, ALIASES)
        lacking = [key for key in ("id", "submit", "start", "tres") if key not in at]
        if lacking:
            raise InputError(
                f"line {line}: the header lacks {', '.join(lacking)}", source=source, expected=EXPECTED
            )
        self.width = len(fields)
        self.names = [f"c{position}" for position in range(self.width)]
        self.at = at
        self.parsed_times = frozenset(key for key in _TIMES if key in at)  # replaced, never changed

    def convert(self, times: frozenset[str]) -> pcsv.ConvertOptions:
        """How Arrow reads the wanted columns, ``times`` as timestamps."""

        def kind(key: str) -> pa.DataType:
            if key in times:
                return pa.timestamp("s")
            return pa.binary() if key in _AS_BYTES else pa.dictionary(pa.int32(), pa.binary())

        return pcsv.ConvertOptions(
            include_columns=[self.names[position] for position in self.at.values()],
            column_types={self.names[position]: kind(key) for key, position in self.at.items()},
            strings_can_be_null=False,
            quoted_strings_can_be_null=False,
            null_values=[],
            timestamp_parsers=[pcsv.ISO8601],
        )

    def batch(self, rows: list[list[str]]) -> pa.RecordBatch:
        """The rows that Python split (padded or cut to the header's width) as Arrow reads them."""
        columns = {}
        for key, position in self.at.items():
            values = pa.array(
                [(f[position] if position < len(f) else "").encode() for f in rows], pa.binary()
            )
            columns[self.names[position]] = values if key in _AS_BYTES else pc.dictionary_encode(values)
        return pa.record_batch(columns)


class _Reader:
    """Reads blocks in order, keeping the line count, and hands each batch of rows to the attempts."""

    def __init__(self, source: str, attempts: Attempts) -> None:
        self.source = source
        self.attempts = attempts
        self.header: _Header | None = None
        self.line = 0  # lines read so far
        self.caches: dict[str, dict[Any, Any]] = {key: {} for key in ALIASES}
        self.hostlists = HostlistCheck()

    def parse(self, block: bytes) -> _Parsed:
        """``block`` parsed by Arrow if it can; it runs ahead of :meth:`read`, on the header's state
        as it is (the time columns it finds parsed as timestamps: either way a time is read alike)."""
        header = self.header
        if header is None:
            return _UNREAD
        if not _regular(block):
            return None
        times = header.parsed_times
        table = _parsed(block, header, times)
        return table if table is not None or not times else _parsed(block, header, frozenset())

    def read(self, block: bytes, parsed: _Parsed) -> None:
        """Settle the rows of ``block`` (``parsed``: what :meth:`parse` made of it)."""
        if self.header is None and b"\r" not in block:
            block = self._past_header(block)
            if not block:
                return
        if parsed is _UNREAD:
            parsed = self.parse(block)
        header = self.header
        batches = parsed.to_batches() if isinstance(parsed, pa.Table) else []
        # a blank line is a row of empty fields to Arrow; so is a row of empty fields: read both alike
        if (
            header is None
            or not batches
            or any((lengths(_column(b, header, "id")) == 0).any() for b in batches)
        ):
            middle = block.find(b"\n", len(block) // 2) + 1
            if header is None or len(block) <= SPLIT_BYTES or not 0 < middle < len(block):
                self._by_line(block)
            else:  # halves, so that Python splits only the few lines Arrow cannot read
                for half in (block[:middle], block[middle:]):
                    self.read(half, self.parse(half))
            return
        for batch in batches:
            lines = np.arange(self.line + 1, self.line + 1 + batch.num_rows, dtype=np.int64)
            self.line += batch.num_rows
            self._rows(batch, lines)

    def _past_header(self, block: bytes) -> bytes:
        """Read lines of ``block`` (split at ``\\n`` only: it has no ``\\r``) up to the header; the rest."""
        at = 0
        while self.header is None and at < len(block):
            end = block.find(b"\n", at) + 1 or len(block)
            self.line += 1
            text = block[at:end].decode("utf-8", "replace")
            if text.strip():
                self.header = _Header(text.rstrip("\r\n").split("|"), self.line, self.source)
            at = end
        return block[at:]

    def _by_line(self, block: bytes) -> None:
        """Split ``block`` into lines as Python's text file does (``\\n``, ``\\r\\n`` or ``\\r``), skip blank
        ones, and pad or cut each row to the header's width."""
        rows: list[list[str]] = []
        lines: list[int] = []
        for text in io.StringIO(block.decode("utf-8", "replace"), newline=""):
            self.line += 1
            if not text.strip():
                continue
            fields = text.rstrip("\r\n").split("|")
            if self.header is None:
                self.header = _Header(fields, self.line, self.source)
            else:
                rows.append(fields)
                lines.append(self.line)
        if rows and self.header is not None:
            self._rows(self.header.batch(rows), np.array(lines, dtype=np.int64))

    def _rows(self, batch: pa.RecordBatch, lines: Ints) -> None:
        header = self.header
        assert header is not None
        ids = _column(batch, header, "id")
        numbers, read = decimal_integers(ids)
        stepped = None
        if not read.all():  # JobIDs that are not plain numbers: some may be steps (12.batch)
            steps = _array(pc.match_substring(ids, ".")).astype(bool)
            if steps.any():
                batch, lines, stepped = batch.filter(pa.array(~steps)), lines[~steps], lines[steps]
                ids = _column(batch, header, "id")
                numbers, read = decimal_integers(ids)
        self.attempts.add(self._fields(batch, lines, _job_ids(ids, numbers, read, lines)), stepped)

    def _fields(
        self, batch: pa.RecordBatch, lines: Ints, ids: tuple[np.ndarray[Any, Any], Bools, dict[int, str]]
    ) -> Fields:
        header = self.header
        assert header is not None

        def column(key: str) -> pa.Array | None:
            return _column(batch, header, key) if key in header.at else None

        def each(key: str, parse: Callable[[str], Any], missing: Any, dtype: Any) -> np.ndarray[Any, Any]:
            results, codes, failed = distinct(column(key), lines.size, parse, self.caches[key])
            errors.append(row_errors(codes, failed))
            return take(results, codes, missing, dtype)

        errors: list[dict[int, str]] = []  # per field, in the order a row's first bad field is named
        limit_s = self._limits(column("limit_min"), column("limit"), lines.size, errors)
        elapsed = self._numbers(column("elapsed"), "elapsed", 1.0, _elapsed, lines.size, errors)
        times = {key: self._times(column(key), key, lines.size, errors) for key in _TIMES}
        nodes = self._numbers(column("nodes"), "nodes", 1.0, _nodes, lines.size, errors)
        nodes[np.isnan(nodes)] = 0.0
        gpus = each("tres", gpus_in_tres, 0, int)
        nodelist = column("nodelist")
        if nodelist is not None:
            errors.append(
                row_errors(np.asarray(nodelist.indices), self.hostlists.errors(nodelist.dictionary))
            )
        first_error: dict[int, str] = {}
        for found in errors:
            for row, why in found.items():
                first_error.setdefault(row, why)
        strings = self.attempts.strings
        user = each("user", strings.code, 0, np.int32)
        account = each("account", strings.code, 0, np.int32)
        job_id, numbered, names = ids
        return Fields(
            line=lines,
            errors=first_error,
            step=np.zeros(lines.size, dtype=bool),
            job_id=job_id,
            numbered=numbered,
            names=names,
            state=each("state", state_code, 0, np.int8),
            gpus=gpus,
            nodes=nodes,
            limit_s=limit_s,
            elapsed=elapsed,
            user=np.where(user == 0, account, user),
            partition=each("partition", lambda text: strings.code(text or "batch"), 0, np.int32),
            qos=each("qos", lambda text: strings.code(text or "normal"), 0, np.int32),
            nodelist=nodelist if nodelist is not None else _empty(lines.size),
            backfilled=each("flags", started_by_backfill, False, bool),
            **times,
        )

    def _times(self, array: pa.Array | None, key: str, rows: int, errors: list[dict[int, str]]) -> Floats:
        if array is None:
            return np.full(rows, math.nan)
        if pa.types.is_timestamp(array.type):
            return np.asarray(array.cast(pa.int64()), dtype=np.float64)
        seconds, read = iso_seconds(array)
        if not read.all() and self.header is not None:
            self.header.parsed_times -= {key}
        errors.append(self._rest(array, read, seconds, sacct_time, self.caches[key]))
        return seconds

    def _numbers(
        self,
        array: pa.Array | None,
        key: str,
        scale: float,
        parse: Callable[[str], float | None],
        rows: int,
        errors: list[dict[int, str]],
    ) -> Floats:
        """A column of counts as ``parse`` reads them (NaN where it gives None): one in the spelling
        of a number, read for the whole column, is ``float(text) * scale``, as ``parse`` makes it."""
        if array is None:
            return np.full(rows, math.nan)
        whole, read = decimal_integers(array)
        values = whole.astype(np.float64) * scale  # the int64 rounded to a float as float() rounds its digits
        errors.append(self._rest(array, read, values, parse, self.caches[key]))
        return values

    def _limits(
        self, raw: pa.Array | None, text: pa.Array | None, rows: int, errors: list[dict[int, str]]
    ) -> Floats:
        """TimelimitRaw as seconds, else Timelimit (NaN: no limit)."""
        raw_errors: list[dict[int, str]] = []
        limit_s = self._numbers(raw, "limit_min", 60.0, raw_limit_s, rows, raw_errors)
        found = raw_errors[0] if raw_errors else {}
        rest = np.flatnonzero(np.isnan(limit_s))
        rest = rest[~np.isin(rest, list(found))]
        if rest.size:
            subset = text.take(pa.array(rest)) if text is not None else None
            results, codes, failed = distinct(subset, rest.size, slurm_duration_s, self.caches["limit"])
            limit_s[rest] = take(results, codes, math.nan, np.float64)
            found = found | row_errors(codes, failed, rest)
        errors.append(found)
        return limit_s

    @staticmethod
    def _rest(
        array: pa.Array,
        read: np.ndarray[Any, Any],
        values: Floats,
        parse: Callable[[str], float | None],
        cache: dict[Any, Any],
    ) -> dict[int, str]:
        """Parse the values a column parser did not read, once per distinct value, into ``values``."""
        if read.all():
            return {}
        rest = np.flatnonzero(~read)
        results, codes, failed = distinct(array.take(pa.array(rest)), rest.size, parse, cache)
        values[rest] = take(results, codes, math.nan, np.float64)
        return row_errors(codes, failed, rest)


def _parsed(block: bytes, header: _Header, times: frozenset[str]) -> pa.Table | None:
    """``block`` parsed by Arrow, ``times`` as timestamps; None if it cannot be (a row of another
    width, a time it cannot read, or one in year 0, which Python refuses)."""
    try:
        table = pcsv.read_csv(
            pa.py_buffer(block),
            read_options=pcsv.ReadOptions(
                column_names=header.names, use_threads=False, block_size=len(block) + 1
            ),
            parse_options=_PARSE,
            convert_options=header.convert(times),
        )
    except pa.ArrowInvalid:
        return None
    for key in times:
        earliest = pc.min(table.column(header.names[header.at[key]]).cast(pa.int64())).as_py()
        if earliest is not None and earliest < FIRST_SECOND:
            return None
    return table


def _elapsed(text: str) -> float | None:
    return count(text, "ElapsedRaw") if text else None


def _nodes(text: str) -> float:
    return count(text, "NNodes") if text else 0.0  # a job's nodes: int() of it


def _column(batch: pa.RecordBatch, header: _Header, key: str) -> pa.Array:
    return batch.column(header.names[header.at[key]])


def _empty(rows: int) -> pa.DictionaryArray:
    """A column the header lacks: ``rows`` empty values, dictionary-encoded as Arrow reads the rest."""
    return pa.DictionaryArray.from_arrays(pa.array(np.zeros(rows, dtype=np.int32)), pa.array([b""]))


def _array(values: pa.Array) -> np.ndarray[Any, Any]:
    return np.asarray(values.to_numpy(zero_copy_only=False))


def _job_ids(
    ids: pa.Array, numbers: Ints, read: Bools, lines: Ints
) -> tuple[np.ndarray[Any, Any], Bools, dict[int, str]]:
    """(the number each JobID starts with, else its line; whether the JobID, stripped, is that number
    as Python prints it; row -> the JobID, stripped, where it is not), from :func:`decimal_integers`
    of the JobIDs."""
    if read.all():
        return numbers, read, {}
    rest = np.flatnonzero(~read)
    texts = [raw.decode("utf-8", "replace").strip() for raw in ids.take(pa.array(rest)).to_pylist()]
    found = [job_number(text, int(lines[row])) for text, row in zip(texts, rest, strict=True)]
    others = integers(found)
    job_id = numbers.astype(others.dtype)  # a copy: Arrow's numbers are read-only
    job_id[rest] = others
    numbered = read.copy()
    numbered[rest] = [is_number(text, n) for text, n in zip(texts, found, strict=True)]
    names = {
        row: text for row, text, n in zip(rest.tolist(), texts, found, strict=True) if not is_number(text, n)
    }
    return job_id, numbered, names
