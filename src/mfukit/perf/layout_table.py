"""Every layout the planner evaluates on one GPU count, one row each (``mfukit plan --all``), for the
user's own analysis: the degrees, the micro-batch, recompute, sharding and sequence parallelism, the
predicted step time, MFU, throughput, peak memory and whether it fits, and the step-time breakdown.

It reads the planner's own grid (:func:`~mfukit.perf.planner.planned_layouts`) and estimates
(:func:`~mfukit.perf.planner.evaluate_grid`), so the rows are exactly what ``plan`` ranked; layouts the
planner prunes before estimating (divisibility, batch, schedule, compatibility) have no estimate and no row.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Iterator

import numpy as np

from mfukit.core.hardware import Accelerator, System
from mfukit.perf.layouts import RECOMPUTES, SHARDINGS, Workload
from mfukit.perf.planner import SearchSpace, evaluate_grid, planned_layouts, stack_space
from mfukit.perf.step_time import machine_for

Row = dict[str, int | float | str | bool]


def every_layout(
    workload: Workload, system: System, accelerator: Accelerator, num_gpus: int, space: SearchSpace
) -> Iterator[Row]:
    """The rows of every evaluated layout on ``num_gpus`` GPUs, best MFU first (layouts that fit first)."""
    grid, _, _ = planned_layouts(
        workload, system, accelerator, num_gpus, stack_space(space, workload, accelerator)
    )
    if not len(grid):
        return
    estimate, memory, _ = evaluate_grid(workload, grid, machine_for(system, accelerator, num_gpus))
    fits = memory <= accelerator.hbm_bytes
    order = np.lexsort((-estimate.mfu, ~fits))
    for i in (int(i) for i in order):
        row: Row = {
            "num_gpus": num_gpus,
            "tp": int(grid.tp[i]),
            "pp": int(grid.pp[i]),
            "vpp": int(grid.vpp[i]),
            "dp": int(grid.dp[i]),
            "cp": int(grid.cp[i]),
            "ep": int(grid.ep[i]),
            "first_stage_layers": int(grid.first_layers[i]),
            "last_stage_layers": int(grid.last_layers[i]),
            "micro_batch_size": int(grid.mbs[i]),
            "num_microbatches": int(grid.num_microbatches[i]),
            "global_batch_sequences": int(grid.dp[i] * grid.mbs[i] * grid.num_microbatches[i]),
            "sequence_parallel": bool(grid.sp[i]),
            "recompute": RECOMPUTES[int(grid.recompute[i])],
            "recompute_layers": int(grid.recompute_layers[i]),  # of each chunk, under full; 0: every layer
            "sharding": SHARDINGS[int(grid.sharding[i])],
            "step_time_s": float(estimate.step_time_s[i]),
            "mfu": float(estimate.mfu[i]),
            "hfu": float(estimate.hfu[i]),
            "tokens_per_s": float(estimate.tokens_per_s[i]),
            "memory_bytes": float(memory[i]),
            "fits": bool(fits[i]),
        }
        row |= {f"breakdown_{name}_s": value for name, value in estimate.row(i).items()}
        yield row


def _csv(rows: list[Row]) -> str:
    if not rows:
        return ""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def _json_lines(rows: list[Row]) -> str:
    return "".join(json.dumps(row) + "\n" for row in rows)


FILE_FORMATS: dict[str, Callable[[list[Row]], str]] = {".csv": _csv, ".jsonl": _json_lines}
"""file suffix -> the text of the rows in that format (CSV, JSON lines)"""
