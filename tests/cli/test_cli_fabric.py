"""`mfukit fabric design` and `fabric check` through the real entry point."""

from __future__ import annotations

from pathlib import Path

KEYS = {"tiers", "leaf", "spine", "core", "switches", "cables", "transceivers", "bisection_bytes_per_s",
        "oversubscription", "power_w"}  # fmt: skip


def test_design_superpod_json(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("fabric", "design", "--system", "dgx-h100", "--nodes", "127", "--switch", "qm9700",
                 "--extra-endpoints", "4", "--format", "json")  # fmt: skip
    assert run.exit_code == 0
    result = run.json()["result"]
    assert set(result) >= KEYS
    assert (result["tiers"], result["leaf"]["switches"], result["spine"]["switches"], result["core"]) == (
        2,
        32,
        16,
        None,
    )
    assert result["cables"] == {"node-leaf": 1020, "leaf-spine": 1024}
    assert result["transceivers"]["total"] == 2046 and result["scalable_units"] == 4
    assert result["bisection_bytes_per_s"] == 510 * 50e9
    assert result["oversubscription"] == {"leaf": 1.0}


def test_design_table_and_drawing(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("fabric", "design", "--system", "dgx-h100", "--gpus", "4096")
    assert run.exit_code == 0
    assert "core   [    64 x qm9700" in run.stdout and "4096 cables spine-core" in run.stdout


def test_design_with_storage_and_prices(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("fabric", "design", "--nodes", "64", "--storage-ports-per-node", "2", "--switch-price", "25000",
                 "--optic-price", "800", "--cable-price", "120", "--format", "json")  # fmt: skip
    assert run.exit_code == 0
    result = run.json()["result"]
    storage = result["networks"]["storage"]
    assert storage["cables"]["node-leaf"] == 128 and storage["leaf"]["switches"] == 4
    compute_cost = 24 * 25000 + result["transceivers"]["total"] * 800 + 1024 * 120
    assert result["compute_cost_usd"] == compute_cost
    storage_cost = storage["switches"] * 25000 + storage["transceivers"]["total"] * 800
    storage_cost += sum(storage["cables"].values()) * 120
    assert storage["cost_usd"] == storage_cost
    assert result["cost_usd"] == compute_cost + storage_cost  # the top level covers every network designed
    assert result["power_w"] == result["compute_power_w"] + storage["power_w"]
    assert result["compute_power_w"] == result["switch_power_w"] + result["optics_power_w"]
    table = mfukit("fabric", "design", "--nodes", "64", "--storage-ports-per-node", "2", "--switch-price", "25000",
                   "--optic-price", "800", "--cable-price", "120")  # fmt: skip
    assert "cost, all networks (+ storage)" in table.stdout


def test_design_of_a_gpu_alone_uses_its_default_node(mfukit) -> None:  # type: ignore[no-untyped-def]
    # dgx-a100-80gb's 8 x 200 Gb/s HDR ports, not dgx-h100's 400 Gb/s ones
    run = mfukit("fabric", "design", "--gpu", "a100-80gb-sxm", "--nodes", "4", "--format", "json")
    assert run.exit_code == 0, run.stderr
    assert run.json()["result"]["endpoint_ports"] == 32
    assert any("qm8790" in note and "200 Gb/s" in note for note in run.json()["assumptions"])


def test_design_needs_a_size(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("fabric", "design", "--system", "dgx-h100")
    assert run.exit_code == 2 and "--nodes" in run.stderr


def test_check(mfukit, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    good = tmp_path / "good.yaml"
    good.write_text("switch: qm9700\nnodes: 31\nports_per_node: 8\nextra_endpoints: 4\n"
                    "tiers:\n  - {name: leaf, switches: 8, down: 32, up: 32}\n  - {name: spine, switches: 4, down: 64}\n")  # fmt: skip
    run = mfukit("fabric", "check", str(good), "--format", "json")
    assert run.exit_code == 0 and run.json()["result"]["endpoint_capacity"] == 256
    bad = tmp_path / "bad.toml"
    bad.write_text(
        'switch = "qm9700"\nendpoints = 300\n[[tiers]]\nname = "leaf"\nswitches = 4\ndown = 64\nup = 16\n'
    )
    run = mfukit("fabric", "check", str(bad))
    assert run.exit_code == 1 and "fabric_radix_exceeded" in run.stdout
    typo = tmp_path / "typo.yaml"
    typo.write_text("switch: qm9700\nnodes: 4\ntier: []\n")
    run = mfukit("fabric", "check", str(typo))
    assert run.exit_code == 2 and "tier" in run.stderr and "Traceback" not in run.stderr


EXAMPLE = Path(__file__).parents[2] / "examples" / "fabric_dgx-h100_superpod_4su.yaml"


def test_shipped_example_passes_and_matches_the_design(mfukit, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    checked = mfukit("fabric", "check", str(EXAMPLE), "--format", "json")
    assert checked.exit_code == 0, checked.stderr
    result = checked.json()["result"]
    assert not [f for f in result["findings"] if f["severity"] != "info"]
    designed = mfukit("fabric", "design", "--system", "dgx-h100", "--nodes", "127", "--switch", "qm9700",
                      "--extra-endpoints", "4", "--format", "json").json()["result"]  # fmt: skip
    assert result["transceivers"]["total"] == designed["transceivers"]["total"] == 2046
    assert result["cables"] == designed["cables"] and result["switches"] == designed["switches"]


def test_node_optics_follow_the_node_not_the_system_key(mfukit, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Without `system:` the node side is one single-port OSFP per port (2,554 in all), and the output says
    so; `node_optics: twin-port` gives the DGX H100 count without naming the system."""
    text = EXAMPLE.read_text()
    bare = tmp_path / "bare.yaml"
    bare.write_text(text.replace("system: dgx-h100", "").replace("node_optics: twin-port", ""))
    envelope = mfukit("fabric", "check", str(bare), "--format", "json").json()
    assert envelope["result"]["transceivers"]["total"] == 2046 + 508
    assert any("single-port" in a and "set node_optics" in a for a in envelope["assumptions"])
    twin = tmp_path / "twin.yaml"
    twin.write_text(text.replace("system: dgx-h100", ""))
    assert (
        mfukit("fabric", "check", str(twin), "--format", "json").json()["result"]["transceivers"]["total"]
        == 2046
    )
