"""The column parsers of the sacct -P reader read what the row-at-a-time functions read, as they read it.

Each column parser may leave a value unread (the caller then parses it one by one); whatever it reads
must be exactly what :func:`~mfukit.sched.traces.sacct.sacct_time`, ``int()`` or python-hostlist makes
of the same text. The strings are drawn near the spellings each parser takes, so both sides of its
boundary are hit.
"""

from __future__ import annotations

import functools
import io

import hostlist
import pyarrow as pa
import pyarrow.csv as pcsv
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mfukit.sched.traces.columns import FIRST_SECOND, decimal_integers, iso_seconds
from mfukit.sched.traces.hostlists import HostlistCheck, hostlist_error
from mfukit.sched.traces.sacct import sacct_time

DIGITS = "0123456789"
# an ISO time with each character, sometimes, something else; and other spellings sacct or a user writes
ISO_LIKE = st.one_of(
    st.builds(
        "".join,
        st.lists(
            st.sampled_from([*DIGITS, "-", ":", "T", " ", "Z", "+", ".", "x", "\u0663"]),
            min_size=17,
            max_size=21,
        ),
    ),
    st.builds(
        "{:04d}-{:02d}-{:02d}{}{:02d}:{:02d}:{:02d}{}".format,
        st.integers(0, 10_000),
        st.integers(0, 13),
        st.integers(0, 32),
        st.sampled_from(["T", " ", "t"]),
        st.integers(0, 25),
        st.integers(0, 61),
        st.integers(0, 61),
        st.sampled_from(["", "Z", "+01:00", ".5", " "]),
    ),
    st.builds(
        "{:04d}-{:02d}-{:02d}{}".format,
        st.integers(1, 9999),
        st.integers(1, 12),
        st.integers(1, 31),
        st.sampled_from(["", "T08", "T08:53", " 08", "T08:53Z"]),
    ),
    st.sampled_from(["Unknown", "None", "", "1760000021", "-1", "0000-01-01T00:00:00", "0000-12-31"]),
)


def _row_reader(text: str) -> float | str | None:
    try:
        return sacct_time(text.strip())
    except ValueError:
        return "bad"


@settings(max_examples=300, deadline=None)
@given(st.lists(ISO_LIKE, min_size=1, max_size=40))
def test_iso_times_read_a_column_at_a_time_are_the_row_readers(values: list[str]) -> None:
    seconds, read = iso_seconds(pa.array([v.encode() for v in values], pa.binary()))
    for value, got, was_read in zip(values, seconds.tolist(), read.tolist(), strict=True):
        if was_read:
            assert _row_reader(value) == got, value


@settings(max_examples=300, deadline=None)
@given(st.lists(ISO_LIKE, min_size=1, max_size=40))
def test_times_arrows_csv_reader_takes_are_the_row_readers(values: list[str]) -> None:
    """The -P reader lets Arrow's CSV reader parse time columns while they hold only what it takes."""
    for value in values:
        data = ("t\n" + value + "\n").encode()
        options = pcsv.ConvertOptions(
            column_types={"t": pa.timestamp("s")},
            timestamp_parsers=[pcsv.ISO8601],
            strings_can_be_null=False,
            null_values=[],
        )
        try:
            table = pcsv.read_csv(
                io.BytesIO(data),
                parse_options=pcsv.ParseOptions(quote_char=False, ignore_empty_lines=False),
                convert_options=options,
            )
        except pa.ArrowInvalid:
            continue  # not taken: the reader parses the column as bytes
        seconds = table.column("t").cast(pa.int64())[0].as_py()
        if seconds < FIRST_SECOND:
            continue  # year 0: the reader parses the block again, as bytes
        assert _row_reader(value) == float(seconds), value


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("2024-02-29T23:59:59", 1709251199.0),
        ("2025-02-29T00:00:00", None),  # no such day
        ("2025-01-01T24:00:00", None),
        ("2025-01-01T00:00:60", None),  # Python has no leap second either
        ("0000-01-01T00:00:00", None),
        ("2025-01-01 00:00:00", None),  # another spelling: left to the row reader
    ],
)
def test_iso_times_at_the_edges(text: str, seconds: float | None) -> None:
    values, read = iso_seconds(pa.array([text.encode()], pa.binary()))
    assert (float(values[0]) if read[0] else None) == seconds


COUNTS = st.one_of(
    st.integers(0, 10**20).map(str),
    st.text(alphabet=[*DIGITS, "x", "X", "-", "+", " ", "_", ".", "e", "\u0663"], min_size=0, max_size=22),
    st.sampled_from(["0x10", "0xFFFFFFFF", "-0", "007", "0", "9223372036854775807", "99999999999999999999"]),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(COUNTS, min_size=1, max_size=40))
def test_counts_read_a_column_at_a_time_are_numbers_as_python_prints_them(values: list[str]) -> None:
    numbers, read = decimal_integers(pa.array([v.encode() for v in values], pa.binary()))
    for value, number, was_read in zip(values, numbers.tolist(), read.tolist(), strict=True):
        canonical = value.isascii() and value.isdigit() and len(value) <= 18 and str(int(value)) == value
        assert was_read == canonical, value
        if was_read:
            assert number == int(value)


HOSTLISTS = st.one_of(
    st.text(alphabet="ab1029-[],. ", max_size=16),
    st.builds(
        "{}[{}-{}]{}".format,
        st.sampled_from(["gpu", "", "n-", "a.b"]),
        st.integers(0, 300),
        st.integers(0, 300),
        st.sampled_from(["", "x", "]", "[1]"]),
    ),
    st.sampled_from(
        ["None assigned", "(null)", "", "gpu[01-03,05],login1", "a[1-100000]", "a[1-2],a[1-100000]"]
    ),
)


@functools.cache
def _expands(text: str) -> bool:
    value = text.strip()
    if value in {"", "None assigned", "(null)"}:
        return True
    try:
        hostlist.expand_hostlist(value)
    except (hostlist.BadHostlist, ValueError):
        return False
    return True


@settings(max_examples=200, deadline=None)
@given(st.lists(HOSTLISTS, min_size=1, max_size=20))
def test_hostlists_checked_without_expanding_are_those_python_hostlist_expands(texts: list[str]) -> None:
    for text in texts:
        assert (hostlist_error(text) is None) == _expands(text), text
    errors = HostlistCheck().errors(pa.array([t.encode() for t in texts], pa.binary()))
    assert sorted(errors) == [at for at, text in enumerate(texts) if not _expands(text)]
    assert all(errors[at] == hostlist_error(texts[at]) for at in errors)


def test_hostlists_at_python_hostlists_bound() -> None:
    """100,000 names in one part are a host list; one more is not (python-hostlist builds them first)."""
    assert hostlist_error("a[1-100000]") is None and _expands("a[1-100000]")
    assert hostlist_error("a[0-100000]") is not None and not _expands("a[0-100000]")
    errors = HostlistCheck().errors(pa.array([b"a[1-100000]", b"a[0-100000]", b"b[3-1]"], pa.binary()))
    assert sorted(errors) == [1, 2] and "results too large" in errors[1] and "start > stop" in errors[2]
