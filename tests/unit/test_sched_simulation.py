"""``sched simulate``'s settings: the backfill flags as one typed BackfillSettings, and the policy it builds."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from mfukit.cli.sched_options import backfill_options, weight_options
from mfukit.errors import UnknownNameError
from mfukit.sched.policies import BackfillSettings, PriorityWeights, make_policy
from mfukit.sched.policies.easy import EasyBackfill
from mfukit.sched.policies.slurm import BF_MAX_JOB_TEST, BF_WINDOW_S, PeriodicController, SlurmPolicy


def test_the_slurm_policy_runs_on_the_settings_it_is_given() -> None:
    policy = make_policy("slurm", PriorityWeights(age=5), BackfillSettings(bf_interval_s=45, bf_window_s=600))
    assert isinstance(policy, SlurmPolicy)
    assert isinstance(policy.controller, PeriodicController)
    assert (policy.controller.bf_interval_s, policy.bf_window_s) == (45, 600)
    assert policy.bf_max_job_test == BF_MAX_JOB_TEST
    assert policy.weights.age == 5


def test_other_policies_take_weights_only_when_one_is_set() -> None:
    assert make_policy("easy", PriorityWeights(), BackfillSettings()).weights == PriorityWeights()
    weighted = make_policy("easy", PriorityWeights(qos=3), BackfillSettings())
    assert isinstance(weighted, EasyBackfill)
    assert weighted.weights.qos == 3


def test_an_unknown_policy_names_the_flag() -> None:
    with pytest.raises(UnknownNameError) as caught:
        make_policy("lottery", PriorityWeights(), BackfillSettings())
    assert caught.value.field == "--policy"


def _settings(*args: str) -> tuple[BackfillSettings, PriorityWeights]:
    seen: list[tuple[BackfillSettings, PriorityWeights]] = []

    @click.command()
    @backfill_options
    @weight_options
    def command(backfill: BackfillSettings, weights: PriorityWeights) -> None:
        seen.append((backfill, weights))

    result = CliRunner().invoke(command, list(args))
    assert result.exit_code == 0, result.output
    return seen[0]


def test_the_flags_arrive_as_one_typed_value_each() -> None:
    backfill, weights = _settings("--bf-interval", "45s", "--bf-window", "2h", "--weight-age", "7")
    assert backfill == BackfillSettings(bf_interval_s=45, bf_window_s=7200)
    assert weights == PriorityWeights(age=7)


def test_a_zero_duration_keeps_slurms_default() -> None:
    backfill, _ = _settings("--bf-window", "0s")
    assert backfill.bf_window_s == BF_WINDOW_S
