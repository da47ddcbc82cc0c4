"""One resolver: the facts a scenario implies (GPU count, tokens per step, intervals and rates in SI units)
are derived in one place, and a search over GPU counts passes counts, not copies of the scenario."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mfukit.catalog.resolved import load_resolved
from mfukit.core.scenario import TrainingSection, by_section, load_scenario
from mfukit.errors import InputError
from mfukit.ft.goodput import expected_goodput
from mfukit.ft.setup import ft_inputs

SRC = Path(__file__).parents[2] / "src" / "mfukit"
EXAMPLE = Path(__file__).parents[2] / "examples" / "llama3-405b_h100x16384.toml"
MODEL = {"model.preset": "llama-7b"}


def _modules_matching(pattern: str) -> list[str]:
    found = re.compile(pattern)
    return sorted(
        path.relative_to(SRC).as_posix()
        for path in SRC.rglob("*.py")
        if found.search(path.read_text(encoding="utf-8"))
    )


def test_the_gpu_count_is_derived_in_one_place() -> None:
    assert _modules_matching(r"\.num_nodes \* system\.gpus_per_node") == ["catalog/resolve.py"]


def test_no_scenario_is_copied_to_change_its_gpu_count() -> None:
    assert _modules_matching(r"scenario\.cluster\.model_copy\(") == []


def test_intervals_and_rates_are_parsed_once_at_load() -> None:
    assert _modules_matching(r"\bparse_interval\(") == ["core/scenario.py"]
    assert _modules_matching(r"\bparse_bandwidth_bytes_per_s\(") == ["units.py"]
    scenario = load_scenario(
        None, {**MODEL, "ft.checkpoint_interval": "500steps", "cluster.nic_rate": "400Gbps"}
    )
    assert scenario.ft.checkpoint_interval is not None
    assert scenario.ft.checkpoint_interval.steps == 500 and scenario.ft.checkpoint_interval.seconds is None
    assert scenario.cluster.nic_bytes_per_s == pytest.approx(50e9)
    timed = load_scenario(None, {**MODEL, "ft.checkpoint_interval": "30min"})
    interval = timed.ft.checkpoint_interval
    assert interval is not None and interval.seconds == 1800 and interval.text == "30min"
    assert timed.model_dump(by_alias=True)["ft"]["checkpoint_interval"] == "30min"  # as the user wrote it


@pytest.mark.parametrize("bad", ["0steps", "soon", "5"])
def test_a_bad_interval_is_an_error_naming_the_field(bad: str) -> None:
    with pytest.raises(InputError) as caught:
        load_scenario(None, {**MODEL, "ft.checkpoint_interval": bad})
    assert caught.value.field == "ft.checkpoint_interval"


def test_tokens_per_step_are_whole_sequences() -> None:
    training = TrainingSection.model_validate({"seq_len": 2048, "global_batch_tokens": "4M"})
    assert training.global_batch_sequences == 1953 and training.tokens_per_step == 1953 * 2048
    assert TrainingSection().tokens_per_step is None


def test_overrides_map_to_sections_in_one_function() -> None:
    # no module splits a dotted override itself (the copies in sched's and diagnose's flag handling are gone)
    assert _modules_matching(r'startswith\((?:name|prefix) \+ "\."\)') == []
    assert by_section({"cluster.num_gpus": 8, "ft.mfu": 0.4, "cluster.gpu": "h100-sxm"}) == {
        "cluster": {"num_gpus": 8, "gpu": "h100-sxm"},
        "ft": {"mfu": 0.4},
    }


def test_the_count_is_checked_once_for_every_capability() -> None:
    with pytest.raises(InputError) as caught:
        load_resolved(EXAMPLE, {"cluster.num_nodes": 4})
    assert caught.value.field == "cluster.num_nodes" and "num_gpus = 16384" in caught.value.message
    scene = load_resolved(EXAMPLE, {"cluster.num_nodes": 2048})  # 2,048 x 8 agrees
    assert scene.num_gpus == 16384 and scene.cluster().num_nodes == 2048


def test_a_search_passes_candidate_counts_to_the_one_resolved_scenario() -> None:
    scene = load_resolved(EXAMPLE, {"ft.checkpoint_interval": "10min"})
    assert scene.cluster(4096).num_gpus == 4096 and scene.num_gpus == 16384
    sized = ft_inputs(scene, num_gpus=4096, step_time_s=3.0)
    assert sized.cluster.num_gpus == 4096 and sized.step_time_s == 3.0
    assert ft_inputs(scene).cluster.num_gpus == 16384  # the scenario itself is untouched
    assert expected_goodput(scene, num_gpus=4096).ettr > expected_goodput(scene, num_gpus=32768).ettr


def test_the_model_and_node_are_resolved_only_by_the_catalog() -> None:
    # train and diagnose take them from the one resolver, as estimate, plan, size, mfu and ft do
    outside = r"\bresolve\.(?:model_spec|node|gpu_count|storage)\(|\bcatalog\.(?:accelerator|system)\("
    assert [m for m in _modules_matching(outside) if m.startswith(("train/", "diagnose/given"))] == []
    assert _modules_matching(r"\bresolve\.(?:model_spec|node|gpu_count)\(") == ["catalog/resolved.py"]


def test_a_command_that_runs_without_a_node_resolves_the_rest() -> None:
    scene = load_resolved(None, MODEL, node_optional=True)
    assert scene.node is None and scene.num_gpus is None and scene.model.name == "llama-7b"
    with pytest.raises(InputError) as caught:
        scene.cluster()
    assert caught.value.field == "cluster" and "system or a gpu" in caught.value.message
    with pytest.raises(InputError):  # the commands that need a node still refuse one without
        load_resolved(None, MODEL)
    sized = load_resolved(
        None, {**MODEL, "cluster.gpu": "h100-sxm", "cluster.num_nodes": 2}, node_optional=True
    )
    assert sized.accelerator.name == "h100-sxm" and sized.num_gpus == 16


def test_diagnose_completes_a_node_given_without_a_size() -> None:
    from mfukit.diagnose.given import job

    known = job(None, {"cluster.system": "dgx-h100"})
    assert known.cluster is None and known.node is not None and known.node.cluster(64).num_nodes == 8
    sized = job(None, {"cluster.system": "dgx-h100", "cluster.num_nodes": 2})
    assert sized.cluster is not None and sized.cluster.num_gpus == 16


def test_failure_rates_are_si_from_load() -> None:
    flags = {
        **MODEL,
        "cluster.gpu": "h100-sxm",
        "cluster.num_gpus": 64,
        "cluster.failure_rate_per_1000_node_days": "6.5",  # as a flag gives it
        "ft.failure_model": "meta-rsc1",
        "ft.rates": {"infrastructure": 2.0},
        "ft.straggler_rate_per_1000_node_days": 10.0,
    }
    scene = load_resolved(None, flags)
    per_1000_days_s = 1000 * 86400.0
    assert scene.cluster().node_failure_rate_per_s == pytest.approx(6.5 / per_1000_days_s)
    assert scene.ft.rate_per_unit_s == {"infrastructure": pytest.approx(2.0 / per_1000_days_s)}
    assert scene.ft.straggler_rate_per_node_s == pytest.approx(10.0 / per_1000_days_s)
    # converted once: the written unit appears in units.py alone (the scheduler simulator's own ClusterSpec
    # still takes its rate as written, per 1,000 node-days)
    written = r"1000\.0 \* SECONDS_PER_DAY|/ 1000\.0 / (?:units\.)?SECONDS_PER_DAY|SECONDS_PER_1000_DAYS"
    assert _modules_matching(written) == ["sched/engine.py", "units.py"]
