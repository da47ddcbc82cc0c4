"""How close the memory model comes to measured peak GPU memory, and whether every layout that ran fits.

Reads every CSV of the calibration schema in ``benchmarks/data/calibration/`` (``$MFUKIT_CALIBRATION``) and
any CSV named on the command line (e.g. ``tests/data/perf/megatron_published_runs.csv``).

1. **Error per source**, against every row that reports its memory: ``peak_mem_gib_per_gpu`` (the
   Ultra-Scale Playbook sweep: nanotron logs rank 0's ``max_memory_reserved``; torchtitan's memory monitor:
   ``max_memory_reserved`` of rank 0; any gathered source with that column), compared with the predicted
   reserved bytes of the first pipeline stage (rank 0); for a source that reports nvidia-smi
   (:data:`NVIDIA_SMI_SOURCES`), with everything on the device of the fullest stage. Korthikanti et al. 2022 (Fig. 1) report model states
   and activations per GPU in their notes, figures of the paper's own formulas: compared part by part.
   The memory model has **no fitted constants** (every allowance in ``data/memory_overheads.toml`` is sourced,
   not fitted), so leave-one-source-out equals in-sample: the table is per source.
2. **Ran but predicted not to fit**: every row that ran (a completed Ultra-Scale point, every published run)
   with a known GPU is estimated with its stack's memory behaviour (``data/memory_stacks.toml``) and counted
   when it is predicted not to fit (``MemoryEstimate.fits``: its required bytes exceed HBM; target 0). Rows whose source leaves the micro-batch or the recompute
   unknown are completed with the most lenient choice (micro-batch 1, full recompute) and marked; rows whose
   GPU memory size is not reported (vTrain's "A100") are skipped.

Run: ``python benchmarks/memory_accuracy.py [EXTRA.csv ...]``; writes ``benchmarks/results/memory_accuracy.json``.
"""

from __future__ import annotations

import csv
import json
import math
import re
import statistics
import sys
from collections import defaultdict
from dataclasses import dataclass, replace
from pathlib import Path

from mfukit import catalog
from mfukit.core.hardware import Accelerator
from mfukit.core.model import ModelSpec
from mfukit.core.parallelism import Parallelism, Recompute
from mfukit.core.scenario import Precision, TrainingSection
from mfukit.perf.calibration_data import (
    calibration_dir,
    held_out_source,
    nanotron_stage_layers,
    ultrascale_model,
)
from mfukit.perf.inputs import training_workload
from mfukit.perf.measured_runs import read_runs
from mfukit.perf.memory import MemoryEstimate, StepShape, estimate_memory, headroom_bytes, stack_memory_fields

GIB = 2.0**30
# sources whose memory figure is what nvidia-smi shows on the fullest GPU (the allocator's reservation, NCCL's
# buffers and the CUDA context): BAAI FlagPerf's monitor samples nvidia-smi on every GPU during the run
# (training/nvidia/nvidia_monitor.py) and its READMEs print the peak as "used/80"
NVIDIA_SMI_SOURCES = frozenset({"baai_flagperf"})
RESULTS = Path(__file__).parent / "results" / "memory_accuracy.json"
SCHEMA = {"source_group", "tp", "pp", "dp", "zero_stage_or_fsdp", "peak_mem_gib_per_gpu", "gpu_type"}
# the software stack of each source (training.framework): its kernels, FP8 weights and allocator
STACKS = {
    "ultrascale_playbook": "nanotron",
    "torchtitan": "torchtitan",
    "llmfoundry_mpt": "fsdp",
    "korthikanti2022": "megatron-deepspeed",  # Megatron-LM of 2022: its own fused kernels, no TE
    "megatron_core_h100_2024": "megatron-core",
    "nemo_megatron_bridge": "nemo",
    "vtrain_multi": "megatron-deepspeed",
    "vtrain_single": "megatron-deepspeed",
}
# LLM Foundry runs on FSDP (its `training.framework`) with fused kernels of its own: perf/data/memory_stacks.toml
MEMORY_STACKS = {"llmfoundry_mpt": "llm-foundry"}
GATHERED = "gathered_runs.csv"  # read by the calibration's own reader, which knows its trailing columns
# recompute a source's row leaves unknown but its recipes state: NeMo's performance recipes for these runs list
# recompute_layers = 0 (NVIDIA/NeMo scripts/performance/recommended_model_configs/model_configs_h100.csv);
# the Megatron-LM README calls selective recompute "the default and recommended in almost all cases"
RECIPE_RECOMPUTE: dict[str, Recompute] = {
    "nemo_megatron_bridge": "none",
    "megatron_core_h100_2024": "selective",
}
NO_FLASH = {"korthikanti2022", "vtrain_multi", "vtrain_single"}  # 2021-22 Megatron: fused softmax attention
GPUS = (
    ("96GB", "h100-sxm-96gb-500w"),
    ("H100", "h100-sxm"),
    ("A100-SXM4-80GB", "a100-80gb-sxm"),
    ("A100-SXM4-40GB", "a100-40gb-sxm"),
)


