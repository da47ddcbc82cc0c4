"""cluster.hbm_headroom: parsed as a share or a size, estimate warns inside it, plan rejects as "headroom"."""

from __future__ import annotations

import numpy as np
import pytest

from mfukit import catalog
from mfukit.core.scenario import load_scenario, parse_headroom
from mfukit.errors import InputError
from mfukit.perf.layouts import Workload
from mfukit.perf.memory import default_overheads, headroom_bytes
from mfukit.perf.planner import search

GIB = 2.0**30
HBM = 80 * GIB


@pytest.mark.parametrize(
    ("text", "expected"),
    [("5%", ("share", 0.05)), ("4GiB", ("bytes", 4 * GIB)), (" 2.5 GB ", ("bytes", 2.5e9))],
)
def test_headroom_is_a_share_or_a_size(text: str, expected: tuple[str, float]) -> None:
    kind, value = parse_headroom(text)
    assert kind == expected[0] and value == pytest.approx(expected[1])


@pytest.mark.parametrize("bad", ["100%", "4", "lots", "-1GiB"])
def test_bad_headroom_names_the_field(bad: str) -> None:
    with pytest.raises(InputError) as caught:
        load_scenario(None, {"model.preset": "llama2-7b", "cluster.hbm_headroom": bad})
    assert caught.value.exit_code == 2 and caught.value.field == "cluster.hbm_headroom"


def test_the_default_is_five_percent_and_sourced() -> None:
    allowance = default_overheads().hbm_headroom
    assert allowance.value == pytest.approx(0.05) and allowance.url.startswith("https://")
    assert headroom_bytes(None, HBM) == pytest.approx(4 * GIB)
    assert headroom_bytes("4GiB", HBM) == pytest.approx(headroom_bytes("5%", HBM))


def test_plan_rejects_layouts_inside_the_headroom_and_counts_them() -> None:
    workload = Workload(model=catalog.model("llama2-70b"), seq_len=4096, global_batch_sequences=1024)
    system, accelerator = catalog.system("dgx-h100"), catalog.accelerator("h100-sxm")
    free = search(workload, system, accelerator, [256], top_k=50)
    kept = search(workload, system, accelerator, [256], top_k=50, headroom_bytes=8 * GIB)
    # without headroom, "headroom" counts the layouts that run only once the allocator gives its cache back
    assert kept.rejected["headroom"] > free.rejected["headroom"]
    assert kept.rejected["memory"] == free.rejected["memory"]  # the same layouts overflow HBM
    assert all(plan.memory_bytes <= accelerator.hbm_bytes for plan in free.plans)
    assert all(plan.memory_bytes <= accelerator.hbm_bytes - 8 * GIB for plan in kept.plans)
    squeezed = [plan for plan in free.plans if plan.memory_bytes > accelerator.hbm_bytes - 8 * GIB]
    assert np.isfinite(kept.plans[0].mfu) and len(squeezed) <= kept.rejected["headroom"]
