"""Failure presets, checkpoint cost, restart parts and the analytic interval/ETTR model."""

from __future__ import annotations

import math

import pytest

from mfukit import catalog, units
from mfukit.core.cluster import Cluster
from mfukit.core.scenario import FtSection, load_scenario
from mfukit.errors import InputError, UnknownNameError
from mfukit.ft import checkpoint_io as ckio
from mfukit.ft.failures import job_failures, load_failure_model, preset_names
from mfukit.ft.interval import daly_interval_s, expected_run, recommended_interval_s, young_interval_s
from mfukit.ft.restart import RestartParts, erlang_b, no_spare_probability, restart_parts, spares_for
from mfukit.ft.run import RunModel, effective_save


def llama3(num_gpus: int = 16384, **kwargs: object):  # type: ignore[no-untyped-def]
    return job_failures(
        load_failure_model("llama3", source="test"), num_gpus=num_gpus, num_nodes=num_gpus // 8, **kwargs
    )


def test_presets_ship_with_sources() -> None:
    assert {"llama3", "meta-rsc1", "meta-rsc2"} <= set(preset_names())
    for name in preset_names():
        spec = load_failure_model(name, source="test")
        assert spec.source.url.startswith("https://")


def test_llama3_counts_reproduce_table_5() -> None:
    failures = llama3()
    days = 54 * 86400.0
    counts = {c.name: failures.rate_per_s(c) * days for c in failures.categories}
    assert round(sum(v for k, v in counts.items() if k != "planned-maintenance")) == 419
    assert round(counts["faulty-gpu"]) == 148 and round(counts["gpu-hbm3"]) == 72
    assert round(counts["planned-maintenance"]) == 47
    gpu = sum(counts[c.name] for c in failures.categories if c.group == "GPU")
    assert round(gpu) == 268  # 1.26e-5 per GPU-hour
    assert gpu / (16384 * 54 * 24) == pytest.approx(1.26e-5, rel=0.01)


def test_rates_scale_with_their_unit() -> None:
    """GPU faults scale with GPUs, node faults with nodes, planned stops not at all."""
    small, large = llama3(8192), llama3(16384)
    assert large.failure_rate_per_s == pytest.approx(2 * small.failure_rate_per_s)
    assert large.planned_rate_per_s == pytest.approx(small.planned_rate_per_s)


def test_overrides_and_cluster_rate() -> None:
    base = llama3()
    faster = llama3(overrides={"faulty-gpu": 0.0})
    faulty = next(c for c in base.categories if c.name == "faulty-gpu")
    assert base.failure_rate_per_s - faster.failure_rate_per_s == pytest.approx(base.rate_per_s(faulty))
    meta = llama3(node_rate_per_s=units.parse_failure_rate_per_s(6.5))  # per 1,000 node-days
    assert meta.mtbf_s / 3600 == pytest.approx(1.80, abs=0.01)
    assert meta.planned_rate_per_s == base.planned_rate_per_s  # planned stops are kept
    with pytest.raises(UnknownNameError, match="faulty-gpu"):
        llama3(overrides={"faulty-gpus": 0.1})
    with pytest.raises(InputError) as caught:  # rates are checked, and made SI, where the scenario loads
        load_scenario(None, {"model.preset": "llama-7b", "ft.rates": {"faulty-gpu": -1.0}})
    assert caught.value.field == "ft.rates.faulty-gpu" and "rate >= 0" in caught.value.message


def test_unknown_preset_suggests() -> None:
    with pytest.raises(UnknownNameError) as error:
        load_failure_model("llama", source="s.toml")
    assert "llama3" in error.value.render()


def cluster(num_gpus: int = 1024) -> Cluster:
    system = catalog.system("dgx-h100")
    return Cluster(system, catalog.accelerator("h100-sxm"), num_gpus, catalog.storage("lustre-generic"))


def test_bytes_per_param_is_12_to_14_not_4() -> None:
    assert ckio.bytes_per_param("fsdp", "bf16") == 12
    assert ckio.bytes_per_param("megatron", "bf16") == 14
    assert ckio.bytes_per_param("deepspeed", "bf16") == 14
    assert ckio.bytes_per_param("megatron", "fp32") == 12


def test_checkpoint_times_follow_the_storage_limits() -> None:
    params = 70e9
    io = ckio.checkpoint_io(
        params=params,
        convention="megatron",
        precision="bf16",
        cluster=cluster(),
        storage=catalog.storage("lustre-generic"),
    )
    assert io.checkpoint_bytes == pytest.approx(980e9)
    # 128 nodes x 5 GB/s exceeds the 100 GB/s aggregate: the tier limits the write
    assert io.write_bytes_per_s == pytest.approx(100e9)
    assert io.save("sync").write_s == pytest.approx(9.8 + 8 * 1e-3)
    assert io.save("single").write_s == pytest.approx(980e9 / 5e9 + 1e-3)  # one client
    # async blocks for the per-rank shard over PCIe Gen5 (64 GB/s), persists at the sharded rate
    assert io.save("async").blocking_s == pytest.approx(980e9 / 1024 / 64e9)
    assert io.save("async").persist_s == io.save("sync").write_s
    few = ckio.checkpoint_io(
        params=params,
        convention="megatron",
        precision="bf16",
        cluster=cluster(64),
        storage=catalog.storage("lustre-generic"),
    )
    assert few.write_bytes_per_s == pytest.approx(8 * 5e9)  # 8 nodes x 5 GB/s per client


