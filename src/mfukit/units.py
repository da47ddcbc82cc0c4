"""The only place with unit literals: parse user quantities ("400Gbps", "1.4T", "30min") and format them.

Inside mfukit every quantity is an SI float whose unit is in its name (``_bytes``, ``_s``,
``_flops_per_s``, ``_bytes_per_s``, ``_w``, ``_usd``). Network rates are entered in bits and
converted here, once. Display conventions: GiB for capacity, GB/s (1e9) for rates, TFLOP/s for
compute. A bare number is rejected wherever its unit would be ambiguous; a flag or field whose name carries
its unit (``--bytes``, ``--min-bytes``, ``interval_s``) takes a bare number in that unit.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Final

from mfukit.errors import InputError

SI_PREFIXES: Final[dict[str, float]] = {
    "": 1.0,
    "k": 1e3,
    "K": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
}
BINARY_PREFIXES: Final[dict[str, float]] = {
    "Ki": 2.0**10,
    "Mi": 2.0**20,
    "Gi": 2.0**30,
    "Ti": 2.0**40,
    "Pi": 2.0**50,
    "Ei": 2.0**60,
}
BITS_PER_BYTE: Final = 8.0
SECONDS_PER: Final[dict[str, float]] = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "sec": 1.0,
    "secs": 1.0,
    "second": 1.0,
    "seconds": 1.0,
    "min": 60.0,
    "mins": 60.0,
    "minute": 60.0,
    "minutes": 60.0,
    "h": 3600.0,
    "hr": 3600.0,
    "hrs": 3600.0,
    "hour": 3600.0,
    "hours": 3600.0,
    "d": 86400.0,
    "day": 86400.0,
    "days": 86400.0,
    "w": 604800.0,
    "week": 604800.0,
    "weeks": 604800.0,
}
SECONDS_PER_HOUR: Final = 3600.0
SECONDS_PER_DAY: Final = 86400.0
SECONDS_PER_1000_DAYS: Final = 1000.0 * SECONDS_PER_DAY
"""Failure rates are written as failures per 1,000 unit-days (unit: a GPU, node or job), Meta's unit."""
JOULES_PER_KWH: Final = 3.6e6

# the fraction's digits follow a literal point: `\d[\d_,]*\.?\d*` split a run of digits every way
_NUMBER = r"[-+]?(?:\d[\d_,]*(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_QUANTITY = re.compile(rf"(?P<number>{_NUMBER})\s*(?P<unit>.*)")  # matched on stripped text: linear


# a part's number starts where no digit, point or separator precedes it: a search over a run of digits
# then tries each run once instead of every suffix of it (quadratic)
_DURATION_PART = re.compile(rf"(?<![\d_,.])({_NUMBER})\s*([a-zA-Zµ]+)")


def _split(text: str, what: str, example: str, field: str | None) -> tuple[float, str]:
    match = _QUANTITY.fullmatch(text.strip())
    if match is None:
        raise InputError(
            f"not a {what}", field=field, value=text, expected=f"a number with a unit, e.g. {example}"
        )
    number = float(match.group("number").replace("_", "").replace(",", ""))
    if number < 0:  # every quantity parsed here is a magnitude: say so before judging the unit
        raise InputError("must not be negative", field=field, value=text, expected=f"e.g. {example}")
    return number, match.group("unit")


def _prefix_value(prefix: str, *, binary_ok: bool) -> float | None:
    if prefix in SI_PREFIXES:
        return SI_PREFIXES[prefix]
    if binary_ok and prefix in BINARY_PREFIXES:
        return BINARY_PREFIXES[prefix]
    return None


def _finite(value: float, text: object, field: str | None, *, allow_negative: bool = False) -> float:
    if not math.isfinite(value):
        raise InputError("must be a finite number", field=field, value=text)
    if value < 0 and not allow_negative:
        raise InputError("must not be negative", field=field, value=text)
    return value


