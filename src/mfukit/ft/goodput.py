"""The goodput a sizing or planning command should divide by: the expected ETTR of the run on a given
number of GPUs under the scenario's failure model, or the flat allowance ``[ft] goodput`` when given."""

from __future__ import annotations

from dataclasses import dataclass

from mfukit.catalog.resolved import ResolvedScenario
from mfukit.ft.interval import expected_run
from mfukit.ft.setup import ft_inputs
from mfukit.perf.sizing_inputs import DEFAULT_GOODPUT
from mfukit.perf.sizing_model import GoodputOf


@dataclass(frozen=True)
class Goodput:
    ettr: float
    interval_s: float | None
    """the checkpoint interval it assumes (None for a flat allowance)"""
    how: str
    assumptions: tuple[str, ...] = ()


def expected_goodput(scene: ResolvedScenario, *, num_gpus: int, step_time_s: float | None = None) -> Goodput:
    """Expected ETTR of the scenario's run on ``num_gpus`` GPUs (with the performance model's step time
    when given), at the scenario's checkpoint interval or the recommended one."""
    flat = scene.ft.goodput
    if flat is not None:
        return Goodput(flat, None, f"flat goodput allowance {flat:g} as given")
    inputs = ft_inputs(scene, num_gpus=num_gpus, step_time_s=step_time_s)
    ettr = expected_run(inputs.run).ettr
    how = (
        f"expected ETTR {ettr:.3f} on {num_gpus:,} GPUs ({inputs.failures.model} failure rates, "
        f"{inputs.mode} saves every {inputs.run.interval_s:.0f} s; `mfukit ft plan` for the breakdown)"
    )
    return Goodput(ettr, inputs.run.interval_s, how, tuple(inputs.assumptions))


def goodput_of(scene: ResolvedScenario, *, given_as_flag: bool) -> GoodputOf:
    """Goodput at a GPU count: the expected ETTR when the scenario names a failure model (``[ft]
    failure_model``, ``--failure-rate``), else the flat allowance (``--goodput``, 0.9)."""
    ft, cluster, source = scene.ft, scene.cluster_section, scene.source
    failure_model = "failure_model" in ft.model_fields_set or cluster.node_failure_rate_per_s is not None
    if ft.goodput is not None or not failure_model:
        flat = ft.goodput if ft.goodput is not None else DEFAULT_GOODPUT
        origin = (
            "--goodput"
            if given_as_flag
            else f"ft.goodput in {source}"
            if ft.goodput is not None
            else "default"
        )
        how = (
            f"flat goodput allowance {flat:g} ({origin}; name a failure model with --failure-model "
            "for the expected ETTR)"
        )
        return lambda count, step_time_s: (flat, how)

    def expected(count: int, step_time_s: float) -> tuple[float, str]:
        found = expected_goodput(scene, num_gpus=count, step_time_s=step_time_s or None)
        return found.ettr, found.how

    return expected