def test_young_and_daly() -> None:
    assert young_interval_s(300.0, 86400.0) == pytest.approx(math.sqrt(2 * 300 * 86400))
    assert daly_interval_s(300.0, 86400.0) < young_interval_s(300.0, 86400.0)
    assert daly_interval_s(7200.0, 3000.0) == 3000.0  # delta >= 2M: tau = M
    # never below one step nor the background persist
    assert recommended_interval_s(0.005, 60.0, 3 * 3600.0, 6.5) == 60.0
    assert recommended_interval_s(0.0, 0.0, 3600.0, 6.5) == 6.5


def test_effective_save_waits_for_the_previous_persist() -> None:
    assert effective_save(600.0, 0.1, 60.0) == (0.1, 60.0)
    assert effective_save(30.0, 0.1, 60.0) == (pytest.approx(30.1), 30.0)


def run_model(failures, **kwargs: float) -> RunModel:  # type: ignore[no-untyped-def]
    settings = {
        "interval_s": 1800.0,
        "blocking_s": 60.0,
        "persist_s": 0.0,
        "save_s": 60.0,
        "work_s": 30 * 86400.0,
    }
    settings.update(kwargs)
    restart = RestartParts(0.0, 0.0, settings.pop("restart_s", 600.0), 0.0, 0.0, 0, None)
    return RunModel(failures=failures, restart=restart, **settings)


def test_expected_run_is_daly_exact_model() -> None:
    """No detection, persist or maintenance: ETTR = tau / (M e^{R/M} (e^{(tau+delta)/M} - 1)) (Daly 2006, eq. 19)."""
    failures = llama3(overrides={"planned-maintenance": 0.0})
    run = run_model(failures)
    m = failures.mtbf_s
    daly = 1800.0 / (m * math.exp(600.0 / m) * math.expm1(1860.0 / m))
    result = expected_run(run)
    assert result.ettr == pytest.approx(daly, rel=1e-12)
    assert sum(result.lost_fractions.values()) + result.ettr == pytest.approx(1.0)


def test_restart_parts_default_from_sourced_data() -> None:
    notes: list[str] = []
    parts = restart_parts(FtSection(), load_s=30.0, assumptions=notes)
    assert (parts.detection_s, parts.init_s, parts.replacement_s, parts.load_s) == (100.0, 300.0, 300.0, 30.0)
    assert any("torchtitan" in note for note in notes)
    total = restart_parts(FtSection(restart="5min"), load_s=30.0, assumptions=[])
    assert total.typical_restart_s(total.replacement_s) == 300.0


def test_erlang_b_and_spares() -> None:
    assert erlang_b(0, 2.0) == 1.0
    assert erlang_b(1, 1.0) == pytest.approx(0.5)
    assert erlang_b(2, 1.0) == pytest.approx(0.2)
    assert erlang_b(34, 24.0) == pytest.approx(0.011040189, rel=1e-6)  # direct sum a^c/c! / sum a^k/k!
    parts = RestartParts(0, 300, 300, 0, 0, 4, 86400.0)
    assert no_spare_probability(parts, 1 / 3600, 1e6) == pytest.approx(erlang_b(4, 24.0))
    assert spares_for(parts, 1 / 3600, 0.01) == 35  # B(34, 24) = 1.10 % > 1 % >= B(35, 24) = 0.75 %
    never = RestartParts(0, 300, 300, 0, 0, 10, None)
    assert no_spare_probability(never, 1e-3, 1e5) == pytest.approx(0.9)  # 100 replacements, 10 spares
    assert spares_for(never, 1e-3, 0.01) is None


def test_the_recommended_interval_in_whole_steps_never_falls_below_the_persist() -> None:
    from mfukit.ft.setup import _whole_steps

    # 56.8 s of background persist at 6.83 s a step: 8.3 steps; rounding to 8 (54.6 s) would stall every
    # save on the one before, so the interval is 9 steps
    assert _whole_steps(56.8, 6.83, floor_s=56.8) == pytest.approx(9 * 6.83)
    assert _whole_steps(100.0, 6.83, floor_s=56.8) == pytest.approx(15 * 6.83)  # nearest above the floor
    assert _whole_steps(3.0, 6.83) == pytest.approx(6.83)  # at least one step