def unit_named_by(field: str | None) -> str | None:
    """The unit a flag or field name carries: ``--bytes``/``--min-bytes``/``size_bytes`` -> "B",
    ``..._bytes_per_s`` -> "B/s", ``..._s``/``--...-s`` -> "s" (not ``per-s``), ``..._w`` -> "W"; None where the
    name says no unit, so that a bare number there stays ambiguous."""
    if field is None:
        return None
    name = field.rsplit(".", 1)[-1].lstrip("-").replace("-", "_").lower()
    if name.endswith("bytes_per_s"):
        return "B/s"
    if name == "bytes" or name.endswith("_bytes"):
        return "B"
    if name.endswith("_s") and not name.endswith("per_s"):
        return "s"
    if name.endswith("_w"):
        return "W"
    return None


def _bare(value: object, field: str | None, unit: str) -> float | None:
    """``value`` as a number when it is bare (no unit) and ``field``'s name carries ``unit``; else None."""
    if unit_named_by(field) != unit or isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        number = float(value)
    elif isinstance(value, str):
        match = _QUANTITY.match(value)
        if match is None or match.group("unit"):
            return None
        number = float(match.group("number").replace("_", "").replace(",", ""))
    else:
        return None
    if number < 0:
        raise InputError("must not be negative", field=field, value=value)
    return _finite(number, value, field)


def parse_count(value: object, *, field: str | None = None) -> float:
    """A plain count with an optional SI suffix: ``2048``, ``"4M"``, ``"1.4T"``, ``"1,953"``."""
    if isinstance(value, bool):
        raise InputError("is a boolean, not a count", field=field, value=value)
    if isinstance(value, int | float):
        return _finite(float(value), value, field)
    if not isinstance(value, str):
        raise InputError(
            "is not a count", field=field, value=value, expected='a number such as 2048 or "1.4T"'
        )
    number, unit = _split(value, "count", '"1.4T" or 2048', field)
    unit = re.sub(r"(tokens?|tok|sequences?|seqs?|steps?|params?|jobs?)$", "", unit).strip()
    scale = SI_PREFIXES.get(unit)
    if scale is None:
        raise InputError(
            f"unknown suffix {unit!r}",
            field=field,
            value=value,
            expected="one of k, M, G, T, P (e.g. '1.4T')",
        )
    return _finite(number * scale, value, field)


def parse_int_count(value: object, *, field: str | None = None) -> int:
    """A count that must be a whole number (GPUs, layers, sequences)."""
    count = parse_count(value, field=field)
    if count != int(count):
        raise InputError("must be a whole number", field=field, value=value)
    return int(count)


def parse_bytes(value: object, *, field: str | None = None) -> float:
    """A size in bytes: ``"80GB"`` (1e9), ``"80GiB"`` (2**30), ``"1.5TB"``. Bare numbers are rejected unless the
    field's name carries bytes (``--bytes 8``, as nccl-tests' ``-b 8``: :func:`unit_named_by`)."""
    bare = _bare(value, field, "B")
    if bare is not None:
        return bare
    if isinstance(value, int | float) and not isinstance(value, bool):
        raise InputError(
            "is a bare number; a size needs its unit",
            field=field,
            value=value,
            expected='e.g. "80GB" or "80GiB"',
        )
    if not isinstance(value, str):
        raise InputError("is not a size", field=field, value=value, expected='e.g. "80GB" or "80GiB"')
    number, unit = _split(value, "size", '"80GB" or "80GiB"', field)
    if not unit:
        raise InputError(
            "is a bare number; a size needs its unit",
            field=field,
            value=value,
            expected='e.g. "80GB" or "80GiB"',
        )
    for suffix in ("Bytes", "bytes", "byte", "B"):
        if unit.endswith(suffix):
            scale = _prefix_value(unit[: -len(suffix)].strip(), binary_ok=True)
            if scale is not None:
                return _finite(number * scale, value, field)
    raise InputError(
        f"unknown size unit {unit!r}", field=field, value=value, expected="B, KB, MB, GB, TB, GiB, TiB"
    )


