"""How fast the planner searches: the whole GPT-3 175B space on 1,024 A100s, on one core.

The space: tp in 1..8, every pp dividing the 96 layers (and Llama-3-style uneven splits where they apply),
vpp up to 8, micro-batches up to 16 dividing the batch, three recompute modes, seven sharding conventions,
sequence parallelism on and off (1,536 x 2,048-token batch, DGX A100 nodes). Target: under 10 s.

Peer measured in the same run: the same model evaluated one layout at a time (``estimate_layout``, the path
``mfukit estimate`` takes: the scalar memory model and a one-layout step-time grid) on a random sample of the
space's layouts, so the vectorised speed-up is a ratio of two numbers measured here. For scale, the issue
quotes Calculon at ~156 configurations per second per core (~21 CPU-hours for this space).

Run: ``python benchmarks/plan_search.py`` (pins numpy to one thread). Writes
``benchmarks/results/plan_search.json``.
"""

from __future__ import annotations

import os

for variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[variable] = "1"

import json  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from mfukit import catalog  # noqa: E402
from mfukit.perf.estimate import evaluate_layout  # noqa: E402
from mfukit.perf.layouts import Workload  # noqa: E402
from mfukit.perf.planner import SearchSpace, enumerate_layouts, search  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "plan_search.json"
TARGET_S = 10.0
CALCULON_CONFIGS_PER_S = 156.0
SAMPLE = 150


def main() -> None:
    model = catalog.model("gpt3-175b")
    workload = Workload(model=model, seq_len=2048, global_batch_sequences=1536)
    system = catalog.system("dgx-a100-80gb")
    accelerator = catalog.accelerator("a100-80gb-sxm")
    search(workload, system, accelerator, [64], top_k=1)  # import and cache warm-up
    started = time.perf_counter()
    result = search(workload, system, accelerator, [1024], top_k=5)
    whole_s = time.perf_counter() - started
    rate = result.configs_considered / whole_s
    grid, _, _ = enumerate_layouts(workload, system, 1024, SearchSpace())
    picked = np.random.default_rng(7).choice(len(grid), size=min(SAMPLE, len(grid)), replace=False)
    started = time.perf_counter()
    for index in picked:
        layout = grid.layout(int(index), model.num_hidden_layers)
        evaluate_layout(workload, system, accelerator, 1024, layout, micro_batch_size=int(grid.mbs[index]))
    scalar_rate = len(picked) / (time.perf_counter() - started)
    evaluated_rate = result.configs_evaluated / whole_s
    figures = {
        "space": "GPT-3 175B, 1,024 x A100-80GB (DGX A100), batch 1536 x 2048",
        "configs_considered": result.configs_considered,
        "configs_evaluated": result.configs_evaluated,
        "rejected": result.rejected,
        "search_s": whole_s,
        "target_s": TARGET_S,
        "share_of_target": whole_s / TARGET_S,
        "configs_per_s": rate,
        "evaluated_configs_per_s": evaluated_rate,
        "one_at_a_time_configs_per_s": scalar_rate,
        "speedup_vs_one_at_a_time": evaluated_rate / scalar_rate,
        "speedup_vs_calculon_published": rate / CALCULON_CONFIGS_PER_S,
        "best_layout": str(result.plans[0].layout.model_dump(exclude_defaults=True)),
        "best_mfu": result.plans[0].mfu,
    }
    print(f"space: {figures['space']}")
    print(
        f"  layouts considered {result.configs_considered:,}, evaluated {result.configs_evaluated:,} (rest pruned: {result.rejected})"
    )
    print(f"  whole search {whole_s:.2f} s = {whole_s / TARGET_S:.0%} of the {TARGET_S:.0f} s target")
    print(f"  {rate:,.0f} layouts/s considered, {evaluated_rate:,.0f} evaluated/s on one core")
    print(
        f"  one layout at a time (same model, measured now): {scalar_rate:,.1f}/s -> vectorised is {evaluated_rate / scalar_rate:,.0f}x"
    )
    print(
        f"  against Calculon's published ~{CALCULON_CONFIGS_PER_S:.0f}/s/core: {rate / CALCULON_CONFIGS_PER_S:,.0f}x"
    )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
