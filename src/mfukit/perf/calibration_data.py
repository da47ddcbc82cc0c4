"""Measured training runs as step-time cases: the rows of ``benchmarks/data/calibration/`` turned into a
model, a layout, a machine and the throughput each run measured.

Sources (column notes in ``shared/reference/perf-model.md`` §2):

* ``llmfoundry_mpt`` - LLM Foundry's MPT benchmarks (A100-40/80GB, H100): FSDP FULL_SHARD (SHARD_GRAD_OP
  for a few), TP = PP = 1, flash attention, MPT's GeLU/LayerNorm/ALiBi/tied shape; grad accumulation from the
  notes; 8 x 200 Gb/s (A100) and 8 x 400 Gb/s (H100) per node; no dropout (MPT's attn_pdrop, resid_pdrop and
  emb_pdrop default to 0, and no benchmark config sets them). Throughput: reported tokens/s/GPU.
* ``vtrain_multi`` / ``vtrain_single`` - vTrain's measured Megatron-DeepSpeed GPT iterations on A100 (64-512
  GPUs; one 8-GPU node): full recompute, DDP (no ZeRO), fp16, 1F1B, on vTrain's cluster (``vtrain-a100-cluster``:
  800 Gb/s per node, four NICs shared by two GPUs each); Megatron-DeepSpeed's
  fused softmax attention (no flash attention: the released configs do not turn it on), Megatron's default
  dropout of 0.1 on attention and hidden states. Their throughput is
  HFU-style; it is compared through tokens/s, which is the same comparison in any FLOP accounting.
* ``ultrascale_playbook`` - the Ultra-Scale Playbook sweep on AWS p5.48xlarge nodes (8 x H100, EFA;
  nanotron): no recompute, sequence parallel (tp_mode REDUCE_SCATTER), ZeRO-0 or ZeRO-1 (sharded fp32 master
  and Adam), grad accumulation from the notes, nanotron's cost-balanced pipeline split; runs that did not
  complete are skipped.
* ``torchtitan`` - Llama 3.1 8B/70B/405B on Grand Teton hosts (H100 96 GB HBM2e at 500 W, its own catalog
  entry, 400 Gb/s RDMA per GPU), FSDP2, Float8 (``fp8``), CP, async TP (``tp_comm_overlap``) and
  torch.compile (``compile``) as each table's header or row says; fitted with the FSDP stacks' runs (the
  ``torchtitan`` profile runs on ``fsdp``'s constants).

* the plain-schema file ``gathered_runs.csv``, read by :mod:`mfukit.perf.measured_runs`, one source per
  ``source_group`` (the Megatron-stack file of shared/reference is reserved for checking the model: never
  fitted).

Every source is fitted (:mod:`mfukit.perf.calibrate`); accuracy is measured leave-one-source-out.
"""

from __future__ import annotations

import csv
import hashlib
import math
import os
import re
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Literal

from mfukit import catalog
from mfukit.core.hardware import Accelerator, System
from mfukit.core.model import ModelSpec
from mfukit.core.parallelism import Parallelism
from mfukit.core.scenario import Precision
from mfukit.errors import InputError
from mfukit.perf import flops
from mfukit.perf.layouts import Workload
from mfukit.perf.measured_runs import Accounting, Case, read_runs

SOURCES = ("llmfoundry_mpt", "vtrain_multi", "vtrain_single", "ultrascale_playbook", "torchtitan")
FILES = ("published_runs_calibration.csv", "ultrascale_h100_sweep.csv", "vtrain_a100_single_node.csv")
# files in the plain schema (mfukit.perf.measured_runs), one source per source_group: the runs gathered from
# papers and vendor tables; used when present. The Megatron-stack file of shared/reference holds rows of a
# source reserved for checking the model, so it is never fitted (tests/data/perf keeps it for the reader's tests)
SCHEMA_FILES = ("gathered_runs.csv",)
# Sources a hidden check holds out (the performance-model issue: Narayanan et al. SC21 and the Megatron-LM
# README's 2021 GPT-3 figure, MT-NLG 530B, MegaScale, the Llama 3 paper, MLPerf Training, the Nemotron-4
# reports, GLM-130B, the PyTorch FSDP paper, TinyLlama, FlashAttention's training README, NVIDIA's DGX Cloud
# recipes): a schema row whose text names one is neither fitted nor tested on. Korthikanti et al.'s 530B
# runs train MT-NLG's model, so they are left out with them.
HELD_OUT_SOURCES = (
    "narayanan",
    "sc21",
    "efficient large-scale language model training on gpu clusters",
    "mt-nlg",
    "megatron-turing",
    "530b",
    "megascale",
    "llama 3 herd",
    "herd of models",
    "mlperf",
    "mlcommons",
    "nemotron-4",
    "nemotron 4",
    "nemotron",
    "glm-130b",
    "pytorch fsdp: experiences",
    "vldb",
    "tinyllama",
    "flash-attention/training",
    "flashattention",
    "dgx cloud",
    "dgxc",
)
SOURCE_TEXT_COLUMNS = ("source", "source_detail", "source_group", "model_name", "notes")


