"""Fuzzed parsers: whatever they are fed, they return a result or raise mfukit's InputError, nothing else."""

from __future__ import annotations

import contextlib
import json
import math
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mfukit.comm.nccl_log import analyse_nccl_log
from mfukit.comm.nccl_tests import NcclTestsRun, parse_nccl_tests
from mfukit.core.schema import validate_as
from mfukit.errors import InputError
from mfukit.fabric.spec import TopologySpec, check_spec

DATA = Path(__file__).parents[1] / "data" / "comm"
TEXT_FIXTURES = sorted(p for p in DATA.rglob("*.txt"))
LOG_FIXTURES = sorted(DATA.rglob("*.log"))
JSON_FIXTURE = json.loads((DATA / "synthetic" / "current_2025_allreduce_2x8_h100.json").read_text())
FUZZ = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])

TOKENS = st.sampled_from(
    ["#", "N/A", "nan", "inf", "-1", "0", "1e+05", "float", "sum", "none", "[0]", "[1,0]<stdout>:",
     "NCCL INFO", "Rank", "Group", "Avg bus bandwidth :", "size count type redop root time algbw busbw #wrong",
     "\t", "  ", "99999999999999999999999", "-0.0", "é", "\x00", "4e-07", ":", "via NET/IB/0"]
)  # fmt: skip


def _sane(run: NcclTestsRun) -> None:
    for row in run.rows:
        assert row.size_bytes >= 0 and row.count >= 0
        for result in row.results:
            for value in (result.time_s, result.algbw_bytes_per_s, result.busbw_bytes_per_s):
                assert math.isfinite(value) and value >= 0


def _parse(text: str) -> None:
    with contextlib.suppress(InputError):
        _sane(parse_nccl_tests(text, name_hint="fuzz.txt"))


@FUZZ
@given(st.text(max_size=400))
def test_arbitrary_text(text: str) -> None:
    _parse(text)


@FUZZ
@given(st.lists(st.lists(TOKENS, max_size=16).map(" ".join), max_size=30).map("\n".join))
def test_token_soup(text: str) -> None:
    _parse(text)


@FUZZ
@given(st.sampled_from(TEXT_FIXTURES), st.data())
def test_mutated_fixtures(path: Path, data: st.DataObject) -> None:
    lines = path.read_text().splitlines()
    for _ in range(data.draw(st.integers(min_value=1, max_value=6))):
        if not lines:
            break
        index = data.draw(st.integers(min_value=0, max_value=len(lines) - 1))
        action = data.draw(st.sampled_from(["drop", "duplicate", "truncate", "replace", "splice"]))
        if action == "drop":
            del lines[index]
        elif action == "duplicate":
            lines.insert(index, lines[index])
        elif action == "truncate":
            lines[index] = lines[index][: data.draw(st.integers(min_value=0, max_value=len(lines[index])))]
        elif action == "replace":
            words = lines[index].split()
            if words:
                words[data.draw(st.integers(min_value=0, max_value=len(words) - 1))] = data.draw(TOKENS)
            lines[index] = " ".join(words)
        else:
            lines[index] += " host:1:1 [0] NCCL INFO " + data.draw(st.text(max_size=20))
    _parse("\n".join(lines))


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


@FUZZ
@given(st.dictionaries(st.sampled_from(["results", "devices", "config", "args", "nccl_version",
                                        "out_of_bounds", "average_bus_bandwidth"]), JSON_VALUES))  # fmt: skip
def test_json_shapes(document: dict[str, Any]) -> None:
    _parse(json.dumps(document))


@FUZZ
@given(st.data())
def test_json_report_with_corrupted_entries(data: st.DataObject) -> None:
    document = json.loads(json.dumps(JSON_FIXTURE))
    entry = data.draw(st.integers(min_value=0, max_value=len(document["results"]) - 1))
    key = data.draw(st.sampled_from(["size", "count", "root", "out_of_place", "in_place", "type"]))
    document["results"][entry][key] = data.draw(JSON_VALUES)
    _parse(json.dumps(document))


@FUZZ
@given(st.text(max_size=400))
def test_nccl_log_never_raises(text: str) -> None:
    report = analyse_nccl_log(text)
    assert all(f.id.startswith("nccl_") for f in report.findings)


@FUZZ
@given(st.sampled_from(LOG_FIXTURES), st.data())
def test_nccl_log_mutated(path: Path, data: st.DataObject) -> None:
    lines = path.read_text().splitlines()
    keep = data.draw(st.lists(st.integers(min_value=0, max_value=len(lines) - 1), max_size=len(lines)))
    mangled = [lines[i][: data.draw(st.integers(min_value=0, max_value=len(lines[i])))] for i in keep]
    analyse_nccl_log("\n".join(mangled), expected_nics_per_node=data.draw(st.none() | st.integers(0, 16)))


@FUZZ
@given(st.dictionaries(st.sampled_from(["switch", "nodes", "ports_per_node", "endpoints", "tiers",
                                        "extra_endpoints", "port_rate", "system"]), JSON_VALUES))  # fmt: skip
def test_fabric_spec_shapes(document: dict[str, Any]) -> None:
    with contextlib.suppress(InputError):
        check_spec(validate_as(TopologySpec, document, source="fuzz"), source="fuzz")


@FUZZ
@given(
    st.lists(
        st.fixed_dictionaries(
            {
                "name": st.sampled_from(["leaf", "spine", "core"]),
                "switches": st.integers(1, 300),
                "down": st.integers(1, 200),
                "up": st.integers(0, 200),
            }
        ),
        min_size=1,
        max_size=3,
    ),
    st.integers(1, 5000),
)
def test_fabric_spec_tiers(tiers: list[dict[str, Any]], endpoints: int) -> None:
    spec = validate_as(
        TopologySpec, {"switch": "qm9700", "endpoints": endpoints, "tiers": tiers}, source="fuzz"
    )
    checked = check_spec(spec, source="fuzz")
    assert checked.clos.levels == len(tiers)
