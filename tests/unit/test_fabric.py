"""Fabric designer pieces: top-of-rack designs, oversubscription, the bill of materials, described topologies."""

from __future__ import annotations

from pathlib import Path

import pytest

from mfukit import catalog
from mfukit.errors import InputError
from mfukit.fabric.bom import Prices, bill_of_materials
from mfukit.fabric.draw import draw
from mfukit.fabric.rail import FabricRequest, design
from mfukit.fabric.spec import check_spec, load_spec

QM9700 = catalog.switch("qm9700")


def request(nodes: int, **kwargs) -> FabricRequest:  # type: ignore[no-untyped-def]
    return FabricRequest(
        name="compute", nodes=nodes, ports_per_node=8, port_bytes_per_s=50e9, switch=QM9700, **kwargs
    )


def test_h100_superpod_bill_of_materials() -> None:
    built = design(request(127, extra_endpoints=4))
    bom = bill_of_materials(
        built.clos,
        switch=QM9700,
        port_bytes_per_s=50e9,
        node_ports=1016,
        extra_endpoints=4,
        system="dgx-h100",
    )
    parts = {(line.segment, line.end, line.part): line.modules for line in bom.optics}
    assert parts == {
        ("node-leaf", "node", "MMA4Z00-NS"): 508,  # 4 twin-port cages per DGX H100
        ("node-leaf", "node", "MMA4Z00-NS400"): 4,  # UFM
        ("node-leaf", "leaf", "MMA4Z00-NS"): 510,
        ("leaf-spine", "leaf", "MMA4Z00-NS"): 512,
        ("leaf-spine", "spine", "MMA4Z00-NS"): 512,
    }
    assert bom.transceivers == 2046
    assert bom.optics_power_w == pytest.approx(2042 * 15 + 4 * 9)
    assert bom.switch_power_w == pytest.approx(48 * QM9700.power_w)
    assert bom.total_cost_usd is None


def test_prices_and_missing_optics_data() -> None:
    built = design(FabricRequest("compute", 16, 8, 25e9, QM9700))
    bom = bill_of_materials(
        built.clos, switch=QM9700, port_bytes_per_s=25e9, node_ports=128, prices=Prices(20000.0, 900.0, 100.0)
    )
    assert bom.optics == [] and "no transceiver data for 200 Gb/s" in bom.warnings[0]
    assert bom.cost_usd == {
        "switches": built.clos.switches * 20000.0,
        "cables": sum(built.clos.links.values()) * 100.0,
    }


def test_top_of_rack_fills_leaves_with_whole_nodes() -> None:
    built = design(request(16, rail_optimized=False))
    assert built.clos.tier("leaf").switches == 4  # type: ignore[union-attr]
    assert built.clos.tier("spine").switches == 2  # type: ignore[union-attr]
    assert built.node_slots == 16
    one = design(request(8, rail_optimized=False))
    assert one.clos.levels == 1 and one.clos.links == {"node-leaf": 64}


def test_leaf_oversubscription() -> None:
    built = design(request(96, leaf_oversubscription=3.0))
    assert (built.leaf_down, built.leaf_up) == (48, 16)
    assert built.nodes_per_su == 48 and built.scalable_units == 2
    assert built.oversubscription == {"leaf": 3.0}
    assert built.bisection_bytes_per_s == pytest.approx(16 * 16 * 50e9 / 2)


def test_bad_requests() -> None:
    with pytest.raises(InputError):
        request(0)
    with pytest.raises(InputError):
        request(4, extra_endpoints=-1)
    with pytest.raises(InputError, match="3-tier"):
        design(request(40000))
    with pytest.raises(InputError, match="do not fit"):
        design(FabricRequest("x", 200, 40, 50e9, QM9700, rail_optimized=False))


def test_drawing() -> None:
    built = design(request(512))
    lines = draw(built.clos, switch="qm9700", nodes=512, ports_per_node=8, scalable_units=16, nodes_per_su=32)
    assert lines[0].startswith("  core") and "64 x qm9700" in lines[0]
    assert any("4096 cables spine-core" in line for line in lines)
    assert "8 per SU pod" in lines[2]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "fabric.yaml"
    path.write_text(text)
    return path


def test_described_superpod(tmp_path: Path) -> None:
    spec = load_spec(
        write(
            tmp_path,
            "switch: qm9700\nnodes: 127\nports_per_node: 8\nextra_endpoints: 4\nsystem: dgx-h100\n"
            "tiers:\n  - {name: leaf, switches: 32, down: 32, up: 32}\n  - {name: spine, switches: 16, down: 64}\n",
        )
    )
    checked = check_spec(spec, source="fabric.yaml")
    assert [f.severity for f in checked.findings] == []
    assert checked.capacity == 1024 and checked.clos.links == {"node-leaf": 1020, "leaf-spine": 1024}
    assert checked.clos.bisection_ports == 510


def test_described_mistakes(tmp_path: Path) -> None:
    spec = load_spec(
        write(
            tmp_path,
            "switch: qm9700\nendpoints: 1600\ntiers:\n  - {name: leaf, switches: 40, down: 40, up: 24}\n"
            "  - {name: spine, switches: 10, down: 64}\n",
        )
    )
    found = {f.id: f.severity for f in check_spec(spec, source="x").findings}
    assert found == {
        "fabric_links_unterminated": "error",  # 960 uplinks on 640 spine ports
        "fabric_uneven_uplinks": "warning",  # 24 uplinks per leaf over 10 spines
        "fabric_oversubscribed": "info",  # 40:24
    }


def test_described_radix(tmp_path: Path) -> None:
    spec = load_spec(
        write(
            tmp_path,
            "switch: qm9700\nendpoints: 10\ntiers:\n  - {name: leaf, switches: 1, down: 60, up: 8}\n",
        )
    )
    ids = [f.id for f in check_spec(spec, source="x").findings]
    assert "fabric_radix_exceeded" in ids and "fabric_top_uplinks" in ids


def test_described_needs_endpoints(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="nodes"):
        load_spec(write(tmp_path, "switch: qm9700\ntiers:\n  - {name: leaf, switches: 1, down: 60}\n"))
