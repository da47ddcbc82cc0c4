"""How close the memory model comes to measured peak GPU memory.

Peers: the GPU-memory column of the Ultra-Scale Playbook sweep (3,287 nanotron runs on H100, of which
1,758 ran; nanotron logs ``torch.cuda.max_memory_allocated`` and ``max_memory_reserved`` of rank 0, i.e. the
first pipeline stage) and the torchtitan rows of ``published_runs_calibration.csv`` (its memory monitor
reports ``max_memory_reserved``). Prints the median and p90 of |predicted - measured| / measured and
writes ``benchmarks/results/memory_accuracy.json``.

Row layout (from the sweep's notes and inferred_fields): seq 4096, global batch 256 sequences, grad_accum
micro-batches per step from the notes, sequence parallel (tp_mode REDUCE_SCATTER), no activation
recompute (nanotron's default), flash attention, tied embeddings below 10,000 FFN width (nanotron
``scripts/scaling_benchmarks.py``), ZeRO-0 = replicated states, ZeRO-1 = sharded fp32 master + Adam
(the Megatron distributed-optimizer accounting).

Run: ``python benchmarks/memory_accuracy.py``.
"""

from __future__ import annotations

import csv
import json
import math
import re
import statistics
from collections.abc import Iterator
from pathlib import Path

from mfukit.core.model import ModelSpec
from mfukit.core.parallelism import Parallelism
from mfukit.perf.calibration_data import calibration_dir, nanotron_stage_layers, ultrascale_model
from mfukit.perf.memory import MemoryEstimate, StepShape, estimate_memory

GIB = 2.0**30
RESULTS = Path(__file__).parent / "results" / "memory_accuracy.json"


def ultrascale_cases(path: Path) -> Iterator[tuple[dict[str, str], MemoryEstimate]]:
    with path.open() as handle:
        for row in csv.DictReader(handle):
            measured = float(row["peak_mem_gib_per_gpu"])
            if math.isnan(measured):
                continue  # the run did not complete (out of memory or failed)
            accumulation = int(re.search(r"grad_accum=(\d+)", row["notes"]).group(1))  # type: ignore[union-attr]
            layout = Parallelism(
                tp=int(row["tp"]),
                pp=int(row["pp"]),
                dp=int(row["dp"]),
                sequence_parallel=True,
                zero=1 if row["zero_stage_or_fsdp"] == "ZeRO-1" else 0,
            )
            model = ultrascale_model(row)
            shape = StepShape(
                seq_len=int(row["seq_len"]),
                micro_batch_size=int(row["micro_batch"]),
                num_microbatches=accumulation,
                kernels="eager",
                first_stage_layers=nanotron_stage_layers(model, layout.pp)[0],
            )
            yield row, estimate_memory(model, layout, shape)


def torchtitan_cases(path: Path) -> Iterator[tuple[dict[str, str], MemoryEstimate]]:
    with path.open() as handle:
        for row in csv.DictReader(handle):
            if row["source_group"] != "torchtitan" or not row["peak_mem_gib_per_gpu"]:
                continue
            dp = int(row["dp"])
            local = int(row["micro_batch"])
            layout = Parallelism(
                tp=int(row["tp"]),
                pp=int(row["pp"]),
                dp=dp,
                cp=int(row["cp"]),
                sequence_parallel=int(row["tp"]) > 1,
                recompute="full" if row["activation_recompute"] == "full" else "selective",
                fsdp="full",
                vpp=2 if row["vpp"] == "interleaved" else 1,
            )
            # torchtitan's "local batch" is per DP rank; with PP it runs as micro-batches of one sequence
            # (pipeline_parallel_microbatch_size = 1, its default).
            shape = StepShape(
                seq_len=int(row["seq_len"]),
                micro_batch_size=1 if layout.pp > 1 else local,
                num_microbatches=local if layout.pp > 1 else 1,
                kernels="eager",
            )
            model = ModelSpec(
                name=row["model_name"],
                num_hidden_layers=int(row["n_layers"]),
                hidden_size=int(row["hidden"]),
                num_attention_heads=int(row["n_heads"]),
                num_key_value_heads=int(row["n_kv_heads"]),
                intermediate_size=int(row["ffn_hidden"]),
                vocab_size=int(row["vocab"]),
                mlp="swiglu",
            )
            yield row, estimate_memory(model, layout, shape)


def errors(cases: list[tuple[dict[str, str], MemoryEstimate]], measure: str) -> list[float]:
    out = []
    for row, estimate in cases:
        measured = float(row["peak_mem_gib_per_gpu"]) * GIB
        stage = estimate.first
        predicted = stage.allocated_bytes if measure == "allocated" else stage.reserved_bytes
        out.append((predicted - measured) / measured)
    return out


def summary(values: list[float]) -> dict[str, float]:
    magnitudes = sorted(abs(v) for v in values)
    p90 = magnitudes[min(len(magnitudes) - 1, math.ceil(0.9 * len(magnitudes)) - 1)]
    return {
        "rows": len(values),
        "median_abs_rel_error": statistics.median(magnitudes),
        "p90_abs_rel_error": p90,
        "median_signed_rel_error": statistics.median(values),
    }


def main() -> None:
    calibration = calibration_dir()
    ultrascale = list(ultrascale_cases(calibration / "ultrascale_h100_sweep.csv"))
    titan = list(torchtitan_cases(calibration / "published_runs_calibration.csv"))
    results = {
        "ultrascale_vs_allocated": summary(errors(ultrascale, "allocated")),
        "ultrascale_vs_reserved": summary(errors(ultrascale, "reserved")),
        "torchtitan_vs_reserved": summary(errors(titan, "reserved")),
    }
    print(f"{'peer':28} {'rows':>5} {'median |err|':>13} {'p90 |err|':>10} {'median err':>11}")
    for name, figures in results.items():
        print(
            f"{name:28} {figures['rows']:>5.0f} {figures['median_abs_rel_error']:>13.1%}"
            f" {figures['p90_abs_rel_error']:>10.1%} {figures['median_signed_rel_error']:>+11.1%}"
        )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
