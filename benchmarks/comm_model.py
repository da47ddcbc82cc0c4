"""How fast the collective model answers the planner: vectorised calls against per-size scalar calls and
against a bare numpy alpha-beta formula over the same grid (the floor any model of this shape can reach).

Writes benchmarks/results/comm_model.json.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from mfukit import catalog
from mfukit.comm.model import collective_time_s, predict
from mfukit.comm.topology import from_system

RESULTS = Path(__file__).parent / "results"


def best_of(function: Callable[[], object], repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    system = catalog.system("dgx-h100")
    topology = from_system(system, catalog.accelerator(system.accelerator), num_nodes=2048)[0]
    sizes = np.asarray([8.0 * 2**k for k in range(31)])
    groups = np.asarray([8 * n for n in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)])
    grid_sizes, grid_groups = np.meshgrid(sizes, groups)

    vectorised_s = best_of(lambda: predict("all_reduce", sizes, topology, 1024))
    scalar_s = best_of(lambda: [predict("all_reduce", float(s), topology, 1024) for s in sizes])
    grid_s = best_of(lambda: collective_time_s("all_reduce", grid_sizes, topology, grid_groups))
    bandwidth = topology.intra_bytes_per_s
    floor_s = best_of(lambda: 15e-6 + grid_sizes * 2 * (grid_groups - 1) / grid_groups / bandwidth)

    rows = {
        "sizes_per_call": len(sizes),
        "vectorised_call_s": vectorised_s,
        "scalar_calls_s": scalar_s,
        "vectorised_speedup_vs_scalar": scalar_s / vectorised_s,
        "grid_points": int(grid_sizes.size),
        "grid_call_s": grid_s,
        "grid_us_per_point": grid_s / grid_sizes.size * 1e6,
        "grid_vs_bare_alpha_beta_ratio": grid_s / floor_s,
    }
    print(f"{'measure':<34} {'value':>14}")
    for key, value in rows.items():
        print(f"{key:<34} {value:>14.4g}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "comm_model.json").write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
