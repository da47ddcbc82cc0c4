"""The collective model against measured figures (tests/golden/comm_busbw.toml, one row per case)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from mfukit import units
from mfukit.catalog import resolve
from mfukit.comm.collectives import collective_named
from mfukit.comm.model import predict
from mfukit.comm.topology import from_system
from mfukit.core.scenario import ClusterSection
from mfukit.core.schema import validate_as

CASES: list[dict[str, Any]] = tomllib.loads((Path(__file__).parent / "comm_busbw.toml").read_text())["case"]


def test_every_case_states_its_source_and_tolerance() -> None:
    for case in CASES:
        for key in ("source", "table", "tolerance", "why", "measured"):
            assert case.get(key) not in (None, ""), f"{case['name']}: no {key}"
        assert 0 < case["tolerance"] <= 0.25


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_model_reproduces_measurement(case: dict[str, Any]) -> None:
    fields = {"system": case["system"], "num_nodes": case["nodes"]}
    if "nics_per_node" in case:
        fields["nics_per_node"] = case["nics_per_node"]
    cluster = resolve.cluster(validate_as(ClusterSection, fields, source="golden"), source="golden")
    topology, _ = from_system(cluster.system, cluster.accelerator, num_nodes=cluster.num_nodes)
    prediction = predict(
        collective_named(case["collective"]),
        units.parse_bytes(case["bytes"]),
        topology,
        cluster.num_gpus,
        algorithm=case["algorithm"],
    )
    if case["metric"] == "time":
        model, measured = float(prediction.time_s[0]), units.parse_duration_s(case["measured"])
    else:
        column = prediction.busbw_bytes_per_s if case["metric"] == "busbw" else prediction.algbw_bytes_per_s
        model, measured = float(column[0]), units.parse_bandwidth_bytes_per_s(case["measured"])
    assert model == pytest.approx(measured, rel=case["tolerance"]), (
        f"model {model:.4g} vs measured {measured:.4g} ({model / measured - 1:+.1%})"
    )