def parse_duration_s(value: object, *, field: str | None = None) -> float:
    """A duration in seconds: ``"30min"``, ``"14d"``, ``"1h30min"``, ``"12.5us"``. Bare numbers are rejected unless
    the field's name carries seconds (``..._s``: :func:`unit_named_by`)."""
    bare = _bare(value, field, "s")
    if bare is not None:
        return bare
    match = _QUANTITY.match(value) if isinstance(value, str) else None
    if (isinstance(value, int | float) and not isinstance(value, bool)) or (
        match and not match.group("unit")
    ):
        raise InputError(
            "is a bare number; a duration needs its unit",
            field=field,
            value=value,
            expected='e.g. "30min", "14d", "5s"',
        )
    if not isinstance(value, str) or not value.strip():
        raise InputError("is not a duration", field=field, value=value, expected='e.g. "30min", "14d", "5s"')
    parts = _DURATION_PART.findall(value)
    if not parts or _DURATION_PART.sub("", value).strip():
        raise InputError(
            "is not a duration", field=field, value=value, expected='e.g. "30min", "14d", "1h30min"'
        )
    total = 0.0
    for number, unit in parts:
        if unit == "m":
            raise InputError(
                "'m' is ambiguous",
                field=field,
                value=value,
                hint="write 'min' for minutes or 'ms' for milliseconds",
            )
        if unit not in SECONDS_PER:
            raise InputError(
                f"unknown time unit {unit!r}",
                field=field,
                value=value,
                expected="ns, us, ms, s, min, h, d, w",
            )
        total += float(number.replace("_", "").replace(",", "")) * SECONDS_PER[unit]
    return _finite(total, value, field)


def parse_bandwidth_bytes_per_s(value: object, *, field: str | None = None) -> float:
    """A data rate in bytes/s. Bits: ``"400Gbps"``, ``"400Gb/s"``, ``"400 Gbit/s"``; bytes: ``"50GB/s"``, ``"50GBps"``."""
    expected = 'e.g. "400Gbps" (bits) or "50GB/s" (bytes)'
    bare = _bare(value, field, "B/s")
    if bare is not None:
        return bare
    if isinstance(value, int | float) and not isinstance(value, bool):
        raise InputError(
            "is a bare number; a rate needs its unit", field=field, value=value, expected=expected
        )
    if not isinstance(value, str):
        raise InputError("is not a data rate", field=field, value=value, expected=expected)
    number, unit = _split(value, "data rate", '"400Gbps"', field)
    compact = unit.replace(" ", "")
    for suffix, per_byte in (
        ("bit/s", 1 / BITS_PER_BYTE),
        ("bits/s", 1 / BITS_PER_BYTE),
        ("bps", 1 / BITS_PER_BYTE),
        ("b/s", 1 / BITS_PER_BYTE),
        ("B/s", 1.0),
        ("Bps", 1.0),
    ):
        if compact.endswith(suffix):
            scale = _prefix_value(compact[: -len(suffix)], binary_ok=True)
            if scale is not None:
                return _finite(number * scale * per_byte, value, field)
    raise InputError(f"unknown rate unit {unit!r}", field=field, value=value, expected=expected)


def parse_flops_per_s(value: object, *, field: str | None = None) -> float:
    """A compute rate: ``"989.4 TFLOPS"``, ``"989.4TFLOP/s"``, ``"1.979 PFLOPS"``."""
    expected = 'e.g. "989 TFLOPS" or "989TFLOP/s"'
    if isinstance(value, int | float) and not isinstance(value, bool):
        raise InputError(
            "is a bare number; a FLOP rate needs its unit", field=field, value=value, expected=expected
        )
    if not isinstance(value, str):
        raise InputError("is not a FLOP rate", field=field, value=value, expected=expected)
    number, unit = _split(value, "FLOP rate", '"989 TFLOPS"', field)
    compact = unit.replace(" ", "")
    for suffix in ("FLOP/s", "FLOPS", "FLOPs/s", "flop/s", "flops"):
        if compact.endswith(suffix):
            scale = _prefix_value(compact[: -len(suffix)], binary_ok=False)
            if scale is not None:
                return _finite(number * scale, value, field)
    raise InputError(f"unknown FLOP-rate unit {unit!r}", field=field, value=value, expected=expected)


