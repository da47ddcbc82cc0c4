"""The goodput a sizing or planning command should divide by: the expected ETTR of the run on a given
number of GPUs under the scenario's failure model, or the flat allowance ``[ft] goodput`` when given."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mfukit.core.scenario import Scenario
from mfukit.core.schema import si
from mfukit.ft.interval import expected_run
from mfukit.ft.setup import ft_inputs


@dataclass(frozen=True)
class Goodput:
    ettr: float
    interval_s: float | None
    """the checkpoint interval it assumes (None for a flat allowance)"""
    how: str
    assumptions: tuple[str, ...] = ()


def expected_goodput(
    scenario: Scenario,
    *,
    num_gpus: int,
    source: str,
    step_time_s: float | None = None,
    base_dir: Path | None = None,
) -> Goodput:
    """Expected ETTR of the scenario's run on ``num_gpus`` GPUs (with the performance model's step time
    when given), at the scenario's checkpoint interval or the recommended one."""
    if scenario.ft.goodput is not None:
        return Goodput(scenario.ft.goodput, None, f"flat goodput allowance {scenario.ft.goodput:g} as given")
    ft = (
        scenario.ft
        if step_time_s is None
        else scenario.ft.model_copy(update={"step_time_s": si(step_time_s)})
    )
    cluster = scenario.cluster.model_copy(update={"num_gpus": num_gpus, "num_nodes": None})
    sized = scenario.model_copy(update={"cluster": cluster, "ft": ft})
    inputs = ft_inputs(sized, source=source, base_dir=base_dir)
    ettr = expected_run(inputs.run).ettr
    how = (
        f"expected ETTR {ettr:.3f} on {num_gpus:,} GPUs ({inputs.failures.model} failure rates, "
        f"{inputs.mode} saves every {inputs.run.interval_s:.0f} s; `mfukit ft plan` for the breakdown)"
    )
    return Goodput(ettr, inputs.run.interval_s, how, tuple(inputs.assumptions))
