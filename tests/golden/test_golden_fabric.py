"""The fabric designer against NVIDIA's DGX SuperPOD reference architectures (fabric_superpod.toml)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from mfukit import catalog, units
from mfukit.fabric.rail import FabricRequest, design

CASES: list[dict[str, Any]] = tomllib.loads((Path(__file__).parent / "fabric_superpod.toml").read_text())[
    "case"
]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_designer_reproduces_reference_architecture(case: dict[str, Any]) -> None:
    assert case["tolerance"] == 0 and case["source"].startswith("https://docs.nvidia.com/")
    built = design(
        FabricRequest(
            name="compute",
            nodes=case["nodes"],
            ports_per_node=case["ports_per_node"],
            port_bytes_per_s=units.parse_bandwidth_bytes_per_s(case["port_rate"]),
            switch=catalog.switch(case["switch"]),
            extra_endpoints=case["extra_endpoints"],
        )
    )
    clos = built.clos
    counts = {
        name: (clos.tier(name).switches if clos.tier(name) else 0) for name in ("leaf", "spine", "core")
    }
    assert counts == {"leaf": case["leaf"], "spine": case["spine"], "core": case["core"]}
    assert clos.links.get("node-leaf", 0) == case["node_leaf"]
    assert clos.links.get("leaf-spine", 0) == case["leaf_spine"]
    assert clos.links.get("spine-core", 0) == case["spine_core"]
    assert clos.bisection_ports == pytest.approx(case["node_leaf"] / 2)