def parse_power_w(value: object, *, field: str | None = None) -> float:
    """A power in watts: ``"700W"``, ``"1.2kW"``, ``"120 kW"``; a bare number where the field's name carries
    watts (``..._w``)."""
    bare = _bare(value, field, "W")
    if bare is not None:
        return bare
    if isinstance(value, int | float) and not isinstance(value, bool):
        raise InputError(
            "is a bare number; a power needs its unit", field=field, value=value, expected='e.g. "700W"'
        )
    if not isinstance(value, str):
        raise InputError("is not a power", field=field, value=value, expected='e.g. "700W"')
    number, unit = _split(value, "power", '"700W"', field)
    if unit.endswith("W"):
        scale = _prefix_value(unit[:-1].strip(), binary_ok=False)
        if scale is not None:
            return _finite(number * scale, value, field)
    raise InputError(f"unknown power unit {unit!r}", field=field, value=value, expected="W or kW")


def parse_fraction(value: object, *, field: str | None = None) -> float:
    """A fraction in [0, 1]: ``0.45`` or ``"45%"``."""
    if isinstance(value, str):
        text = value.strip()
        if text.endswith("%"):
            number = _split(text[:-1], "percentage", '"45%"', field)[0] / 100.0
        else:
            number = _split(text, "fraction", "0.45", field)[0]
    elif isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
    else:
        raise InputError(
            "is not a fraction", field=field, value=value, expected='a number in [0, 1] or "45%"'
        )
    if not 0.0 <= number <= 1.0:
        raise InputError("must be between 0 and 1", field=field, value=value, expected='e.g. 0.45 or "45%"')
    return number


def parse_failure_rate_per_s(value: object, *, field: str | None = None) -> float:
    """A failure rate as written, in failures per 1,000 unit-days (``6.5``, or a flag's ``"6.5"``), in
    failures per second per unit: the one conversion of the written unit."""
    expected = "failures per 1,000 unit-days, e.g. 6.5"
    if isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            raise InputError("is not a number", field=field, value=value, expected=expected) from None
    elif isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
    else:
        raise InputError("is not a failure rate", field=field, value=value, expected=expected)
    if not number >= 0:  # NaN too
        raise InputError("must be a rate >= 0 (failures per 1,000 unit-days)", field=field, value=value)
    return number / SECONDS_PER_1000_DAYS


def per_1000_unit_days(rate_per_s: float) -> float:
    """A failure rate per second per unit in the unit it is written in: failures per 1,000 unit-days."""
    return rate_per_s * SECONDS_PER_1000_DAYS