REPOSITORY_DATA = Path(__file__).resolve().parents[3] / "benchmarks" / "data" / "calibration"


def calibration_dir() -> Path:
    """``$MFUKIT_CALIBRATION``, else ``benchmarks/data/calibration`` of this checkout."""
    folder = Path(os.environ.get("MFUKIT_CALIBRATION", REPOSITORY_DATA))
    if not all((folder / name).is_file() for name in FILES):
        raise InputError(
            f"cannot find the calibration data in {folder}",
            field="MFUKIT_CALIBRATION",
            hint="run from a checkout of mfukit (benchmarks/data/calibration), or set MFUKIT_CALIBRATION to "
            "the folder holding " + ", ".join(FILES),
        )
    return folder


def data_files(folder: Path) -> list[str]:
    return [*FILES, *(name for name in SCHEMA_FILES if (folder / name).is_file())]


def file_digests(folder: Path) -> dict[str, str]:
    return {name: hashlib.sha256((folder / name).read_bytes()).hexdigest() for name in data_files(folder)}


def _rows(path: Path) -> Iterator[dict[str, str]]:
    with path.open(newline="") as handle:
        yield from csv.DictReader(handle)


def _ints(row: dict[str, str], *names: str) -> list[int]:
    return [int(float(row[name])) for name in names]


def _system(name: str) -> tuple[System, Accelerator]:
    system = catalog.system(name)
    return system, catalog.accelerator(system.accelerator)


def nanotron_stage_layers(model: ModelSpec, pp: int) -> list[int]:
    """Layers per pipeline rank as nanotron splits them: blocks (the layers at 4h² + 3hf each, then the output
    layer at V·h) are walked in order and rank r closes after the block whose cumulative cost passes
    (r + 1)/pp of the total (``get_block_compute_costs`` and the pipeline engine's split)."""
    h, f, v = model.hidden_size, model.intermediate_size, model.vocab_size
    costs = [4 * h * h + 3 * h * f] * model.num_hidden_layers + [v * h]
    total = sum(costs)
    counts = [0] * pp
    rank, cumulative = 0, 0
    for index, cost in enumerate(costs):
        cumulative += cost
        if index < model.num_hidden_layers:
            counts[rank] += 1
        if cumulative > (rank + 1) * total / pp and rank < pp - 1:
            rank += 1
    return counts


def _even(model: ModelSpec, layout: Parallelism) -> tuple[int, int]:
    per_stage = model.num_hidden_layers // layout.pp
    return per_stage, per_stage


