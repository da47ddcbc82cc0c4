"""The goodput a sizing or planning command should divide by: the expected ETTR of the run on a given
number of GPUs under the scenario's failure model, or the flat allowance ``[ft] goodput`` when given."""

from __future__ import annotations

from dataclasses import dataclass

from mfukit.catalog.resolved import ResolvedScenario
from mfukit.ft.interval import expected_run
from mfukit.ft.setup import ft_inputs


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
