"""Published layouts against the planner (tests/golden/plan.toml): they fit by the memory model, rank in the
top few percent by the step-time model, and the planner's choice is at least as fast by the model."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mfukit import catalog
from mfukit.catalog import resolve
from mfukit.perf.layouts import RECOMPUTES, Workload
from mfukit.perf.planner import SearchSpace, enumerate_layouts, evaluate_grid, search
from mfukit.perf.step_time import machine_for

CASES: list[dict[str, Any]] = tomllib.loads((Path(__file__).parent / "plan.toml").read_text())["case"]


def _setup(case: dict[str, Any]) -> tuple[Workload, Any, Any, SearchSpace]:
    model = resolve.model_spec(case["model"], source="plan.toml")
    workload = Workload(
        model=model,
        seq_len=case["seq_len"],
        global_batch_sequences=case["global_batch_size"],
        precision=case["precision"],
        flash_attention=case["flash_attention"],
        framework=case["framework"],
    )
    system = catalog.system(case["system"])
    if "nics_per_node" in case:
        system = system.model_copy(update={"nics_per_node": case["nics_per_node"]})
    space = SearchSpace(**{key: tuple(value) for key, value in case["space"].items()})
    return workload, system, catalog.accelerator(system.accelerator), space


@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_published_layout_ranks_near_the_top(case: dict[str, Any]) -> None:
    workload, system, accelerator, space = _setup(case)
    gpus = case["gpus"]
    grid, _, _ = enumerate_layouts(workload, system, gpus, space)
    estimate, memory, _ = evaluate_grid(workload, grid, machine_for(system, accelerator, gpus))
    published = case["published"]
    match = (grid.tp == published["tp"]) & (grid.pp == published["pp"]) & (grid.dp == published["dp"])
    match &= grid.mbs == published["micro_batch_size"]
    if "recompute" in published:
        match &= grid.recompute == RECOMPUTES.index(published["recompute"])
    (found,) = np.flatnonzero(match)
    fits = memory <= accelerator.hbm_bytes
    assert fits[found], f"the memory model rejects the published layout: {memory[found] / 2**30:.1f} GiB"
    speed = np.where(fits, estimate.tokens_per_s, -np.inf)
    faster = int((speed > speed[found]).sum())
    share = faster / int(fits.sum())
    behind = 1 - speed[found] / speed.max()
    print(
        f"{case['name']}: {faster} of {int(fits.sum())} fitting layouts faster, {behind:.1%} behind the best"
    )
    # top few percent, or a tie with the best within the model's own error on such runs
    assert share <= case["top_share"] or behind <= case["near_best"], case["why"]
    best = search(workload, system, accelerator, [gpus], space=space, top_k=1).plans[0]
    assert best.tokens_per_s >= float(estimate.tokens_per_s[found]) * (1 - 1e-9)
