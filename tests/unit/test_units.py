from __future__ import annotations

import pytest

from mfukit import units
from mfukit.errors import InputError


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1.4T", 1.4e12), ("4M", 4e6), (2048, 2048.0), ("1,953", 1953.0), ("1.4T tokens", 1.4e12), ("2k", 2e3)],
)
def test_counts(text: object, expected: float) -> None:
    assert units.parse_count(text) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("80GB", 80e9), ("80GiB", 80 * 2**30), ("1.5 TB", 1.5e12), ("512B", 512.0), ("8 KiB", 8192.0)],
)
def test_bytes(text: str, expected: float) -> None:
    assert units.parse_bytes(text) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("30min", 1800.0), ("14d", 14 * 86400.0), ("1h30min", 5400.0), ("12.5us", 12.5e-6), ("5 s", 5.0)],
)
def test_durations(text: str, expected: float) -> None:
    assert units.parse_duration_s(text) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("400Gbps", 50e9), ("400 Gb/s", 50e9), ("400Gbit/s", 50e9), ("50GB/s", 50e9), ("3.35TB/s", 3.35e12)],
)
def test_bandwidth_bits_and_bytes(text: str, expected: float) -> None:
    assert units.parse_bandwidth_bytes_per_s(text) == pytest.approx(expected)


def test_flops_power_fraction_money() -> None:
    assert units.parse_flops_per_s("989.4 TFLOPS") == pytest.approx(989.4e12)
    assert units.parse_flops_per_s("1.979PFLOP/s") == pytest.approx(1.979e15)
    assert units.parse_power_w("10.2kW") == pytest.approx(10200.0)
    assert units.parse_fraction("45%") == pytest.approx(0.45)
    assert units.parse_usd("$2.50") == pytest.approx(2.5)


@pytest.mark.parametrize(
    ("parser", "value", "says"),
    [
        (units.parse_bytes, 80, "bare number"),
        (units.parse_duration_s, 30, "bare number"),
        (units.parse_duration_s, "30m", "ambiguous"),
        (units.parse_bandwidth_bytes_per_s, "400G", "unknown rate unit"),
        (units.parse_count, "-5", "negative"),
        (units.parse_bytes, "-5", "must not be negative"),
        (units.parse_bytes, "-5GiB", "must not be negative"),
        (units.parse_bytes, "5", "bare number"),
        (units.parse_bandwidth_bytes_per_s, "-400Gbps", "must not be negative"),
        (units.parse_power_w, "-700W", "must not be negative"),
        (units.parse_count, "1.4X", "unknown suffix"),
        (units.parse_fraction, 1.5, "between 0 and 1"),
        (units.parse_bytes, "lots", "not a size"),
    ],
)
def test_bad_values_name_the_problem(parser, value: object, says: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InputError) as caught:
        parser(value, field="some.field")
    assert says in caught.value.render()
    assert "some.field" in caught.value.render()


def test_formatting_uses_display_conventions() -> None:
    assert units.format_bytes(80 * 2**30) == "80.0 GiB"
    assert units.format_rate(450e9) == "450.0 GB/s"
    assert units.format_bit_rate(50e9) == "400 Gb/s"
    assert units.format_flops_rate(989.4e12) == "989.4 TFLOP/s"
    assert units.format_duration(21 * 86400) == "21.0 d"
    assert units.format_duration(12.5e-6) == "12.5 us"
    assert units.format_duration(0) == units.format_duration(-0.0) == "0 s"  # not "0.0 ns"
    assert units.format_duration(3e-10) == "0.3 ns"
    assert units.format_count(1.4e12) == "1.40T"
    assert units.format_percent(0.496) == "49.6 %"
