"""Fault-tolerance golden tests: published intervals, MTBFs, ETTR outcomes and checkpoint sizes.

Each row of ``tests/golden/ft_*.toml`` names its source, the table or figure, the tolerance and why.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mfukit import units
from mfukit.core.model import ModelSpec
from mfukit.ft.checkpoint_io import bytes_per_param
from mfukit.ft.failures import job_failures, load_failure_model
from mfukit.ft.interval import daly_interval_s, expected_run, kokolis_ettr
from mfukit.ft.restart import RestartParts
from mfukit.ft.run import RunModel
from mfukit.ft.simulate import simulate

HERE = Path(__file__).parent
CASES = [
    pytest.param(case, id=case["name"])
    for path in sorted(HERE.glob("ft_*.toml"))
    for case in tomllib.loads(path.read_text())["case"]
]
REQUIRED = {"name", "kind", "source", "table", "why"}


def _d(text: str) -> float:
    return units.parse_duration_s(text)


def _run(case: dict[str, Any], *, preset: str) -> RunModel:
    """A run of ``case['num_gpus']`` on 8-GPU nodes with the case's total restart and save costs."""
    nodes = case["num_gpus"] // 8
    node_rate = case.get("node_rate_per_1000_node_days")
    failures = job_failures(
        load_failure_model(preset, source="golden"),
        num_gpus=case["num_gpus"],
        num_nodes=nodes,
        node_rate_per_s=units.parse_failure_rate_per_s(node_rate) if node_rate is not None else None,
    )
    return RunModel(
        work_s=_d(case.get("work", "30d")),
        interval_s=_d(case["interval"]),
        blocking_s=_d(case["blocking"]),
        persist_s=_d(case.get("persist", "0s")),
        save_s=_d(case.get("persist", "0s")),
        failures=failures,
        restart=RestartParts(0.0, 0.0, _d(case["restart"]), 0.0, 0.0, 0, None),
    )


def test_every_row_is_documented() -> None:
    for param in CASES:
        case = param.values[0]
        assert isinstance(case, dict) and set(case) >= REQUIRED, case


@pytest.mark.parametrize("case", CASES)
def test_ft_golden(case: dict[str, Any]) -> None:
    kind = case["kind"]
    if kind == "daly_interval":
        got_min = daly_interval_s(_d(case["blocking"]), _d(case["mtbf"])) / 60.0
        assert got_min == pytest.approx(case["expected_min"], abs=case["tolerance_min"])
    elif kind == "mtbf":
        spec = load_failure_model(case["preset"], source="golden")
        failures = job_failures(
            spec, num_gpus=case["num_gpus"], num_nodes=case["num_gpus"] // case["gpus_per_node"]
        )
        assert failures.mtbf_s / 3600.0 == pytest.approx(case["expected_h"], abs=case["tolerance_h"])
    elif kind == "meta_first_order":
        nodes = case["num_gpus"] // 8
        rate_per_node_s = case["node_rate_per_1000_node_days"] / 1000.0 / units.SECONDS_PER_DAY
        got = kokolis_ettr(
            nodes, rate_per_node_s, _d(case["restart"]), _d(case["interval"]), _d(case["blocking"])
        )
        assert got == pytest.approx(case["expected"], abs=case["tolerance"])
    elif kind == "meta_simulated":
        run = _run(case, preset="meta-rsc1")
        sim = simulate(run, replicas=300, seed=7)
        assert float(sim.ettr.mean()) == pytest.approx(case["expected"], abs=case["tolerance"])
        assert expected_run(run).ettr == pytest.approx(case["expected"], abs=case["tolerance"])
    elif kind == "llama3_lower_bound":
        run = _run(case, preset="llama3")
        sim = simulate(run, replicas=300, seed=11)
        assert float(np.percentile(sim.ettr, 5)) > case["lower_bound"]
        # the same failures with hourly synchronous saves of a minute and 30-min restarts fall below it
        slow = _run(
            {**case, "interval": "60min", "blocking": "60s", "persist": "0s", "restart": "30min"},
            preset="llama3",
        )
        assert expected_run(slow).ettr < case["lower_bound"]
    elif kind == "checkpoint_size":
        model = ModelSpec(
            num_hidden_layers=case["num_hidden_layers"],
            hidden_size=case["hidden_size"],
            num_attention_heads=case["num_attention_heads"],
            intermediate_size=case["intermediate_size"],
            vocab_size=case["vocab_size"],
            mlp="gelu",
            norm="layernorm",
            position_embedding="alibi",
            attention_bias=True,
            mlp_bias=True,
            tie_word_embeddings=True,
        )
        got = model.total_params() * bytes_per_param(case["convention"], "bf16")
        assert got == pytest.approx(case["expected_bytes"], rel=case["tolerance_frac"])
    else:
        pytest.fail(f"unknown golden kind {kind}")