@dataclass(frozen=True)
class Case:
    source: str
    row_id: str
    model: ModelSpec
    layout: Parallelism
    estimate: MemoryEstimate
    accelerator: Accelerator
    shape: StepShape
    lenient: bool  # the source left the micro-batch or the recompute unknown


def csv_files(extra: list[str]) -> list[Path]:
    folder = calibration_dir()
    files = sorted(folder.glob("*.csv")) + [Path(name) for name in extra]
    with_schema = []
    for path in files:
        with path.open(newline="") as handle:
            header = set(next(csv.reader(handle), []))
        if header >= SCHEMA:
            with_schema.append(path)
    return with_schema


def _int(text: str, default: int = 1) -> int:
    return int(float(text)) if text not in ("", "nan") else default


def accelerator_of(gpu_type: str) -> Accelerator | None:
    for marker, name in GPUS:
        if marker in gpu_type:
            return catalog.accelerator(name)
    return None  # the source does not say which memory size


def precision_of(text: str) -> Precision:
    lowered = text.lower()
    return "fp8" if "fp8" in lowered else "fp16" if lowered.startswith("fp16 mixed") else "bf16"


def recompute_of(text: str) -> Recompute | None:
    lowered = text.lower()
    if "full" in lowered:
        return "full"
    if "selective" in lowered:
        return "selective"
    if lowered.startswith(("none", "no ")):
        return "none"
    return "none" if "nanotron default" in lowered else None


def model_of(row: dict[str, str]) -> ModelSpec:
    if row["source_group"] == "ultrascale_playbook":
        return ultrascale_model(row)
    hidden, ffn = _int(row["hidden"]), _int(row["ffn_hidden"])
    gated = ffn != 4 * hidden
    return ModelSpec(
        name=row["model_name"],
        num_hidden_layers=_int(row["n_layers"]),
        hidden_size=hidden,
        num_attention_heads=_int(row["n_heads"]),
        num_key_value_heads=_int(row["n_kv_heads"] or row["n_heads"]),
        intermediate_size=ffn,
        vocab_size=_int(row["vocab"], 50257),
        mlp="swiglu" if gated else "gelu",
        norm="rmsnorm" if gated else "layernorm",
        position_embedding="rope" if gated else "learned",
    )


def layout_of(row: dict[str, str], recompute: Recompute) -> Parallelism:
    sharding = row["zero_stage_or_fsdp"].lower()
    tp = _int(row["tp"])
    fields: dict[str, object] = {}
    if "fsdp" in sharding or "zero-3" in sharding:
        fields = {"fsdp": "full"} if "fsdp" in sharding else {"zero": 3}
    elif "shard_grad_op" in sharding or "zero-2" in sharding:
        fields = {"zero": 2}
    elif "zero-1" in sharding or "distributed optimizer" in sharding:
        fields = {"zero": 1}  # nanotron's ZeRO-1 shards fp32 master and Adam: the distributed-optimizer count
    vpp = row["vpp"]
    return Parallelism.model_validate(
        {
            "tp": tp,
            "pp": _int(row["pp"]),
            "dp": _int(row["dp"]),
            "cp": _int(row["cp"]),
            "vpp": 2 if vpp == "interleaved" else _int(vpp),
            "sequence_parallel": tp > 1,
            "recompute": recompute,
            **fields,
        }
    )