def parse_usd(value: object, *, field: str | None = None) -> float:
    """Money in US dollars: ``2.5``, ``"$2.50"``, ``"2.5 USD"``."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return _finite(float(value), value, field)
    if not isinstance(value, str):
        raise InputError(
            "is not an amount of money", field=field, value=value, expected='e.g. 2.5 or "$2.50"'
        )
    text = value.strip().removeprefix("$").removesuffix("USD").strip()
    number, unit = _split(text, "amount of money", '"$2.50"', field)
    scale = SI_PREFIXES.get(unit)
    if scale is None:
        raise InputError(
            f"unknown suffix {unit!r}", field=field, value=value, expected='e.g. "$2.50" or "1.2M"'
        )
    return _finite(number * scale, value, field)


# ---------------------------------------------------------------------------------------------- format


def _scaled(value: float, prefixes: dict[str, float], unit: str, digits: int) -> str:
    if value == 0 or not math.isfinite(value):
        return f"{value:.{digits}f} {unit}"
    magnitude = abs(value)
    chosen = ""
    for prefix, scale in sorted(prefixes.items(), key=lambda item: item[1]):
        if magnitude >= scale:
            chosen = prefix
    return f"{value / prefixes[chosen]:.{digits}f} {chosen}{unit}"


def format_bytes(value_bytes: float, digits: int = 1) -> str:
    """Capacity in binary units: ``74.5 GiB``."""
    return _scaled(value_bytes, {"": 1.0, **BINARY_PREFIXES}, "B", digits)


def format_bytes_si(value_bytes: float, digits: int = 1) -> str:
    """A size in decimal units (message sizes, checkpoints on storage): ``1.1 TB``."""
    return _scaled(value_bytes, {k: v for k, v in SI_PREFIXES.items() if k != "K"}, "B", digits)


def format_rate(value_bytes_per_s: float, digits: int = 1) -> str:
    """A data rate in GB/s (1e9 bytes/s), the unit of nccl-tests and vendor datasheets."""
    return f"{value_bytes_per_s / 1e9:.{digits}f} GB/s"


def format_bit_rate(value_bytes_per_s: float, digits: int = 0) -> str:
    """A network line rate in Gb/s."""
    return f"{value_bytes_per_s * BITS_PER_BYTE / 1e9:.{digits}f} Gb/s"


def format_flops_rate(value_flops_per_s: float, digits: int = 1) -> str:
    """Compute in TFLOP/s."""
    return f"{value_flops_per_s / 1e12:.{digits}f} TFLOP/s"


def format_flops(value_flops: float) -> str:
    """A FLOP count in scientific notation: ``5.46e+23 FLOP``."""
    return f"{value_flops:.3g} FLOP"


def format_count(value: float, digits: int = 2) -> str:
    """A count with an SI suffix: ``1.40T``."""
    return _scaled(value, {k: v for k, v in SI_PREFIXES.items() if k != "K"}, "", digits).replace(" ", "")


def format_duration(value_s: float, digits: int = 1) -> str:
    """A duration in the largest unit that keeps it >= 1: ``12.5 us``, ``3.2 h``, ``21.0 d``; zero is ``0 s``."""
    if not math.isfinite(value_s):
        return str(value_s)
    if value_s == 0:
        return "0 s"
    magnitude = abs(value_s)
    for unit, scale in (("d", 86400.0), ("h", 3600.0), ("min", 60.0), ("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if magnitude >= scale:
            return f"{value_s / scale:.{digits}f} {unit}"
    return f"{value_s / 1e-9:.{digits}f} ns"


def format_percent(fraction: float, digits: int = 1) -> str:
    """A 0..1 fraction as a percentage: ``49.6 %``."""
    return f"{fraction * 100:.{digits}f} %"


def format_power(value_w: float, digits: int = 1) -> str:
    return _scaled(value_w, {"": 1.0, "k": 1e3, "M": 1e6}, "W", digits)


def format_energy_kwh(value_kwh: float) -> str:
    if value_kwh >= 1e6:
        return f"{value_kwh / 1e6:.2f} GWh"
    if value_kwh >= 1e3:
        return f"{value_kwh / 1e3:.1f} MWh"
    return f"{value_kwh:.0f} kWh"


def format_usd(value_usd: float) -> str:
    if abs(value_usd) >= 1e6:
        return f"${value_usd / 1e6:.2f}M"
    if abs(value_usd) >= 1e3:
        return f"${value_usd / 1e3:.1f}k"
    return f"${value_usd:.2f}"


SI_UNIT_OF_FORMATTER: dict[Callable[..., str], str] = {
    format_bytes: "bytes",
    format_bytes_si: "bytes",
    format_rate: "bytes/s",
    format_bit_rate: "bytes/s",
    format_flops_rate: "FLOP/s",
    format_flops: "FLOP",
    format_duration: "s",
    format_power: "W",
    format_energy_kwh: "kWh",
    format_usd: "USD",
}
"""The unit of the raw value each formatter takes (what CSV writes); fractions (``format_percent``) are 0..1
everywhere and carry none."""