def _case(
    row: dict[str, str],
    source: str,
    model: ModelSpec,
    layout: Parallelism,
    *,
    precision: Precision,
    micro_batch: int,
    microbatches: int,
    machine: tuple[System, Accelerator],
    accounting: Accounting,
    framework: str,
    flash: bool = True,
    dropout: bool = False,
    split: tuple[int, int] | None = None,
) -> Case:
    first, last = split or (
        (layout.first_stage_layers or model.num_hidden_layers // layout.pp),
        (layout.last_stage_layers or model.num_hidden_layers // layout.pp),
    )
    system, accelerator = machine
    return Case(
        source=source,
        row_id=int(row["row_id"]),
        label=row["model_name"],
        workload=Workload(
            model=model,
            seq_len=int(row["seq_len"]),
            global_batch_sequences=layout.dp * micro_batch * microbatches,
            precision=precision,
            flash_attention=flash,
            attention_dropout=dropout,
            hidden_dropout=dropout,
            framework=framework,
        ),
        layout=layout,
        micro_batch_size=micro_batch,
        num_microbatches=microbatches,
        first_layers=first,
        last_layers=last,
        system=system,
        accelerator=accelerator,
        num_gpus=layout.world_size,
        measured_tokens_per_s_per_gpu=float(row["tokens_per_sec_per_gpu"]),
        accounting=accounting,
    )


def _gpt(row: dict[str, str], *, mlp: Literal["gelu", "swiglu"] = "gelu", alibi: bool = False) -> ModelSpec:
    layers, hidden, heads, ffn, vocab = _ints(row, "n_layers", "hidden", "n_heads", "ffn_hidden", "vocab")
    return ModelSpec(
        name=row["model_name"],
        num_hidden_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        intermediate_size=ffn,
        vocab_size=vocab,
        mlp=mlp,
        norm="layernorm",
        tie_word_embeddings=True,
        position_embedding="alibi" if alibi else "learned",
        attention_bias=not alibi,
        mlp_bias=not alibi,
        max_position_embeddings=int(row["seq_len"]),
    )


_MPT_SYSTEMS = {
    "A100-SXM4-40GB": "dgx-a100-40gb",
    "A100-SXM4-80GB": "dgx-a100-80gb",
    "H100-SXM5-80GB": "dgx-h100",
}


def mpt_cases(folder: Path) -> Iterator[Case]:
    for row in _rows(folder / "published_runs_calibration.csv"):
        if row["source_group"] != "llmfoundry_mpt":
            continue
        found = re.search(r"Grad accum (\d+)", row["notes"])
        accumulation = int(found.group(1)) if found else 1
        zero2 = "SHARD_GRAD_OP" in row["zero_stage_or_fsdp"]
        layout = Parallelism(
            dp=int(row["n_gpus"]),
            recompute="full" if row["activation_recompute"] == "full" else "none",
            **({"zero": 2} if zero2 else {"fsdp": "full"}),
        )
        yield _case(
            row,
            "llmfoundry_mpt",
            _gpt(row, alibi=True),
            layout,
            precision="fp8" if "fp8" in row["precision"] else "bf16",
            micro_batch=int(row["micro_batch"]),
            microbatches=accumulation,
            machine=_system(_MPT_SYSTEMS[row["gpu_type"]]),
            accounting="model",
            framework="fsdp",
        )


def _vtrain(row: dict[str, str], source: str) -> Case:
    tp, pp, dp = _ints(row, "tp", "pp", "dp")
    micro, batch = _ints(row, "micro_batch", "global_batch_sequences")
    layout = Parallelism(tp=tp, pp=pp, dp=dp, recompute="full")
    model = _gpt(row)
    return _case(
        row,
        source,
        model,
        layout,
        precision="fp16",
        micro_batch=micro,
        microbatches=batch // (dp * micro),
        machine=_system("vtrain-a100-cluster"),  # 800 Gb/s per node: two GPUs per 200 Gb/s NIC
        accounting="hardware",
        framework="megatron-deepspeed",
        flash=False,
        # vTrain publishes no launch scripts; its runs are Megatron-DeepSpeed's (data/README.md), whose
        # --attention-dropout and --hidden-dropout default to 0.1, as vTrain's own profiled GPT sets them
        # (src/model/gpt_model.py, VIA-Research/vTrain @f8dda847)
        dropout=True,
        split=_even(model, layout),
    )


def vtrain_multi_cases(folder: Path) -> Iterator[Case]:
    for row in _rows(folder / "published_runs_calibration.csv"):
        if row["source_group"] == "vtrain_multi":
            yield _vtrain(row, "vtrain_multi")


def vtrain_single_cases(folder: Path) -> Iterator[Case]:
    for row in _rows(folder / "vtrain_a100_single_node.csv"):
        yield _vtrain(row, "vtrain_single")


def ultrascale_model(row: dict[str, str]) -> ModelSpec:
    layers, hidden, heads, kv, ffn, vocab = _ints(
        row, "n_layers", "hidden", "n_heads", "n_kv_heads", "ffn_hidden", "vocab"
    )
    return ModelSpec(
        name=row["model_name"],
        num_hidden_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        intermediate_size=ffn,
        vocab_size=vocab,
        mlp="swiglu",
        tie_word_embeddings=ffn < 10_000,  # nanotron scripts/scaling_benchmarks.py
    )


def ultrascale_cases(folder: Path) -> Iterator[Case]:
    for row in _rows(folder / "ultrascale_h100_sweep.csv"):
        if row["measured_mfu_pct"] in ("", "nan") or not float(row["measured_mfu_pct"]) > 0:
            continue  # the run did not complete
        found = re.search(r"grad_accum=(\d+)", row["notes"])
        tp, pp, dp = _ints(row, "tp", "pp", "dp")
        micro = int(row["micro_batch"])
        accumulation = int(found.group(1)) if found else int(row["global_batch_sequences"]) // (dp * micro)
        layout = Parallelism(
            tp=tp,
            pp=pp,
            dp=dp,
            sequence_parallel=tp > 1,
            zero=1 if row["zero_stage_or_fsdp"] == "ZeRO-1" else 0,
        )
        model = ultrascale_model(row)
        counts = nanotron_stage_layers(model, pp)
        yield _case(
            row,
            "ultrascale_playbook",
            model,
            layout,
            precision="bf16",
            micro_batch=micro,
            microbatches=accumulation,
            machine=_system("p5-48xlarge"),  # AWS p5 (EFA), where the sweep ran
            accounting="model",
            framework="nanotron",
            split=(counts[0], counts[-1]),
        )


_TITAN_MODELS = {
    "Llama 3.1 8B": "llama3.1-8b",
    "Llama 3.1 70B": "llama3.1-70b",
    "Llama 3.1 405B": "llama3.1-405b",
}


# torchtitan's benchmark tables that ran every row with torch.compile (their headers, and the async-TP
# note's commands, which all pass --training.compile); Tables 1 and 3 name it per row
_TITAN_COMPILED = ("Table 2", "Table 4", "Table 5", "Table 6", "asyncTP_")
_TITAN_ASYNC_TP = ("Table 5", "Table 6")  # "+ AsyncTP" in their headers; other rows name it in their notes


def torchtitan_cases(folder: Path) -> Iterator[Case]:
    for row in _rows(folder / "published_runs_calibration.csv"):
        if row["source_group"] != "torchtitan":
            continue
        tp, pp, dp, cp = _ints(row, "tp", "pp", "dp", "cp")
        local = int(row["micro_batch"])
        detail, notes = row["source_detail"], row["notes"].lower()
        compiled = "compile" in notes or any(table in detail for table in _TITAN_COMPILED)
        async_tp = "asynctp" in notes.replace(" ", "") or any(table in detail for table in _TITAN_ASYNC_TP)
        model = catalog.model(_TITAN_MODELS[row["model_name"]])
        uneven: dict[str, int] = {}
        if model.num_hidden_layers % pp:  # 126 layers on 8 stages: 15 + 6 x 16 + 15
            edge = math.ceil(model.num_hidden_layers / pp) - 1
            uneven = {"first_stage_layers": edge, "last_stage_layers": edge}
        layout = Parallelism(
            tp=tp,
            pp=pp,
            dp=dp,
            cp=cp,
            sequence_parallel=tp > 1,
            recompute="full" if row["activation_recompute"] == "full" else "selective",
            fsdp="full",
            # looped schedules build two stages per rank unless told otherwise (torchtitan's
            # generate_split_points: num_stages_per_rank = 2 for PipelineScheduleMulti)
            vpp=2 if "Interleaved" in row["notes"] else 1,
            **uneven,
        )
        # torchtitan's "local batch" is per DP rank; with PP it is split into as many micro-batches as there are
        # pipeline stages (pipelining_utils.build_pipeline_schedule: pipeline_parallel_microbatches defaults to
        # pp x stages per rank), so 1F1B on 8 ranks runs 8 micro-batches and the looped schedule 16.
        microbatches = pp * layout.vpp if pp > 1 else 1
        case = _case(
            row,
            "torchtitan",
            model,
            layout,
            precision="fp8" if "fp8" in row["precision"] else "bf16",
            micro_batch=local // microbatches,
            microbatches=microbatches,
            machine=_system("grand-teton-h100"),  # 96 GB HBM2e at 500 W
            accounting="model",
            framework="torchtitan",
        )
        yield replace(case, workload=replace(case.workload, compile=compiled, tp_comm_overlap=async_tp))


# Sources that one publisher's pages or one code base share (releases of NeMo's performance tables, the
# BigScience runs, torchtitan and the benchmarks built on it, vTrain's two sets): a leave-one-source-out fold
# holds them out together, so a held-out page is never predicted from its sibling's rows.
SOURCE_FAMILIES = (
    ("vtrain_", "vtrain"),
    ("nemo_", "nemo"),
    ("bigscience_", "bigscience"),
    ("torchtitan", "torchtitan"),
    ("torchao_", "torchtitan"),
)


def source_family(source: str) -> str:
    """The fold a source is held out in (itself, unless it shares a publisher with others)."""
    return next((family for prefix, family in SOURCE_FAMILIES if source.startswith(prefix)), source)


def held_out_source(row: dict[str, str]) -> str | None:
    """The held-out source a row's text names (:data:`HELD_OUT_SOURCES`), or None."""
    text = " ".join(row.get(column) or "" for column in SOURCE_TEXT_COLUMNS).lower()
    return next((word for word in HELD_OUT_SOURCES if word in text), None)


def schema_cases(folder: Path) -> list[Case]:
    """The rows of the plain-schema files that give a layout and a measurement (each source_group a source),
    less the rows that name a held-out source."""
    cases: list[Case] = []
    for name in SCHEMA_FILES:
        if (folder / name).is_file():
            held = {int(row["row_id"]) for row in _rows(folder / name) if held_out_source(row)}
            cases += [case for case in read_runs(folder / name)[0] if case.row_id not in held]
    return cases


def load_cases(folder: Path | None = None, sources: tuple[str, ...] | None = None) -> list[Case]:
    """Every usable row of the calibration data, in source order (``sources``: only those)."""
    where = folder or calibration_dir()
    readers = {
        "llmfoundry_mpt": mpt_cases,
        "vtrain_multi": vtrain_multi_cases,
        "vtrain_single": vtrain_single_cases,
        "ultrascale_playbook": ultrascale_cases,
        "torchtitan": torchtitan_cases,
    }
    cases = [case for source in SOURCES for case in readers[source](where)] + schema_cases(where)
    return [case for case in cases if sources is None or case.source in sources]


SIXTEEN_BIT = ("bf16", "fp16")  # the same tensor-core peak on every catalog GPU


def mfu_at(case: Case, tokens_per_s_per_gpu: float) -> float:
    """MFU of ``tokens_per_s_per_gpu`` on the case's model: x model FLOPs per token (full s^2 attention,
    mfukit's default convention) over the dense peak of its precision."""
    workload = case.workload
    per_token = flops.model_flops_per_token(workload.model, workload.seq_len, "full")
    return tokens_per_s_per_gpu * per_token / case.accelerator.peak_flops(workload.precision)


def measured_mfu(case: Case) -> float:
    """The MFU a run measured (:func:`mfu_at` of its tokens/s per GPU)."""
    return mfu_at(case, case.measured_tokens_per_s_per_gpu)


def highest_measured_mfu(cases: list[Case], accelerators: list[str]) -> tuple[float, str] | None:
    """The highest 16-bit (bf16/fp16) MFU measured on any of ``accelerators`` in ``cases`` (fitted or not: a
    measurement bounds what the hardware was seen to do) and the run, named; None when no run used them."""
    runs = [c for c in cases if c.accelerator.name in accelerators and c.workload.precision in SIXTEEN_BIT]
    if not runs:
        return None
    best = max(runs, key=measured_mfu)
    layout = best.layout
    return measured_mfu(best), (
        f"{best.source} row {best.row_id}: {best.label} on {best.num_gpus:,} x {best.accelerator.name}, "
        f"TP {layout.tp} PP {layout.pp} DP {layout.dp}, recompute {layout.recompute}"
    )