def case_of(row: dict[str, str]) -> Case | None:
    source = row["source_group"]
    accelerator = accelerator_of(row["gpu_type"])
    if accelerator is None:
        return None
    recompute = recompute_of(row["activation_recompute"]) or RECIPE_RECOMPUTE.get(source)
    lenient = recompute is None or not row["micro_batch"]
    layout = layout_of(row, recompute or "full")
    model = model_of(row)
    micro = _int(row["micro_batch"])
    accumulation = re.search(r"grad_accum=(\d+)", row["notes"]) or re.search(
        r"[Gg]rad accumulation (\d+)", row["notes"]
    )
    sequences = _int(row["global_batch_sequences"], layout.dp * micro)
    if source == "torchtitan" and layout.pp > 1:
        micro, count = 1, micro  # torchtitan's local batch runs as micro-batches of one sequence under PP
    elif accumulation:
        count = int(accumulation.group(1))
    else:
        count = max(1, sequences // (layout.dp * micro))
    framework = row.get("framework") or STACKS.get(source)
    if framework is None:
        return None
    training = TrainingSection(
        seq_len=_int(row["seq_len"]),
        precision=precision_of(row["precision"]),
        framework=framework,
        attention="eager" if source in NO_FLASH else "flash",
        # GPT-3-style Megatron runs train with Megatron-LM's default dropout (0.1 on attention and hidden)
        attention_dropout=0.1 if source in NO_FLASH else 0.0,
        hidden_dropout=0.1 if source in NO_FLASH else 0.0,
    )
    workload = training_workload(model, training, sequences)
    if (
        source in MEMORY_STACKS
    ):  # the source's own memory behaviour where its framework name folds into another
        workload = replace(workload, **stack_memory_fields(MEMORY_STACKS[source]))
    first = (
        nanotron_stage_layers(model, layout.pp)[0]
        if source == "ultrascale_playbook" and layout.pp > 1
        else None
    )
    shape = workload.memory_shape(
        micro_batch_size=micro,
        num_microbatches=count,
        gpus_per_node=8,
        first_stage_layers=first,
    )
    estimate = estimate_memory(model, layout, shape)
    return Case(source, row["row_id"], model, layout, estimate, accelerator, shape, lenient)


def gathered_cases(path: Path) -> dict[str, Case]:
    """The runs of ``gathered_runs.csv`` as the calibration reads them (perf.measured_runs: its framework,
    attention, offload and sharding columns), keyed by row id; rows the reader skips are absent."""
    out: dict[str, Case] = {}
    for run in read_runs(path)[0]:
        workload, layout = run.workload, run.layout
        shape = workload.memory_shape(
            micro_batch_size=run.micro_batch_size,
            num_microbatches=run.num_microbatches,
            gpus_per_node=run.system.gpus_per_node,
            first_stage_layers=run.first_layers if layout.pp > 1 else None,
        )
        estimate = estimate_memory(workload.model, layout, shape)
        out[str(run.row_id)] = Case(
            run.source, str(run.row_id), workload.model, layout, estimate, run.accelerator, shape, False
        )
    return out


def korthikanti_parts(row: dict[str, str], case: Case) -> list[tuple[str, float, float]]:
    """(quantity, predicted, reported) bytes from the notes of a Korthikanti et al. row (Fig. 1)."""
    notes = row["notes"]
    found = {
        name: float(value) * GIB
        for name, value in re.findall(
            r"(params\+optimizer|activations no-recompute|activations seq\+selective) (\d+(?:\.\d+)?)", notes
        )
    }
    stage = case.estimate.first
    parts: list[tuple[str, float, float]] = []
    if "params+optimizer" in found:
        states = stage.weights_bytes + stage.gradients_bytes + stage.optimizer_states_bytes
        parts.append(("model states", states, found["params+optimizer"]))
    for name, recompute, sp in (
        ("activations seq+selective", "selective", True),
        ("activations no-recompute", "none", False),
    ):
        if name in found:
            layout = case.layout.model_copy(update={"recompute": recompute, "sequence_parallel": sp})
            other = estimate_memory(case.model, layout, case.shape).first
            parts.append((name, other.activations_bytes, found[name]))
    return parts


def summary(values: list[float]) -> dict[str, float]:
    magnitudes = sorted(abs(v) for v in values)
    p90 = magnitudes[min(len(magnitudes) - 1, math.ceil(0.9 * len(magnitudes)) - 1)]
    return {
        "rows": len(values),
        "median_abs_rel_error": statistics.median(magnitudes),
        "p90_abs_rel_error": p90,
        "median_signed_rel_error": statistics.median(values),
    }


def main(extra: list[str]) -> None:
    errors: dict[str, list[float]] = defaultdict(list)
    fit: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    refused: list[str] = []
    seen_korthikanti: set[str] = set()
    for path in csv_files(extra):
        gathered = gathered_cases(path) if path.name == GATHERED else {}
        with path.open(newline="") as handle:
            for row in csv.DictReader(handle):
                source = row["source_group"]
                measured = row["peak_mem_gib_per_gpu"]
                if source == "ultrascale_playbook" and measured in ("", "nan"):
                    fit[source]["did not complete"] += 1
                    continue
                if not row["tp"]:
                    fit[source]["skipped (layout not published)"] += 1
                    continue
                if held_out_source(row):
                    fit[source]["left out (a held-out source)"] += 1
                    continue
                case = gathered.get(row["row_id"]) if path.name == GATHERED else case_of(row)
                if case is None:
                    fit[source]["skipped (GPU memory size or stack not reported)"] += 1
                    continue
                if measured not in ("", "nan"):
                    if source in NVIDIA_SMI_SOURCES:
                        quantity, predicted = "peak used (nvidia-smi)", case.estimate.peak.total_bytes
                    else:
                        quantity, predicted = "peak reserved", case.estimate.first.reserved_bytes
                    errors[f"{source}: {quantity}"].append(predicted / (float(measured) * GIB) - 1)
                if source == "korthikanti2022" and row["model_name"] not in seen_korthikanti:
                    seen_korthikanti.add(row["model_name"])
                    for quantity, predicted, reported in korthikanti_parts(row, case):
                        errors[f"{source}: {quantity} (paper formula)"].append(predicted / reported - 1)
                hbm = case.accelerator.hbm_bytes
                peak = case.estimate.peak_bytes
                counts = fit[source]
                counts["ran, checked"] += 1
                counts["completed leniently"] += case.lenient
                if not case.estimate.fits(hbm):
                    counts["predicted not to fit"] += 1
                    refused.append(
                        f"{source} row {case.row_id} ({case.model.name}): needs "
                        f"{case.estimate.required_bytes / GIB:.1f} of {hbm / GIB:.0f} GiB"
                    )
                elif peak > hbm - headroom_bytes(None, hbm):
                    counts["inside the default headroom"] += 1
    print("memory error per source (no fitted constants: leave-one-source-out = in-sample)")
    print(f"{'source: quantity':58} {'rows':>5} {'median |err|':>13} {'p90 |err|':>10} {'median err':>11}")
    results: dict[str, object] = {"fitted_constants": 0, "error": {}, "fit_check": {}, "refused": refused}
    for name, values in sorted(errors.items()):
        figures = summary(values)
        results["error"][name] = figures  # type: ignore[index]
        print(
            f"{name:58} {figures['rows']:>5.0f} {figures['median_abs_rel_error']:>13.1%}"
            f" {figures['p90_abs_rel_error']:>10.1%} {figures['median_signed_rel_error']:>+11.1%}"
        )
    print("\nlayouts that ran, against HBM")
    for source, counts in sorted(fit.items()):
        results["fit_check"][source] = dict(counts)  # type: ignore[index]
        print(f"  {source:28} " + ", ".join(f"{key} {value:,}" for key, value in counts.items()))
    print(f"\nran but predicted not to fit: {len(refused)}")
    for line in refused:
        print(f"  {line}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
