"""Measured training runs in the calibration CSV schema, as step-time cases.

The schema (``shared/reference/perf-model.md`` §2) is one row per run: the model's shape, the batch, the GPU
type and count, the layout (tp, pp, dp, cp, ep, vpp, ``zero_stage_or_fsdp``, ``activation_recompute``), the
precision, and what the run measured (tokens/s per GPU or in total, step time, TFLOP/s per GPU in a stated
accounting, or MFU). Optional trailing columns name what the schema leaves to the notes: ``framework`` (the
software stack), ``attention`` (``flash`` or ``eager``), ``offload`` (:data:`OFFLOADS`), ``system`` (a catalog
node), ``compile`` (torch.compile: yes or no, blank no) and ``tp_comm_overlap`` (TP collectives under the
GEMMs: async TP, ``--tp-comm-overlap``; yes or no, blank the stack's default). A ``vpp`` of ``interleaved``
(the source names the schedule, not its virtual stages) is read as a tuned run would interleave it.

The same reader serves the Megatron-stack and gathered files of ``benchmarks/data/calibration/`` and a site's
own runs (``mfukit validate`` / ``mfukit calibrate``). A row whose layout the source did not publish is
skipped with its reason; a value that is there but cannot be read is an error naming the row and column.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from mfukit import catalog
from mfukit.core.hardware import Accelerator, System
from mfukit.core.model import ModelSpec
from mfukit.core.parallelism import Parallelism, Recompute, default_stage_split, layout_problems
from mfukit.core.scenario import TORCH_DTYPE_PRECISIONS, Fp8Recipe, NormKernel, Precision
from mfukit.errors import InputError
from mfukit.perf import flops
from mfukit.perf.activations import model_recomputed_share
from mfukit.perf.layouts import BATCH_ROUNDING_FRAC, Workload, rounded_batch, stage_counts
from mfukit.perf.memory import stack_memory_fields

Accounting = Literal["model", "hardware"]
REQUIRED_COLUMNS = (
    "row_id",
    "source_group",
    "model_name",
    "n_layers",
    "hidden",
    "n_heads",
    "ffn_hidden",
    "vocab",
    "seq_len",
    "gpu_type",
    "n_gpus",
    "tp",
    "pp",
    "dp",
)
MEASURED_COLUMNS = (
    "tokens_per_sec_per_gpu",
    "tokens_per_sec_total",
    "step_time_s",
    "measured_tflops_per_gpu",
    "measured_mfu_pct",
)
OPTIONAL_COLUMNS = (
    "framework",
    "attention",
    "offload",
    "system",
    "compile",
    "tp_comm_overlap",
    "norm",
    "attention_dropout",
    "hidden_dropout",
)
NORM_KERNELS: dict[str, NormKernel] = {"fused": "fused", "eager": "eager"}  # the norm column (training.norm)
# the node each GPU type of the schema ran in when a row names no catalog system (DGX/HGX 8-GPU nodes)
GPU_SYSTEMS = (
    ("A100-SXM4-40GB", "dgx-a100-40gb"),
    ("A100", "dgx-a100-80gb"),
    ("H100", "dgx-h100"),
    ("H800", "hgx-h800"),
    ("H200", "dgx-h200"),
    ("GB200", "gb200-nvl72"),
    ("B200", "hgx-b200"),
    ("MI300X", "mi300x-platform"),
    ("MI325X", "mi325x-platform"),
)
# the stack of the groups the schema's files carry without a framework column
SOURCE_STACKS = {
    "korthikanti2022": "megatron-core",
    "megatron_core_h100_2024": "megatron-core",
    "nemo_megatron_bridge": "nemo",
}
# the attention kernel of a source whose rows do not say: Megatron-LM of 2022 (Korthikanti et al.) ran the
# unfused core attention (QK^T and softmax-V as batched GEMMs around a fused softmax, the s^2 scores stored:
# the very tensors its selective recompute drops); FlashAttention came to Megatron-LM in 2023
SOURCE_ATTENTION = {"korthikanti2022": "eager"}
# The dropout of a row whose dropout cells are empty, by its attention kernel. Eager attention is the
# 2021-22 GPT-3-style runs, whose launchers inherited Megatron-LM's default of 0.1 on attention and hidden
# states (megatron/arguments.py, v2.5 to 23.06; Korthikanti et al. state their activation memory with both
# masks, sec. 4.1); flash-attention runs are the Llama-family recipes, which set 0 (NeMo 2.0's Llama3Config,
# torchtitan, LLM Foundry's MPT). A row that states its dropout is read as it says.
UNSTATED_DROPOUT = {"eager": (0.1, 0.1), "flash": (0.0, 0.0)}
# the FP8 scaling of a source whose rows do not say: Megatron-Bridge's 25.x performance summaries run their
# FP8 rows with current scaling ("FP8-CS"), the shared reference's three NeMo 25.09 recipes among them
SOURCE_FP8_RECIPE: dict[str, Fp8Recipe] = {"nemo_megatron_bridge": "current"}
# stacks whose layers always run sequence parallel with TP (Megatron-Core and NeMo recipes, nanotron,
# torchtitan); Megatron-DeepSpeed, DeepSpeed and FSDP only when the row says so
SEQUENCE_PARALLEL_STACKS = frozenset({"megatron-core", "nemo", "nanotron", "torchtitan"})
# FP8 scalings the step-time model does not implement (it knows tensorwise and Transformer Engine's delayed and
# current scaling, training.fp8_recipe): torchao's rowwise recipes run PyTorch's CUTLASS row-wise scaled GEMM,
# which is slower than the tensor-wise cuBLAS one (pytorch/pytorch#147971), and, without fast accumulation in
# the backward, cuBLAS plus a separate rescale (pytorch/ao#1325); block-wise and MX scalings scale per tile. A
# row that ran one is skipped with the reason, as a scenario cannot ask for it.
UNMODELLED_FP8_SCALINGS = ("rowwise", "blockwise", "mxfp8")


@dataclass(frozen=True)
class Case:
    """One measured run as the step-time model sees it."""

    source: str
    row_id: int
    label: str
    workload: Workload
    layout: Parallelism
    micro_batch_size: int
    num_microbatches: int
    first_layers: int
    last_layers: int
    system: System
    accelerator: Accelerator
    num_gpus: int
    measured_tokens_per_s_per_gpu: float
    accounting: Accounting
    measured_memory_bytes: float | None = None


@dataclass(frozen=True)
class SkippedRow:
    row_id: str
    reason: str


class _Row:
    """One CSV row with typed access that names the row and the column on a bad value."""

    def __init__(self, values: dict[str, str], path: Path, line: int):
        self.values = values
        self.path = path
        self.where = f"row {values.get('row_id') or '?'} (line {line})"

    def text(self, column: str) -> str:
        return (self.values.get(column) or "").strip()

    def has(self, column: str) -> bool:
        return self.text(column).lower() not in ("", "nan", "unknown")

    def number(self, column: str, *, positive: bool = True) -> float:
        raw = self.text(column)
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or (positive and value <= 0) or value < 0:
            raise InputError(
                f"{self.where}: column '{column}' is {raw!r}",
                source=str(self.path),
                field=column,
                value=raw,
                expected="a positive number" if positive else "a number >= 0",
                hint=f"fix or empty the '{column}' cell of {self.where}",
            )
        return value

    def integer(self, column: str, default: int | None = None) -> int:
        if default is not None and not self.has(column):
            return default
        value = self.number(column)
        if value != int(value):
            raise InputError(
                f"{self.where}: column '{column}' is {self.text(column)!r}, expected a whole number",
                source=str(self.path),
                field=column,
                value=self.text(column),
            )
        return int(value)

    def probability(self, column: str, default: float) -> float:
        """A probability in [0, 1) (dropout); ``default`` when empty."""
        if not self.has(column):
            return default
        value = self.number(column, positive=False)
        if value >= 1.0:
            raise self.error(
                column, f"column '{column}' is {self.text(column)!r}", f"write 0 <= p < 1 in '{column}'"
            )
        return value

    def switch(self, column: str) -> bool | None:
        """A yes/no cell (yes, no, true, false, 1, 0); None when empty."""
        text = self.text(column).lower()
        if not text:
            return None
        if text in ("yes", "true", "1"):
            return True
        if text in ("no", "false", "0"):
            return False
        raise self.error(
            column, f"column '{column}' is {self.text(column)!r}", f"write yes or no in '{column}'"
        )

    def error(self, column: str, message: str, hint: str) -> InputError:
        return InputError(
            f"{self.where}: {message}",
            source=str(self.path),
            field=column,
            value=self.text(column),
            hint=hint,
        )


def _machine(row: _Row) -> tuple[System, Accelerator]:
    if row.has("system"):
        system = catalog.system(row.text("system"), field="system", source=str(row.path))
    else:
        gpu = row.text("gpu_type").upper()
        name = next((system for key, system in GPU_SYSTEMS if key in gpu), None)
        if name is None:
            raise row.error(
                "gpu_type",
                f"unknown gpu_type {row.text('gpu_type')!r}",
                "use one of "
                + ", ".join(key for key, _ in GPU_SYSTEMS)
                + ", or name a catalog node in 'system'",
            )
        system = catalog.system(name)
    return system, catalog.accelerator(system.accelerator)


# what a precision cell must name when it is filled (a blank one is read as 16-bit), after the dtype names
# torch spells out are folded to these; and the precisions the model does not price, refused wherever the
# cell names them ("nvfp4 (bf16 first/last layers)" is an FP4 run, not a 16-bit one)
PRECISION_WORDS = ("fp8", "bf16", "fp16", "fp32", "16-bit")
DTYPE_SPELLINGS: dict[str, str] = {**TORCH_DTYPE_PRECISIONS, "float8": "fp8", "16 bit": "16-bit"}
UNMODELLED_PRECISIONS = ("fp4", "fp6", "int8", "int4")


def _precision(row: _Row) -> Precision:
    text = row.text("precision").lower() if row.has("precision") else ""
    for spelled, word in DTYPE_SPELLINGS.items():
        text = text.replace(spelled, word)
    unmodelled = [word for word in UNMODELLED_PRECISIONS if word in text]
    if unmodelled or (text and not any(word in text for word in PRECISION_WORDS)):
        said = (
            f"names {unmodelled[0]}, which is not modelled"
            if unmodelled
            else "names none of " + ", ".join(PRECISION_WORDS)
        )
        raise row.error(
            "precision",
            f"column 'precision' is {row.text('precision')!r}: it {said}",
            "name the matmul precision the run trained in (bf16, fp16, fp8 or fp32), or leave the cell "
            "empty for 16-bit; FP4, FP6 and integer training are not modelled",
        )
    if "fp8" in text:
        return "fp8"
    if text.startswith("fp16") and "bf16" not in text:
        return "fp16"
    if "fp32" in text and "16" not in text:
        return "fp32"
    return "bf16"  # bf16 and fp16 share the tensor-core peak on every catalog GPU


# how a precision cell says the weights were all-gathered in FP8 (torchao's FSDP Float8 all-gather, Megatron's
# --fp8-param-gather) or in 16 bits
FP8_GATHER_PHRASES = ("fp8 all-gather", "float8 all-gather", "fp8-param-gather", "fp8 param gather")
SIXTEEN_BIT_GATHER_PHRASES = ("bf16 all-gather", "16-bit all-gather")


def _fp8_all_gather(row: _Row) -> bool | None:
    """What the precision cell says of the weights' all-gathers ("fp8 all-gather", "bf16 all-gather"); None
    when it says nothing (the stack's default)."""
    text = row.text("precision").lower().replace("_", "-")
    said = [phrase for phrase in FP8_GATHER_PHRASES if phrase in text]
    if not said:
        return False if any(phrase in text for phrase in SIXTEEN_BIT_GATHER_PHRASES) else None
    # "no fp8 all-gather", "fp8 all-gather off": said, and said not to have run
    negated = any(f"{word} {phrase}" in text for word in ("no", "without") for phrase in said) or any(
        f"{phrase} off" in text or f"{phrase}: off" in text for phrase in said
    )
    return not negated


def _fp8_recipe(row: _Row) -> Fp8Recipe:
    """Transformer Engine's FP8 scaling as the row's precision names it, else its source's, else delayed."""
    text = row.text("precision").lower()
    if "current scaling" in text or "fp8-cs" in text:
        return "current"
    if "delayed" in text:
        return "delayed"
    return SOURCE_FP8_RECIPE.get(row.text("source_group"), "delayed")


def _stack(row: _Row) -> str:
    from mfukit.perf.efficiency import stack_name  # the stacks the efficiency profiles know

    if row.has("framework"):
        return stack_name(row.text("framework"), field="framework")
    return SOURCE_STACKS.get(row.text("source_group"), "megatron-core")


# the CSV column of each ModelSpec field a row fills, for naming the cell a bad shape came from
SHAPE_COLUMNS = {
    "num_hidden_layers": "n_layers",
    "hidden_size": "hidden",
    "num_attention_heads": "n_heads",
    "num_key_value_heads": "n_kv_heads",
    "intermediate_size": "ffn_hidden",
    "vocab_size": "vocab",
    "max_position_embeddings": "seq_len",
}


def _model(row: _Row) -> ModelSpec:
    hidden, ffn = row.integer("hidden"), row.integer("ffn_hidden")
    heads = row.integer("n_heads")
    gelu = ffn == 4 * hidden  # GPT-style 4h MLPs; Llama-style SwiGLU widths are not 4h
    try:
        return ModelSpec(
            name=row.text("model_name") or "run",
            num_hidden_layers=row.integer("n_layers"),
            hidden_size=hidden,
            num_attention_heads=heads,
            num_key_value_heads=row.integer("n_kv_heads") if row.has("n_kv_heads") else None,
            intermediate_size=ffn,
            vocab_size=row.integer("vocab"),
            mlp="gelu" if gelu else "swiglu",
            norm="layernorm" if gelu else "rmsnorm",
            position_embedding="learned" if gelu else "rope",
            tie_word_embeddings=False,
            max_position_embeddings=row.integer("seq_len"),
        )
    except ValidationError as error:
        # pydantic: a shape out of range, heads that do not divide the hidden size
        first = error.errors()[0]
        field = str(first["loc"][0]) if first["loc"] else ""
        if not field and "num_key_value_heads" in first["msg"]:  # heads that the KV heads do not divide
            field = "num_key_value_heads"
        column = SHAPE_COLUMNS.get(field, "n_heads")
        raise row.error(
            column,
            f"column '{column}' is {row.text(column)!r}, a shape the model does not take: {first['msg']}",
            "check the shape columns (n_layers, hidden, n_heads, n_kv_heads, ffn_hidden, vocab, seq_len)",
        ) from None


def _sharding(row: _Row, stack: str) -> dict[str, object]:
    text = row.text("zero_stage_or_fsdp").lower().replace("_", "-")
    deepspeed = "deepspeed" if stack in ("deepspeed", "megatron-deepspeed") else "megatron"
    if "shard-grad-op" in text or "shard grad op" in text:  # FSDP's SHARD_GRAD_OP is ZeRO-2
        return {"zero": 2, "zero_impl": "deepspeed"}
    # apex's DistributedFusedAdam (NeMo 1.x's distributed_fused_adam) "implements the ZeRO-2 algorithm, which
    # distributes the optimizer state and gradients" (apex/contrib/optimizers/distributed_fused_adam.py): no
    # full fp32 main-gradient buffer, unlike Megatron's distributed optimizer
    if "distributed-fused-adam" in text:
        return {"zero": 2, "zero_impl": "deepspeed"}
    if "hybrid" in text or "hsdp" in text:
        return {"fsdp": "hybrid"}
    if "fsdp" in text or "full-shard" in text:
        return {"fsdp": "full"}
    for stage in (3, 2, 1):
        if f"zero-{stage}" in text or f"zero{stage}" in text or f"zero stage {stage}" in text:
            return {"zero": stage, "zero_impl": deepspeed}
    if "distributed optimizer" in text or "dist-opt" in text:
        return {"zero": 1}
    return {}


@dataclass(frozen=True)
class _RecomputeRead:
    """What a row's ``activation_recompute`` says."""

    modes: tuple[Recompute, ...] | None  # the modes it allows (None: not published, any)
    layers: int | None = None  # the layers of each model chunk a full recompute covers (None: all)
    # ``layers`` is a floor read from HFU / MFU (two-digit percentages), not a count the row gives: where the
    # memory model says the run cannot have fit with it, it recomputed every layer
    layers_floor: bool = False
    sequence_parallel: bool = False


def _recompute(row: _Row, stack: str, model: ModelSpec, layers_per_chunk: int) -> _RecomputeRead:
    """What the row's ``activation_recompute`` says (its modes, layers per chunk, sequence parallelism)."""
    text = row.text("activation_recompute").lower()
    sp = "sequence-parallel" in text or "sequence parallel" in text
    if text.startswith("full"):
        return _RecomputeRead(
            ("full",), _recomputed_layers(row, text, layers_per_chunk), sequence_parallel=sp
        )
    if text.startswith("per-op selective") or (text.startswith("selective") and stack != "fsdp"):
        # Megatron's core-attention recompute, torchtitan's per-op SAC
        return _RecomputeRead(("selective",), sequence_parallel=sp)
    if text.startswith("selective"):
        # FSDP stacks (IBM's fms-fsdp, LLM Foundry) call checkpointing a fraction of the blocks "selective":
        # as many as the published HFU over MFU says, else between Megatron's selective and full, as far as
        # it needed to fit
        layers = _layers_from_utilization(row, model, layers_per_chunk)
        if layers is None:
            return _RecomputeRead(("selective", "full"), sequence_parallel=sp)
        if layers == 0:
            return _RecomputeRead(("none",), sequence_parallel=sp)
        if layers >= layers_per_chunk:
            return _RecomputeRead(("full",), sequence_parallel=sp)
        return _RecomputeRead(("full",), layers, layers_floor=True, sequence_parallel=sp)
    if text == "no" or text.startswith(("none", "no ", "no-", "no+")):
        return _RecomputeRead(("none",), sequence_parallel=sp)
    return _RecomputeRead(None, sequence_parallel=sp)


def _recomputed_layers(row: _Row, text: str, layers_per_chunk: int) -> int | None:
    """``full, every 2nd layer`` / ``every other layer`` (torchtitan's layer AC, fms-fsdp's
    selective_checkpointing) or ``full, 20 layers`` (Megatron's block method): the layers of each chunk
    recomputed; None for every layer (Megatron's uniform method recomputes every layer in groups of N)."""
    every = re.search(r"every (\d+)", text)
    counted = re.search(r"(\d+) layers?\b", text)
    if "uniform" in text:
        return None
    if every is not None or "every other" in text:
        layers = math.ceil(layers_per_chunk / (max(1, int(every.group(1))) if every is not None else 2))
    elif counted is not None:
        layers = int(counted.group(1))
        if layers == 0:
            raise row.error(
                "activation_recompute",
                f"activation_recompute is {row.text('activation_recompute')!r}: full recompute of 0 layers",
                "write none, or the layers of each chunk recomputed",
            )
    else:
        return None
    return layers if layers < layers_per_chunk else None


def _layers_from_utilization(row: _Row, model: ModelSpec, layers_per_chunk: int) -> int | None:
    """The recomputed layers a run's published HFU and MFU imply (None where either is missing): full
    recompute of a share r of the layers executes r x the layers' forward again, so HFU / MFU = 1 + r x
    (the full-recompute ratio - 1) (SC21 eq. 3 against Korthikanti et al. 2022's model FLOPs, both with the
    full s^2 attention the nanoGPT/PaLM MFU and the PyTorch FLOP counter count). Two-digit percentages give r
    to about 0.05."""
    if not (row.has("hfu_pct") and row.has("measured_mfu_pct")):
        return None
    seq = row.integer("seq_len")
    model_flops = flops.model_flops_per_token(model, seq, "full")
    full_ratio = flops.hardware_flops_per_token(model, seq, "full", "full") / model_flops
    share = (row.number("hfu_pct") / row.number("measured_mfu_pct") - 1) / (full_ratio - 1)
    return max(0, min(layers_per_chunk, round(share * layers_per_chunk)))


def _measured(
    row: _Row, workload: Workload, layout: Parallelism, n_gpus: int, accelerator: Accelerator
) -> tuple[float, Accounting]:
    """Tokens/s per GPU the run measured, from the first measured column the row fills."""
    seq = workload.seq_len
    if row.has("tokens_per_sec_per_gpu"):
        return row.number("tokens_per_sec_per_gpu"), "model"
    if row.has("tokens_per_sec_total"):
        return row.number("tokens_per_sec_total") / n_gpus, "model"
    if row.has("step_time_s"):
        return workload.global_batch_sequences * seq / row.number("step_time_s") / n_gpus, "model"
    model_flops = flops.model_flops_per_token(workload.model, seq, "full")
    if row.has("measured_tflops_per_gpu"):
        tflops = row.number("measured_tflops_per_gpu") * 1e12
        if row.text("tflops_accounting").lower().startswith("hardware"):
            share = model_recomputed_share(layout, workload.model.num_hidden_layers)
            per_token = flops.hardware_flops_per_token(workload.model, seq, layout.recompute, "full", share)
            return tflops / per_token, "hardware"
        return tflops / model_flops, "model"
    peak = row.number("peak_tflops_used") * 1e12 if row.has("peak_tflops_used") else None
    if peak is None:
        peak = accelerator.peak_flops(workload.precision)
    return row.number("measured_mfu_pct") / 100 * peak / model_flops, "model"


# what the offload column may name (joined by "+", ";" or ","): what went to host memory, and for the optimizer
# states who stepped them (the CPU, ZeRO-Offload's default; or the GPU they came back to: "optimizer-states",
# DeepCompile offload_adam_states); each moved whole
OFFLOADS: dict[str, dict[str, Any]] = {
    "optimizer": {"offload_optimizer": 1.0, "offload_optimizer_step": "cpu"},
    "optimizer-states": {"offload_optimizer": 1.0, "offload_optimizer_step": "gpu"},
    "params": {"offload_params": 1.0},
    "activations": {"offload_activations": 1.0},
}


def _offload(row: _Row) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    tokens = [t.strip() for t in row.text("offload").lower().replace("+", ";").replace(",", ";").split(";")]
    for token in filter(None, tokens):
        if token not in OFFLOADS:
            raise row.error("offload", f"offload names {token!r}", f"use one of {', '.join(OFFLOADS)}")
        clash = sorted(set(fields) & set(OFFLOADS[token]))
        if clash:
            raise row.error(
                "offload",
                f"offload names {token!r} beside a token that already sets {', '.join(clash)}",
                "name each kind once: 'optimizer' (stepped by the CPU) or 'optimizer-states' (stepped by the GPU)",
            )
        fields.update(OFFLOADS[token])
    return fields


def _case(row: _Row) -> Case | SkippedRow:
    row_id = row.text("row_id")
    missing = [column for column in REQUIRED_COLUMNS if not row.has(column)]
    if missing:
        return SkippedRow(row_id, "not published: " + ", ".join(missing))
    if not any(row.has(column) for column in MEASURED_COLUMNS):
        return SkippedRow(row_id, "no measured throughput (" + ", ".join(MEASURED_COLUMNS) + ")")
    precision = _precision(row)
    if precision == "fp8":
        scaling = next(
            (name for name in UNMODELLED_FP8_SCALINGS if name in row.text("precision").lower()), None
        )
        if scaling is not None:
            return SkippedRow(
                row_id, f"FP8 {scaling} scaling is not modelled (tensorwise, delayed and current scaling are)"
            )
    stack = _stack(row)
    model = _model(row)
    system, accelerator = _machine(row)
    try:
        accelerator.peak_flops(precision)  # the catalog says which math the GPU has
    except InputError as error:
        raise row.error(
            "precision",
            f"{accelerator.name} has no {precision} math in the catalog",
            f"use one of {error.expected}, or fix gpu_type / system",
        ) from None
    tp, pp, dp = row.integer("tp"), row.integer("pp"), row.integer("dp")
    # "interleaved": the source says the pipeline interleaves, not into how many virtual stages
    interleaved = row.text("vpp").lower() == "interleaved"
    cp, ep = row.integer("cp", default=1), row.integer("ep", default=1)
    vpp = 1 if interleaved else row.integer("vpp", default=1)
    n_gpus = row.integer("n_gpus")
    if tp * pp * dp * cp != n_gpus:
        raise row.error(
            "n_gpus",
            f"tp x pp x dp x cp = {tp * pp * dp * cp} but n_gpus = {n_gpus}",
            "fix the layout or the GPU count",
        )
    seq = row.integer("seq_len")
    if row.has("global_batch_sequences"):
        batch = row.integer("global_batch_sequences")
    elif row.has("global_batch_tokens"):
        batch = max(1, int(row.number("global_batch_tokens") // seq))
    else:
        return SkippedRow(row_id, "not published: global_batch_sequences, global_batch_tokens")
    recompute = _recompute(row, stack, model, model.num_hidden_layers // (pp * vpp))
    split = default_stage_split(model.num_hidden_layers, pp, vpp)
    layout = Parallelism(
        tp=tp,
        pp=pp,
        dp=dp,
        cp=cp,
        ep=ep,
        vpp=vpp,
        sequence_parallel=tp > 1 and (recompute.sequence_parallel or stack in SEQUENCE_PARALLEL_STACKS),
        recompute=recompute.modes[0] if recompute.modes else "none",
        recompute_layers=recompute.layers,
        **_sharding(row, stack),
        **({"first_stage_layers": split[0], "last_stage_layers": split[1]} if split else {}),
    )
    attention = row.text("attention").lower() or SOURCE_ATTENTION.get(row.text("source_group"), "")
    if attention not in ("", "flash", "eager"):
        raise row.error("attention", f"attention is {attention!r}", "use flash or eager")
    unstated_dropout = UNSTATED_DROPOUT["eager" if attention == "eager" else "flash"]
    norm_text = row.text("norm").lower()
    if norm_text and norm_text not in NORM_KERNELS:
        raise row.error(
            "norm", f"norm is {norm_text!r}", "use fused or eager, or leave it empty (the stack's)"
        )
    compiled, fp8_all_gather = bool(row.switch("compile")), _fp8_all_gather(row)
    try:
        stack_fields: dict[str, Any] = stack_memory_fields(
            stack, NORM_KERNELS.get(norm_text), compiled, fp8_all_gather
        )
    except InputError as error:
        raise row.error("precision", error.message, "name no FP8 all-gather for this stack") from None
    workload = Workload(
        model=model,
        seq_len=seq,
        global_batch_sequences=batch,
        batch_rounding_frac=BATCH_ROUNDING_FRAC,
        precision=precision,
        fp8_recipe=_fp8_recipe(row),
        flash_attention=attention != "eager",
        attention_dropout=row.probability("attention_dropout", unstated_dropout[0]) > 0,
        hidden_dropout=row.probability("hidden_dropout", unstated_dropout[1]) > 0,
        framework=stack,
        compile=compiled,
        tp_comm_overlap=row.switch("tp_comm_overlap"),
        **_offload(row),
        **stack_fields,
    )
    published = batch
    micro: int | None = row.integer("micro_batch", default=0) or None
    problems = layout_problems(
        layout, model, seq_len=seq, global_batch_sequences=None, micro_batch_size=micro or 1, num_gpus=n_gpus
    )
    if problems:
        raise row.error(problems[0].field.split(".")[-1], problems[0].message, problems[0].fix)
    from mfukit.perf.efficiency import efficiency_for
    from mfukit.perf.unpublished import interleavings

    # a pipeline without a published vpp, on a stack that interleaves: any of the splits it allows (more than
    # one virtual stage where the row says it interleaves)
    vpps = (
        [v for v in interleavings(model.num_hidden_layers, pp) if v > 1 or not interleaved]
        if (interleaved or not row.has("vpp")) and efficiency_for(accelerator, stack).interleaved_pipeline
        else None
    )
    if interleaved and not vpps:
        raise row.error(
            "vpp",
            f"'interleaved', but {stack} has no interleaved schedule, or pp {pp} splits the "
            f"{model.num_hidden_layers} layers into no more than one virtual stage per rank",
            "give the virtual stages per rank as a number, or fix the framework or pp",
        )
    if (
        micro is None
        or recompute.modes is None
        or len(recompute.modes) > 1
        or (vpps is not None and vpps != [layout.vpp])
        or recompute.layers_floor
    ):
        # an unpublished knob: what a tuned run of the layout uses (the step-time and memory models' choice)
        from mfukit.perf.step_time import machine_for
        from mfukit.perf.unpublished import tuned_choice

        choice = tuned_choice(
            workload,
            layout,
            machine_for(system, accelerator, n_gpus),
            micro_batch_size=micro,
            recomputes=recompute.modes,
            vpps=vpps,
            recompute_layers=[recompute.layers, None] if recompute.layers_floor else None,
        )
        layout, micro = choice.layout, choice.micro_batch_size
    # a batch published in tokens (OPT's 2M) need not split into whole micro-batches per rank: the nearest
    # whole number of them (within 10 %) runs the same per-GPU work (the measurement converts with the
    # published batch)
    micro = micro or 1
    per_step = dp * micro
    batch = int(rounded_batch(workload, [per_step])[0])
    if batch == 0:
        raise row.error(
            "global_batch_sequences",
            f"global batch {published} is not (within 10 %) a whole number of dp x micro_batch = {per_step}",
            "check the batch, dp and micro_batch columns",
        )
    from mfukit.perf.planner import interleaving_breaks

    if interleaving_breaks(pp, layout.vpp, batch // per_step):
        raise row.error(
            "vpp",
            f"an interleaved pipeline (pp {pp}, vpp {layout.vpp}) needs the micro-batches per step to be a multiple of "
            f"pp, and {batch} / (dp {dp} x micro_batch {micro}) = {batch // per_step} is not",
            "check the batch, dp, micro_batch and vpp columns (Megatron's interleaved 1F1B schedule)",
        )
    workload = replace(workload, global_batch_sequences=batch)
    measured, accounting = _measured(
        row, replace(workload, global_batch_sequences=published), layout, n_gpus, accelerator
    )
    first, last = stage_counts(layout, model.num_hidden_layers)
    memory = row.number("peak_mem_gib_per_gpu") * 2.0**30 if row.has("peak_mem_gib_per_gpu") else None
    return Case(
        source=row.text("source_group"),
        row_id=int(row.number("row_id", positive=False)),
        label=row.text("model_name"),
        workload=workload,
        layout=layout,
        micro_batch_size=micro,
        num_microbatches=batch // (dp * micro),
        first_layers=first,
        last_layers=last,
        system=system,
        accelerator=accelerator,
        num_gpus=n_gpus,
        measured_tokens_per_s_per_gpu=measured,
        accounting=accounting,
        measured_memory_bytes=memory,
    )


def _lines(path: Path) -> Iterator[tuple[int, dict[str, str]]]:
    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:
            reader = csv.DictReader(handle)
            header = reader.fieldnames or []
            absent = [column for column in (*REQUIRED_COLUMNS, "source_group") if column not in header]
            if absent:
                raise InputError(
                    f"{path} lacks the column(s) {', '.join(dict.fromkeys(absent))}",
                    source=str(path),
                    field=absent[0],
                    hint="use the calibration CSV schema (docs/performance-model.md lists its columns)",
                )
            for values in reader:
                yield reader.line_num, values
    except OSError as error:
        raise InputError(f"cannot read {path}: {error.strerror}", source=str(path)) from None
    except (csv.Error, UnicodeDecodeError) as error:
        raise InputError(f"{path} is not a readable CSV file: {error}", source=str(path)) from None


def read_runs(path: Path) -> tuple[list[Case], list[SkippedRow]]:
    """Every row of ``path`` as a case, and the rows that cannot be (with why)."""
    cases: list[Case] = []
    skipped: list[SkippedRow] = []
    for line, values in _lines(path):
        made = _case(_Row(values, path, line))
        if isinstance(made, SkippedRow):
            skipped.append(made)
        else:
            cases.append(made)
    return cases, skipped
