"""From scenario and flags to a checked TrainConfig: the harness's limits and defaults, with errors that name the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from mfukit.errors import InputError
from mfukit.ft.failures import job_failures, load_failure_model
from mfukit.train.prepare import TrainRequest, parse_nnodes, prepare, synthetic_token_count

MICRO = Path(__file__).parents[1] / "data" / "train" / "micro.toml"


def test_micro_scenario_resolves() -> None:
    prepared = prepare(TrainRequest(scenario_path=MICRO, out=Path("/tmp/x")), cuda=False)
    config = prepared.config
    assert (config.steps, config.global_batch_size, config.micro_batch_size) == (12, 4, 2)
    assert prepared.world_size == 2 and config.parallel == "ddp"
    assert config.checkpoint.interval_steps == 4 and config.checkpoint.mode == "sync"
    assert config.device == "cpu" and prepared.peak_dtype == "fp32"
    assert any("12 steps = training.tokens" in a for a in prepared.assumptions)
    assert synthetic_token_count(config) == 12 * 4 * 16 + 1


def test_fsdp_flag_and_world_size_override() -> None:
    overrides = {"parallelism.fsdp": "full", "training.global_batch_size": 8}
    request = TrainRequest(scenario_path=MICRO, overrides=overrides, nproc_per_node=4)
    prepared = prepare(request, cuda=False)
    assert prepared.config.parallel == "fsdp" and prepared.world_size == 4
    assert any("world size 4 from --nproc-per-node" in a for a in prepared.assumptions)


def test_daly_default_when_no_interval(tmp_path: Path) -> None:
    scenario = tmp_path / "s.toml"
    scenario.write_text(MICRO.read_text().replace('checkpoint_interval = "4steps"\n', ""))
    prepared = prepare(TrainRequest(scenario_path=scenario), cuda=False)
    policy = prepared.config.checkpoint
    assert policy.interval_steps is None and policy.interval_s is None
    # ft's default failure model (llama3) for the job: 2 ranks (as GPUs) on 1 node
    llama3 = job_failures(load_failure_model("llama3", source="test"), num_gpus=2, num_nodes=1)
    assert policy.daly_mtbf_s == pytest.approx(llama3.mtbf_s) == pytest.approx(prepared.failures.mtbf_s)
    assert any("Daly's optimum" in a for a in prepared.assumptions)
    assert any(a.startswith("failure model llama3") for a in prepared.assumptions)


def test_daly_default_follows_the_cluster_failure_rate(tmp_path: Path) -> None:
    """[cluster] failure_rate_per_1000_node_days replaces the preset: Kokolis et al.'s RSC-1 rate of 6.5 per
    1,000 node-days on one node is an MTBF of 1000 / 6.5 days (plus llama3's planned maintenance, which
    stops the job gracefully and is not a failure)."""
    scenario = tmp_path / "s.toml"
    scenario.write_text(MICRO.read_text().replace('checkpoint_interval = "4steps"\n', ""))
    request = TrainRequest(scenario_path=scenario, overrides={"cluster.failure_rate_per_1000_node_days": 6.5})
    prepared = prepare(request, cuda=False)
    assert prepared.config.checkpoint.daly_mtbf_s == pytest.approx(1000 / 6.5 * 86400)
    assert any("6.5 per 1,000 node-days" in a for a in prepared.assumptions)
    zero = {"ft.failure_model": "meta-rsc1", "ft.rates": {"infrastructure": 0.0}}
    with pytest.raises(InputError, match="every failure rate is zero") as caught:
        prepare(TrainRequest(scenario_path=scenario, overrides=zero), cuda=False)
    assert caught.value.field == "ft.checkpoint_interval"


def test_config_hash_ignores_placement_but_not_numerics() -> None:
    base = prepare(TrainRequest(scenario_path=MICRO, out=Path("/a")), cuda=False).config
    elsewhere = prepare(
        TrainRequest(scenario_path=MICRO, out=Path("/b"), nproc_per_node=1), cuda=False
    ).config
    other_lr = prepare(TrainRequest(scenario_path=MICRO, lr=2e-3), cuda=False).config
    assert base.config_hash() == elsewhere.config_hash()
    assert base.config_hash() != other_lr.config_hash()


@pytest.mark.parametrize(
    ("request_", "field", "text"),
    [
        (
            TrainRequest(scenario_path=MICRO, overrides={"parallelism.tp": 2}),
            "parallelism.tp",
            "data-parallel",
        ),
        (TrainRequest(scenario_path=MICRO, nproc_per_node=3), "training.global_batch_size", "over 3 ranks"),
        (TrainRequest(scenario_path=MICRO, nnodes="1:3"), "training.global_batch_size", "over 4 ranks"),
        (TrainRequest(scenario_path=MICRO, overrides={"model.mlp": "gelu"}), "model.mlp", "swiglu"),
        (TrainRequest(scenario_path=MICRO, inject=("kill@step=99",)), "--inject", "12 steps"),
        (TrainRequest(scenario_path=MICRO, hang_timeout="soon"), "--hang-timeout", ""),
    ],
)
def test_bad_requests_name_the_field(request_: TrainRequest, field: str, text: str) -> None:
    with pytest.raises(InputError) as caught:
        prepare(request_, cuda=False)
    assert caught.value.field == field
    assert text in caught.value.render()


def test_steps_need_tokens_or_a_flag(tmp_path: Path) -> None:
    scenario = tmp_path / "s.toml"
    scenario.write_text(MICRO.read_text().replace('tokens = "768"', ""))
    with pytest.raises(InputError, match=r"needs training\.tokens or --steps"):
        prepare(TrainRequest(scenario_path=scenario), cuda=False)
    assert prepare(TrainRequest(scenario_path=scenario, steps=3), cuda=False).config.steps == 3


def test_nnodes() -> None:
    assert parse_nnodes("2") == (2, 2)
    assert parse_nnodes("1:4") == (1, 4)
    for bad in ("0", "3:2", "x"):
        with pytest.raises(InputError):
            parse_nnodes(bad)
