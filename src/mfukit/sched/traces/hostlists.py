"""Slurm host lists (``gpu[01-03,05],login1``): expanded by python-hostlist, the expander Slurm sites
use, and checked without expanding them where a reader only needs to know they are host lists."""

from __future__ import annotations

import functools
import re
import sys

import hostlist
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_NAME = re.compile(r"[A-Za-z0-9._-]*")  # one name, or the text around a bracket (fullmatch)
_MAX_DIGITS = 18  # a range bound longer than this is left to python-hostlist
_MAX_NAMES: int = hostlist.MAX_SIZE  # python-hostlist refuses a part that names more hosts
_CACHE_VALUES = 1 << 16  # good lists remembered across batches
_UNSET = frozenset({"", "None assigned", "(null)"})
# whole values a column of host lists is checked against at once (RE2: linear time)
_NAMES_ONLY = r"^[A-Za-z0-9._,-]*$"
_ONE_RANGE = r"^[A-Za-z0-9._-]*\[(?P<low>[0-9]{1,6})-(?P<high>[0-9]{1,6})\][A-Za-z0-9._-]*$"


@functools.lru_cache(maxsize=1 << 16)
def expand_hostlist(text: str) -> tuple[str, ...]:
    """Slurm hostlist to names: ``gpu[01-03,05],login1`` -> gpu01 gpu02 gpu03 gpu05 login1, by
    python-hostlist. Cached: a trace names the same few node sets over and over, and every job on one
    set then shares one tuple of interned names. A list that is not a host list (``gpu[a-3]``, or one
    of more than 100,000 names) is a ValueError naming it."""
    value = text.strip()
    if value in _UNSET:
        return ()
    try:
        names = hostlist.expand_hostlist(value)
    except hostlist.BadHostlist as error:
        raise ValueError(f"NodeList {value!r} is not a Slurm host list ({error})") from None
    return tuple(sys.intern(name) for name in names)


def hostlist_error(text: str) -> str | None:
    """Why ``text`` is not a host list (the message :func:`expand_hostlist` raises), or None.

    Lists of names with at most one bracket of ranges each (``gpu[001-064,100]``, ``a1,b[2-3]x``),
    nearly all that Slurm prints, are checked without expanding them; any other goes through
    python-hostlist, so the two never disagree on which lists are good.
    """
    value = text.strip()
    if value in _UNSET or _plain(value):
        return None
    try:
        expand_hostlist(value)
    except ValueError as error:
        return str(error)
    return None


class HostlistCheck:
    """Checks the NodeList values of a read, each distinct good list once (up to a bound, then again)."""

    def __init__(self) -> None:
        self._good = pa.array([], pa.binary())

    def errors(self, values: pa.Array) -> dict[int, str]:
        """Index -> why, for the values of a binary array (bytes; bad UTF-8 read as U+FFFD) that are
        not host lists. Values not known good: names without brackets (``gpu07,login1``) and one
        name with one range (``gpu[0001-0064]``) are checked all at once; the rest one by one."""
        fresh = np.flatnonzero(~pc.is_in(values, value_set=self._good).to_numpy(zero_copy_only=False))
        if not fresh.size:
            return {}
        new = values.take(pa.array(fresh))
        why = _checked(new)
        good = new.filter(pa.array([w is None for w in why]))
        known = self._good if len(self._good) + len(good) <= _CACHE_VALUES else self._good.slice(0, 0)
        self._good = pa.concat_arrays([known, good])
        return {int(fresh[at]): w for at, w in enumerate(why) if w is not None}


def _checked(values: pa.Array) -> list[str | None]:
    """:func:`hostlist_error` of each value of a binary array."""
    fine = pc.match_substring_regex(values, _NAMES_ONLY).to_numpy(zero_copy_only=False)
    one = pc.extract_regex(values, _ONE_RANGE)
    if one.null_count < len(one):
        found = one.is_valid()
        low, high = (_numbers(pc.if_else(found, one.field(name), b"0")) for name in ("low", "high"))
        fine |= found.to_numpy(zero_copy_only=False) & (low <= high) & (high - low < _MAX_NAMES)
    why: list[str | None] = [None] * len(values)
    for at in np.flatnonzero(~fine).tolist():
        why[at] = hostlist_error(values[at].as_py().decode("utf-8", "replace"))
    return why


def _numbers(digits: pa.Array) -> np.ndarray[tuple[int], np.dtype[np.int64]]:
    """1 to 6 ASCII digits per value, as int64."""
    return np.asarray(digits.cast(pa.string()).cast(pa.int64()), dtype=np.int64)


def _plain(value: str) -> bool:
    """True if ``value`` is comma-separated parts of a name, or of a name, one bracket of ranges and a
    name, that python-hostlist expands (each part's ranges ascending and at most its 100,000 names)."""
    at, end = 0, len(value)
    while at < end:
        comma, opening = value.find(",", at), value.find("[", at)
        if opening == -1 or -1 < comma < opening:  # a part without a bracket
            stop = end if comma == -1 else comma
            if not _NAME.fullmatch(value, at, stop):
                return False
            at = stop + 1
            continue
        closing = value.find("]", opening)
        if closing == -1 or not _NAME.fullmatch(value, at, opening):
            return False
        comma = value.find(",", closing)
        stop = end if comma == -1 else comma
        if not (_NAME.fullmatch(value, closing + 1, stop) and _ranges(value[opening + 1 : closing])):
            return False
        at = stop + 1
    return True


def _ranges(text: str) -> bool:
    """True if ``text`` (``01-03,05``) is ascending ranges of ASCII digits naming at most MAX_SIZE hosts."""
    names = 0
    for item in text.split(","):
        low, dash, high = item.partition("-")
        high = high if dash else low
        if not all(part.isascii() and part.isdigit() and len(part) <= _MAX_DIGITS for part in (low, high)):
            return False
        if int(high) < int(low):
            return False
        names += int(high) - int(low) + 1
    return names <= _MAX_NAMES
