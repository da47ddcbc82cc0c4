"""Build ``gathered_runs.csv``: measured training runs gathered from public sources, in the column schema of
``megatron_published_runs.csv`` plus six trailing columns (``framework``, ``attention``, ``offload``,
``system``, ``compile``, ``tp_comm_overlap``).

Every measured figure below is what its source printed (``reported_fields`` names them); the derived columns
(tokens/s from step time or the reverse, totals, model FLOPs per token 6N + 12·L·h·s, MFU against the dense
peak) are computed here so that they cannot drift from the inputs. ``python
benchmarks/data/calibration/build_gathered_runs.py`` rewrites the CSV next to this file;
``tests/unit/test_gathered_runs.py`` checks that the committed CSV is what this script writes.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from mfukit.perf.measured_runs import OPTIONAL_COLUMNS

HERE = Path(__file__).resolve().parent
OUTPUT = HERE / "gathered_runs.csv"

# The shared schema is the header of megatron_published_runs.csv (perf-model.md section 2).
with (HERE.parents[2] / "tests" / "data" / "perf" / "megatron_published_runs.csv").open(
    newline=""
) as _handle:
    SCHEMA = next(csv.reader(_handle))
HEADER = SCHEMA + list(OPTIONAL_COLUMNS)  # the reader's optional columns, in its order

# Dense peaks per GPU in TFLOP/s (perf-model.md section 2 conventions).
# Blackwell: the catalog's dense peaks (src/mfukit/catalog/data/accelerators/b200.toml, gb200.toml).
BF16_PEAK_TFLOPS = {
    "A100": 312.0,
    "H100": 989.0,
    "H200": 989.0,
    "B200": 2250.0,
    "GB200": 2500.0,
    "MI300X": 1307.4,
    "A800": 312.0,
    "H800": 989.0,
}
FP8_PEAK_TFLOPS = {
    "H800": 1979.0,
    "H100": 1979.0,
    "H200": 1979.0,
    "B200": 4500.0,
    "GB200": 5000.0,
    "MI300X": 2614.9,
}

A100_80 = "A100-SXM4-80GB"
A100_40 = "A100-SXM4-40GB"
H100 = "H100-SXM5-80GB"
H100_TITAN = "H100-SXM-96GB-HBM2e (500W cap)"
# the catalog node of a GPU type the schema's GPU_SYSTEMS would map to another part (the reader takes "H100" for a
# DGX H100): torchtitan's Grand Teton hosts, 96 GB HBM2e at 2.4 TB/s and a 500 W power limit
SYSTEMS = {H100_TITAN: "grand-teton-h100", "A800-SXM4-80GB": "dgx-a800"}
H200 = "H200-SXM-141GB"
B200 = "B200-SXM-180GB (DGX-B200)"
GB200 = "GB200 (DGX-GB200, NVL72)"
H100_UNSTATED = "H100 (variant not stated)"
MI300X = "MI300X-192GB"
A800 = "A800-SXM4-80GB"
H800 = "H800-SXM5-80GB"


@dataclass(frozen=True)
class Shape:
    name: str
    n_params: float
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    inferred: str  # how the shape was obtained, goes to inferred_fields


def _gpt_params(layers: int, hidden: int, vocab: int, seq: int) -> float:
    """GPT with a 4h GeLU MLP, learned positions, untied counting of nothing: L(12h² + 13h) + V·h + s·h."""
    return float(layers * (12 * hidden**2 + 13 * hidden) + vocab * hidden + seq * hidden)


def _bloom_params(layers: int, hidden: int, vocab: int) -> float:
    """BigScience's own count (tr11 README): L(12h² + 13h) + V·h (ALiBi, no position table)."""
    return float(layers * (12 * hidden**2 + 13 * hidden) + vocab * hidden)


NEMO_GPT = (
    "arch from NeMo GPTConfig5B/20B/175B (nemo/collections/llm/gpt/model/base.py); vocab 50257 (GPT-2 BPE)"
)
LLAMA = "arch (public Llama configs)"
SHAPES = {
    "gpt3_5b": Shape(
        "GPT3-5B (NeMo)", _gpt_params(24, 4096, 50257, 2048), 24, 4096, 32, 32, 16384, 50257, NEMO_GPT
    ),
    "gpt3_20b": Shape(
        "GPT3-20B (NeMo)", _gpt_params(44, 6144, 50257, 2048), 44, 6144, 48, 48, 24576, 50257, NEMO_GPT
    ),
    "gpt3_175b": Shape(
        "GPT3-175B (NeMo)", _gpt_params(96, 12288, 50257, 2048), 96, 12288, 96, 96, 49152, 50257, NEMO_GPT
    ),
    "llama2_7b": Shape("Llama 2 7B", 6738415616.0, 32, 4096, 32, 32, 11008, 32000, LLAMA),
    "llama2_13b": Shape("Llama 2 13B", 13015864320.0, 40, 5120, 40, 40, 13824, 32000, LLAMA),
    "llama2_70b": Shape("Llama 2 70B", 68976648192.0, 80, 8192, 64, 8, 28672, 32000, LLAMA),
    "llama3_8b": Shape("Llama 3 8B", 8030261248.0, 32, 4096, 32, 8, 14336, 128256, LLAMA),
    "llama3_70b": Shape("Llama 3 70B", 70553706496.0, 80, 8192, 64, 8, 28672, 128256, LLAMA),
    "llama31_8b": Shape("Llama 3.1 8B", 8030000000.0, 32, 4096, 32, 8, 14336, 128256, LLAMA),
    "llama31_70b": Shape("Llama 3.1 70B", 70600000000.0, 80, 8192, 64, 8, 28672, 128256, LLAMA),
    "llama31_405b": Shape("Llama 3.1 405B", 405900000000.0, 126, 16384, 128, 8, 53248, 128256, LLAMA),
    "llama2_34b": Shape(
        "Llama 2 34B (FMS)",
        33743970304.0,
        48,
        8192,
        64,
        8,
        22016,
        32000,
        "arch (Code Llama 34B public config)",
    ),
    "bloom_176b": Shape(
        "BLOOM 176B",
        176247271424.0,
        70,
        14336,
        112,
        112,
        57344,
        250880,
        "vocab 250880 (padded, published BLOOM config)",
    ),
    "gptneox_20b": Shape(
        "GPT-NeoX-20B",
        20556201984.0,
        44,
        6144,
        64,
        64,
        24576,
        50432,
        "vocab 50432 (padded; model card); ffn 24576 (model card)",
    ),
    "opt_175b": Shape(
        "OPT-175B",
        _gpt_params(96, 12288, 50272, 2048),
        96,
        12288,
        96,
        96,
        49152,
        50272,
        "vocab 50272 (HF OPT config)",
    ),
}


# OLMo-core's model configs (src/olmo_core/nn/transformer/config.py, or model.py where config.py did not exist
# yet, at the commit each README figure was first printed): llama_like SwiGLU blocks, no biases, untied output layer, RMSNorm; FFN width int(8d/3) (x1.3 for
# the Llama 3 8B) rounded up to a multiple of 256 (1024); vocabulary the dolma2 tokenizer's 100,278 padded to
# a multiple of 128. n_params is every parameter the built model holds (embedding, blocks with their QK norms,
# final norm, output layer).
OLMO_CORE_VOCAB = -(-100278 // 128) * 128  # 100352: dolma2's 100,278 tokens padded to a multiple of 128


def _olmo_core_params(layers: int, hidden: int, heads: int, kv_heads: int, ffn: int, qk_norm: bool) -> float:
    kv = kv_heads * (hidden // heads)
    block = 2 * hidden * hidden + 2 * hidden * kv + 3 * hidden * ffn + 2 * hidden
    block += (hidden + kv) if qk_norm else 0
    return float(2 * OLMO_CORE_VOCAB * hidden + layers * block + hidden)


OLMO_CORE_ARCH = (
    "arch from OLMo-core TransformerConfig.{preset} (src/olmo_core/nn/transformer/config.py; model.py at "
    "8c03ca8a2): {what}; "
    f"vocab {OLMO_CORE_VOCAB} (dolma2 100,278 padded to 128, TokenizerConfig.padded_vocab_size)"
)
for _key, _name, _preset, _layers, _hidden, _heads, _kv_heads, _ffn, _qk_norm in (
    ("olmo_core_1b", "OLMo-1124 1B (OLMo-core olmo_1B, 18 layers)", "olmo_1B", 18, 2048, 16, 16, 5632, True),
    ("olmo_core_7b", "OLMo-1124 7B (OLMo-core olmo_7B)", "olmo_7B", 32, 4096, 32, 32, 11008, True),
    ("olmo_core_llama3_8b", "Llama 3 8B shape (OLMo-core llama3_8B, dolma2 vocab)", "llama3_8B", 32, 4096, 32, 8,
     14336, False),
    ("olmo_core_13b", "OLMo-1124 13B (OLMo-core olmo_13B)", "olmo_13B", 40, 5120, 40, 40, 13824, True),
):  # fmt: skip
    _base = f"{_preset.replace('olmo', 'llama2')} (d {_hidden}, {_layers} layers, {_heads} heads, ffn {_ffn})"
    SHAPES[_key] = Shape(
        _name,
        _olmo_core_params(_layers, _hidden, _heads, _kv_heads, _ffn, _qk_norm),
        _layers,
        _hidden,
        _heads,
        _kv_heads,
        _ffn,
        OLMO_CORE_VOCAB,
        OLMO_CORE_ARCH.format(
            preset=_preset,
            what=f"{_base} with reordered norm and QK norm"
            if _qk_norm
            else f"d {_hidden}, {_layers} layers, {_heads} heads, {_kv_heads} KV heads, ffn {_ffn}, no QK norm",
        ),
    )
# Zero Bubble (Qi et al. 2024) Table 3: GPT-style shapes trained by sail-sg's Megatron-LM fork. Layers, heads and
# hidden are printed; ffn is Megatron's default 4h (the launch script passes no --ffn-hidden-size; the paper's
# section 2.3 analyses the same 4h); the vocabulary is not printed (see ZB_SHAPE).
ZB_VOCAB, ZB_POSITIONS = 32000, 2048  # inferred (ZB_SHAPE says why); the script's --max-position-embeddings
ZB_SHAPE = (
    "layers/heads/hidden printed (Table 3); ffn 4h (Megatron default, no --ffn-hidden-size in "
    f"examples/pretrain_zero_bubble.sh); vocab {ZB_VOCAB} inferred: not printed; the printed sizes 1.5B/6.2B/14.6B/28.3B "
    "with Megatron's tied embeddings bound it to ~24.5K-32.4K (GPT-2's 50257 would give 6.3B/14.7B) and the "
    "example script runs a SentencePiece tokenizer (GPTSentencePieceTokenizer); n_params L(12h^2+13h)+V*h+P*h "
    f"with the script's --max-position-embeddings P = {ZB_POSITIONS}"
)
for _key, _name, _layers, _hidden, _heads in (
    ("zb_1p5b", "GPT 1.5B (Zero Bubble paper)", 22, 2304, 24),
    ("zb_6p2b", "GPT 6.2B (Zero Bubble paper)", 30, 4096, 32),
    ("zb_14p6b", "GPT 14.6B (Zero Bubble paper)", 46, 5120, 40),
    ("zb_28p3b", "GPT 28.3B (Zero Bubble paper)", 62, 6144, 48),
):
    SHAPES[_key] = Shape(
        _name,
        _gpt_params(_layers, _hidden, ZB_VOCAB, ZB_POSITIONS),
        _layers,
        _hidden,
        _heads,
        _heads,
        4 * _hidden,
        ZB_VOCAB,
        ZB_SHAPE,
    )

PREQUEL_SHAPE = (
    "vocab 250880 (prequel says 250k; tr11 padded size assumed); ffn=4h; n_params from BigScience's "
    "L(12h^2+13h)+V*h formula, matching the table's Size column"
)


def bloom_variant(hidden: int, layers: int) -> Shape:
    """The tr11 prequel's trial shapes: NHIDDEN/NLAYERS as printed, NHEADS=64 ('all NHEADS=64 (above too)')."""
    params = _bloom_params(layers, hidden, 250880)
    return Shape(
        f"BLOOM-style {params / 1e9:.0f}B (h{hidden}, {layers}L)",
        params,
        layers,
        hidden,
        64,
        64,
        4 * hidden,
        250880,
        PREQUEL_SHAPE,
    )


@dataclass(frozen=True)
class Source:
    source: str
    detail: str
    group: str
    framework: str
    attention: str
    compile: bool | None = None  # torch.compile as the source states it for every row (None: not stated)
    system: str = ""  # the catalog node every row ran on, where the source names its cluster
    # (attention, hidden) dropout probabilities of the run's script or config, and where they are set; the
    # columns stay blank (no dropout) where the source's setup does not say
    dropout: tuple[float, float] | None = None
    dropout_from: str = ""


NEMO_2407 = Source(
    "NVIDIA NeMo docs/source/performance/performance_summary.md (NeMo 24.07 container, DGX-H100, FP8)",
    "Pretraining table (file at commit 8e3d65dcfe, 2024-09-09)",
    "nemo_perf_summary_2407",
    "nemo",
    "flash",
)
NEMO_2407_SFT = Source(
    NEMO_2407.source,
    "Finetuning table, SFT rows, SQuAD packed to 4096 tokens (file at commit 8e3d65dcfe, 2024-09-09)",
    "nemo_perf_summary_2407",
    "nemo",
    "flash",
)
NEMO_LONGSEQ = Source(
    "NVIDIA NeMo docs/source/performance/performance_long_sequence.md (NeMo 24.03.01 container, DGX-H100)",
    "LLAMA2-7B (FP8) - H100 table, 'With CP' columns (file at commit 19fadb67b0, 2025-05-09)",
    "nemo_long_sequence_h100",
    "nemo",
    "flash",
)
BRIDGE_260401 = Source(
    "NVIDIA NeMo Megatron-Bridge docs/performance-summary-archive.md",
    "26.04.01 NeMo container, Pre-Training, LLAMA3_70B, DGX-H100 row (section added 2026-05-16, commit 17a381f95)",
    "nemo_megatron_bridge",
    "nemo",
    "flash",
)
BRIDGE_2606 = Source(
    "NVIDIA NeMo Megatron-Bridge docs/performance-summary-archive.md",
    "26.06 NeMo container, Pre-Training, LLAMA3.1_405B, DGX-H100 row (section added 2026-06-15, commit 63b08b397)",
    "nemo_megatron_bridge",
    "nemo",
    "flash",
)
BRIDGE_2606_SFT = Source(
    "NVIDIA NeMo Megatron-Bridge docs/performance-summary-archive.md",
    "26.06 NeMo container, SFT Performance, LLAMA3_70B, DGX-H100 row (section added 2026-06-15, commit 63b08b397)",
    "nemo_megatron_bridge",
    "nemo",
    "flash",
)
TITAN_ASYNC = Source(
    "PyTorch torchtitan repository benchmarks (Liang et al. 2024/2025 torchtitan paper companion)",
    "benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md (float8 rows; committed 2025-06-16)",
    "torchtitan",
    "torchtitan",
    "flash",
    compile=True,
)
TITAN_H200 = Source(
    "PyTorch torchtitan repository benchmarks, run by the Trainy team on WhiteFiber",
    "benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md Results table (committed 2025-07-11)",
    "torchtitan_h200_trainy",
    "torchtitan",
    "flash",
    compile=True,
)
# torchtitan's first performance page: FSDP2 (1D) on 64 A100 80GB, Llama 2 and Llama 3 at several activation
# checkpointing modes. The A100 numbers are the same in every version of docs/performance.md that prints them:
# Llama 2 from 395a526 (2024-04-18) until 4d88a8a (2024-12-03) removed it, Llama 3 from 1ea476e (2024-04-24)
# until d4c86e3 (2025-01-30) replaced the page with the H100 benchmarks.
TITAN_A100 = Source(
    "PyTorch torchtitan repository docs/performance.md (FSDP2 1D on 64 A100 80GB)",
    "",  # per row: which table
    "torchtitan_a100_2024",
    "torchtitan",
    "flash",
)
BLOOM_PREQUEL = Source(
    "BigScience bigscience-workshop/bigscience train/tr11-176B-ml/chronicles-prequel.md (Megatron-DeepSpeed, "
    "Jean Zay A100 80GB)",
    "",  # per row: section and date of the table
    "bigscience_tr11_prequel",
    "megatron-deepspeed",
    "eager",
    system="jean-zay-a100",  # BLOOM paper §3.4.1: 4 x Omni-Path 100 Gb/s per node
    dropout=(0.1, 0.1),
    dropout_from="no tr11 smaller-model script sets it: bigscience-workshop/Megatron-DeepSpeed's default 0.1",
)
BLOOM_MAIN = Source(
    "BigScience bigscience-workshop/bigscience train/tr11-176B-ml/README.md (BLOOM 176B training, "
    "Megatron-DeepSpeed)",
    "Replica setup + Architecture + the iteration 85376 log line (README at commit 00327f8, 2022-07-04)",
    "bigscience_bloom_tr11",
    "megatron-deepspeed",
    "eager",
    system="jean-zay-a100",
    dropout=(0.1, 0.1),
    dropout_from="tr11-176B-ml/README.md: the default Megatron-LM dropout settings are inherited, 0.1 and 0.1",
)
OPT = Source(
    "Zhang et al. 2022, OPT: Open Pre-trained Transformer Language Models (arXiv 2205.01068)",
    "Section 2.4 Training Efficiency + Table 1 (175B row); layout from facebookresearch/metaseq "
    "projects/OPT/download_opt175b.md (124 hosts, 8x tensor parallelism)",
    "opt175b_paper",
    "fsdp",
    "eager",
    dropout=(0.1, 0.1),
    dropout_from="metaseq launcher/opt_baselines.py: --dropout 0.1 --attention-dropout 0.1 --no-emb-dropout",
)
NEOX = Source(
    "Black et al. 2022, GPT-NeoX-20B: An Open-Source Autoregressive Language Model (arXiv 2204.06745)",
    "Section 3 Training (cluster, batch, TFLOP/s per GPU); layout from EleutherAI/gpt-neox configs/20B.yml",
    "gptneox20b_paper",
    "megatron-deepspeed",
    "eager",
    system="neox-a100-40gb",  # the paper's hardware: four ConnectX-6 HDR HCAs per 8-GPU server
    dropout=(0.0, 0.0),
    dropout_from="configs/20B.yml at release commit c560814b: hidden-dropout 0, attention-dropout 0",
)

FMS = Source(
    "IBM foundation-model-stack/fms-fsdp README, Training throughput benchmarks (PyTorch FSDP + SDPA)",
    "throughput and MFU/HFU tables (throughput numbers at commit 3b1ce15, 2024-05-09)",
    "ibm_fms_fsdp",
    "fsdp",
    "flash",
    compile=True,
)
FMS_RUN = Source(
    FMS.source,
    "Training > Model: the Llama2-7B replica trained to 2.2T tokens (README at commit 3b1ce15, 2024-05-09)",
    "ibm_fms_fsdp",
    "fsdp",
    "flash",
)

AUTOMODEL = Source(
    "NVIDIA NeMo AutoModel docs/performance-summary.mdx (PyTorch FSDP2 backend, DGX-H100, BF16)",
    "Pre-Training Performance table, Llama3 70B row (row added 2026-04-10, commit 2013a4dd6)",
    "nemo_automodel_h100",
    "fsdp",
    "flash",
    compile=True,
)
DEEPCOMPILE = Source(
    "DeepSpeed blog blogs/deepcompile/README.md (DeepCompile, 2025-04) with scripts in DeepSpeedExamples "
    "benchmarks/deepcompile",
    "",  # per row: which figure
    "deepspeed_deepcompile_blog",
    "deepspeed",
    "flash",
)


# BAAI FlagPerf (FlagOpen/FlagPerf): vendor-neutral training benchmarks; its NVIDIA results, each case a README
# (results table) beside the config and launch script that ran it.
FLAGPERF = "BAAI FlagPerf (FlagOpen/FlagPerf), NVIDIA training cases"
FLAGPERF_MCORE = Source(
    FLAGPERF + " (Megatron-LM core_v0.6.0 on NGC PyTorch 24.02)",
    "",  # per row: which case README
    "baai_flagperf",
    "megatron-core",
    "flash",
)
FLAGPERF_MEGATRON_DS = Source(
    FLAGPERF + " (Megatron-DeepSpeed, DeepSpeed 0.11.1)",
    "training/nvidia/llama2_7b-megatron-deepspeed/README.md results table (2024-02-07, commit d1a078e0); "
    "ds_config.json and training/benchmarks/llama2_7b/megatron-deepspeed/megatron-deepspeed_main.sh",
    "baai_flagperf",
    "megatron-deepspeed",
    "flash",
)
FLAGPERF_ZERO3 = Source(
    FLAGPERF + " (Hugging Face LlamaForCausalLM on DeepSpeed 0.11.1 ZeRO-3)",
    "training/nvidia/llama2_7b-deepspeed/README.md results tables (2023-12-25, commit 6035339a); "
    "training/benchmarks/llama2_7b/deepspeed/ds_config.json and run_pretraining.py",
    "baai_flagperf",
    "deepspeed",
    "flash",
)


def deepcompile_flops_per_token(seq: int) -> float:
    """FLOPs per token that DeepSpeedExamples benchmarks/deepcompile/plot_common.py counts for its Llama-3-70B
    entry (h 8192, 64 heads, 8 KV heads -> GQA term 2 // 8 = 0, ffn 32768 SwiGLU, vocab 32000, 80 layers) with
    activation checkpointing on (one extra forward): 2 x 4 x forward MACs."""
    hidden, heads, layers, ffn, vocab = 8192, 64, 80, 32768, 32000
    head_dim = hidden // heads
    per_layer = (1 + 2 // 8 + 1) * hidden**2 + 2 * head_dim * heads * seq + 3 * ffn * hidden
    forward_macs = layers * per_layer + vocab * hidden
    return float(2 * 4 * forward_macs)


BRIDGE_ARCHIVE = Source(
    "NVIDIA NeMo Megatron-Bridge docs/performance-summary-archive.md",
    "",  # per row: release and system
    "nemo_megatron_bridge",
    "nemo",
    "flash",
)

NEMO_LAUNCHER = Source(
    "NVIDIA NeMo-Megatron-Launcher README, 7.1.2 Training Performance Results (DGX SuperPOD, A100 80GB)",
    "5B GPT-3 tokens-per-second table, 1-32 nodes (README and conf/training/gpt3/5b.yaml at commit 3579cdb3, "
    "2022-09-07)",
    "nemo_launcher_gpt3_5b_scaling",
    "nemo",
    "eager",
    dropout=(0.1, 0.1),
    dropout_from="conf/training/gpt3/5b.yaml: hidden_dropout 0.1; NeMo 1.11's ParallelTransformer "
    "attention_dropout=0.1",
)

TORCHAO_H100 = Source(
    "PyTorch torchao float8 training benchmarks (run with torchtitan)",
    "torchao/float8/README.md 'Training benchmarks' H100 table (commit 8c81863ba, 2025-03-12; also in "
    "docs/source/workflows/training.md)",
    "torchao_float8_torchtitan",
    "torchtitan",
    "flash",
    compile=True,
)
TORCHAO_MI300X = Source(
    TORCHAO_H100.source,
    "docs/source/workflows/training.md 'Training benchmarks' AMD MI300X table (added 2025-08-11, commit 853f87d1b)",
    "torchao_float8_torchtitan",
    "torchtitan",
    "flash",
    compile=True,
)


# AI2's OLMo-core README, "Official training scripts": tokens/s per device of its training scripts on H100, the
# table's last version before 41f8ddc9f (2025-03-12) removed it. OLMo-core runs FSDP2 (fully_shard per block,
# adapted from torchtitan's parallelize_llama), torch.compile per block and torchao Float8Linear: the stack of
# mfukit's torchtitan profile.
OLMO_CORE = Source(
    "AI2 OLMo-core (allenai/OLMo-core) README.md, Official training scripts throughput table (FSDP2 + "
    "torch.compile + torchao float8, H100)",
    "",  # per row: which line and the commit it was first printed at
    "olmo_core",
    "torchtitan",
    "flash",
    compile=True,
)


# torchtitan's Llama 3.1 405B rows of docs/performance.md (2024-08): FSDP2 16-way x TP 8 on 128 H100, the page's
# only H100 table before the 2025-01 rewrite (whose numbers are the benchmarks file in
# published_runs_calibration.csv); the A100 tables of the same page are torchtitan_a100_2024.
TITAN_405B = Source(
    "PyTorch torchtitan repository docs/performance.md (FSDP2 x TP 8, Llama 3.1 405B on 128 H100)",
    "'Llama 3.1 performance numbers' table (file at commit 3faaa1a0d, 2024-08-23; first printed at 9515a140b, "
    "2024-08-22); setup from train_configs/llama3_405b.toml, torchtitan/parallelisms/parallelize_llama.py, "
    "torchtitan/float8.py and train.py at those commits",
    "torchtitan_405b_h100_2024",
    "torchtitan",
    "flash",
)


# Zero Bubble Pipeline Parallelism (Sea AI Lab): the Megatron-LM 1F1B baseline it measured beside its own schedules.
ZERO_BUBBLE = Source(
    "Qi, Wan, Huang, Lin: Zero Bubble Pipeline Parallelism (arXiv 2401.10241v1, PDF dated 2023-11-30; ICLR 2024 "
    "as 'Zero Bubble (Almost) Pipeline Parallelism'), Megatron-LM 1F1B baseline; code "
    "sail-sg/zero-bubble-pipeline-parallelism branch arxiv (commit f68d387, 2023-11-29)",
    "",  # per row: which table
    "zero_bubble_megatron",
    "megatron-core",
    "eager",
    dropout=(0.1, 0.1),
    dropout_from="examples/pretrain_zero_bubble.sh sets 0 only for ENABLE_EXACTLY_NUMERIC_MATCH: Megatron-LM "
    "megatron/arguments.py default=0.1",
)


DS4SCI_LONGSEQ = Source(
    "Microsoft DeepSpeed / Argonne ALCF (DeepSpeed4Science): microsoft/Megatron-DeepSpeed "
    "examples_deepspeed/deepspeed4science/megatron_long_seq_support/README.md, 'Performance Comparison between Old "
    "Megatron-DeepSpeed and New Megatron-DeepSpeed' table (added in commit cc3a94c6, 2023-09-18; unchanged at the "
    "snapshot's HEAD); launch flags from pretrain_gpt_30B_seq_parallel.sh and ds_config_gpt_TEMPLATE.json of the "
    "same commit",
    "",  # per row: which sequence length
    "ds4sci_longseq_megatron",
    "megatron-deepspeed",
    "flash",
    system="dgx-a100-40gb",
    dropout=(0.0, 0.1),
    dropout_from="the script sets none, so Megatron's 0.1; FlashSelfAttentionTriton never passes its attention "
    "dropout to the Triton kernel, which has none (megatron/model/transformer.py @cc3a94c6)",
)


# The DeepSpeed4Science 30B script (pretrain_gpt_30B_seq_parallel.sh at cc3a94c6): layers, hidden, heads, the
# GPT-2 BPE vocabulary and TP; Megatron pads the vocabulary to a multiple of 128 x TP (_vocab_size_with_padding)
DS4SCI_LAYERS, DS4SCI_HIDDEN, DS4SCI_HEADS, DS4SCI_VOCAB, DS4SCI_TP = 64, 6144, 64, 50257, 32
DS4SCI_PADDED_VOCAB = -(-DS4SCI_VOCAB // (128 * DS4SCI_TP)) * 128 * DS4SCI_TP  # 53248


def neox_2022_flops_per_token(shape: Shape, seq: int) -> float:
    """FLOPs per token as gpt-neox's training logger counted them when GPT-NeoX-20B was released
    (EleutherAI/gpt-neox megatron/logging.py get_flops at c560814b, 2022-02-10): 6 x the model's total
    parameters (model.total_params, embeddings included) + 60 x seq x hidden x layers, with no factor for
    activation recompute (the x4/3 of checkpointed runs arrived with #1044, 2023-09-27)."""
    return 6 * shape.n_params + 60 * seq * shape.hidden * shape.layers


def ds4sci_flops_per_token(seq: int) -> float:
    """FLOPs per token that Megatron-DeepSpeed's megatron/utils.py throughput_calculator (commit cc3a94c6) counts
    for the 30B script: 24 x 4 (checkpoint_activations factor) x L h^2 (1 + s/(6h) + V/(16 L h)) per token, with
    the padded vocabulary; full (not causal) attention, the recompute forward counted."""
    layers, hidden = DS4SCI_LAYERS, DS4SCI_HIDDEN
    return (
        24.0
        * 4
        * layers
        * hidden**2
        * (1 + seq / (6 * hidden) + DS4SCI_PADDED_VOCAB / (16 * layers * hidden))
    )


def _fmt(value: float | None, digits: int) -> str:
    if value is None:
        return ""
    return f"{value:.{digits}f}"


def _switch(value: bool | None) -> str:
    return "" if value is None else ("yes" if value else "no")


def _family(gpu_type: str) -> str:
    return gpu_type.split("-")[0].split(" ")[0]


def make_row(
    row_id: int,
    src: Source,
    shape: Shape,
    *,
    seq: int,
    gbs: int,
    mbs: int | None,
    gpu: str,
    n: int,
    tp: int,
    pp: int,
    cp: int = 1,
    vpp: int | None = None,
    zero: str,
    recompute: str,
    precision: str,
    reported: str,
    inferred: str,
    notes: str,
    detail: str = "",
    tflops: float | None = None,
    accounting: str = "",
    tokens_per_gpu: float | None = None,
    step_s: float | None = None,
    mem_gib: float | None = None,
    offload: str = "",
    compiled: bool | None = None,
    tp_overlap: bool | None = None,
    norm: str = "",
    measured_mfu_pct: str = "",
    hfu_pct: str = "",
) -> dict[str, str]:
    dp = n // (tp * pp * cp)
    if dp * tp * pp * cp != n:
        raise ValueError(f"row {row_id}: tp*pp*cp does not divide n_gpus")
    family = _family(gpu)
    fp8 = precision.startswith("fp8")
    peak = FP8_PEAK_TFLOPS[family] if fp8 else BF16_PEAK_TFLOPS[family]
    batch_tokens = gbs * seq
    if tokens_per_gpu is None and step_s is not None:
        tokens_per_gpu = batch_tokens / (step_s * n)
    if tokens_per_gpu is not None:
        tokens_per_gpu = round(tokens_per_gpu, 2)  # the CSV's precision, so that the total is its multiple
    if step_s is None and tokens_per_gpu is not None:
        step_s = batch_tokens / (tokens_per_gpu * n)
    derived_tflops = derived_mfu = derived_bf16 = None
    if tokens_per_gpu is not None:
        flops_per_token = 6 * shape.n_params + 12 * shape.layers * shape.hidden * seq
        derived_tflops = tokens_per_gpu * flops_per_token / 1e12
        derived_mfu = 100 * derived_tflops / peak
        derived_bf16 = 100 * derived_tflops / BF16_PEAK_TFLOPS[family]
    row = {name: "" for name in HEADER}
    row.update(
        row_id=str(row_id),
        source=src.source,
        source_detail=detail or src.detail,
        source_group=src.group,
        model_name=shape.name,
        n_params=f"{shape.n_params:.1f}",
        n_layers=str(shape.layers),
        hidden=str(shape.hidden),
        n_heads=str(shape.heads),
        n_kv_heads=str(shape.kv_heads),
        ffn_hidden=str(shape.ffn),
        vocab=str(shape.vocab),
        seq_len=str(seq),
        global_batch_sequences=str(gbs),
        global_batch_tokens=str(batch_tokens),
        micro_batch="" if mbs is None else str(mbs),
        gpu_type=gpu,
        n_gpus=str(n),
        tp=str(tp),
        pp=str(pp),
        dp=str(dp),
        cp=str(cp),
        ep="1",
        vpp="" if vpp is None else str(vpp),
        zero_stage_or_fsdp=zero,
        activation_recompute=recompute,
        precision=precision,
        peak_tflops_used=f"{peak:.0f}",
        measured_tflops_per_gpu=_fmt(tflops, 2),
        tflops_accounting=accounting,
        measured_mfu_pct=measured_mfu_pct,
        hfu_pct=hfu_pct,
        tokens_per_sec_per_gpu=_fmt(tokens_per_gpu, 2),
        tokens_per_sec_total=_fmt(None if tokens_per_gpu is None else tokens_per_gpu * n, 1),
        step_time_s=_fmt(step_s, 3),
        peak_mem_gib_per_gpu=_fmt(mem_gib, 2),
        derived_model_tflops_per_gpu=_fmt(derived_tflops, 1),
        derived_mfu_pct=_fmt(derived_mfu, 1),
        derived_mfu_vs_bf16_dense_pct=_fmt(derived_bf16, 1),
        reported_fields=reported,
        inferred_fields=inferred
        + (f";attention_dropout/hidden_dropout({src.dropout_from})" if src.dropout else "")
        + ";dp;global_batch_tokens;tokens_per_sec_total;derived_*",
        notes=notes,
        framework=src.framework,
        attention=src.attention,
        offload=offload,
        system=src.system or SYSTEMS.get(gpu, ""),
        compile=_switch(src.compile if compiled is None else compiled),
        tp_comm_overlap=_switch(tp_overlap),
        norm=norm,
        attention_dropout="" if src.dropout is None else f"{src.dropout[0]:g}",
        hidden_dropout="" if src.dropout is None else f"{src.dropout[1]:g}",
    )
    return row


def rows() -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    next_id = iter(range(1001, 2000))

    # NeMo 24.07 performance summary, DGX-H100, FP8 (Transformer Engine), Megatron-Core underneath.
    nemo_reported = (
        "model;n_gpus;global_batch_sequences;micro_batch;seq_len;tp;pp;cp;vpp;tokens_per_sec_per_gpu;"
        "measured_tflops_per_gpu;precision(FP8)"
    )
    nemo_inferred = "arch;zero_stage_or_fsdp(distributed optimizer, NeMo recipe default);step_time_s"
    nemo_notes = (
        "NeMo's own model-TFLOP formula (not 6N+12Lhs). Activation recompute not printed (recipe default). "
        "FP8 run: peak_tflops_used=1979; derived_mfu_vs_bf16_dense_pct is against 989."
    )
    pretrain = [
        ("gpt3_5b", 64, 2048, 4, 2048, 1, 1, 1, None, 23406, 765),
        ("gpt3_20b", 64, 256, 2, 2048, 2, 1, 1, None, 5851, 750),
        ("gpt3_175b", 128, 256, 1, 2048, 4, 8, 1, 6, 716, 771),
        ("llama2_7b", 8, 128, 1, 4096, 1, 1, 1, None, 16934, 780),
        ("llama2_13b", 16, 128, 1, 4096, 1, 4, 1, 10, 8715, 760),
        ("llama2_70b", 64, 128, 1, 4096, 4, 4, 1, 20, 1728, 768),
        ("llama3_8b", 8, 128, 1, 8192, 1, 1, 2, None, 12273, 711),
        ("llama3_70b", 64, 128, 1, 8192, 4, 4, 2, 5, 1524, 734),
    ]
    for key, n, gbs, mbs, seq, tp, pp, cp, vp, tok, tf in pretrain:
        out.append(
            make_row(
                next(next_id),
                NEMO_2407,
                SHAPES[key],
                seq=seq,
                gbs=gbs,
                mbs=mbs,
                gpu=H100,
                n=n,
                tp=tp,
                pp=pp,
                cp=cp,
                vpp=vp,
                zero="distributed optimizer",
                recompute="recipe default (unknown)",
                precision="fp8",
                reported=nemo_reported,
                inferred=nemo_inferred,
                notes=nemo_notes + (" VP printed as 1 (no interleaving)." if vp is None else ""),
                tflops=tf,
                accounting="model",
                tokens_per_gpu=tok,
            )
        )
    sft = [
        ("llama2_7b", 8, 1, 1, 16891, 673),
        ("llama2_13b", 8, 1, 4, 10176, 787),
        ("llama2_70b", 16, 4, 4, 1816, 749),
    ]
    for key, n, tp, pp, tok, tf in sft:
        out.append(
            make_row(
                next(next_id),
                NEMO_2407_SFT,
                SHAPES[key],
                seq=4096,
                gbs=32,
                mbs=1,
                gpu=H100,
                n=n,
                tp=tp,
                pp=pp,
                zero="distributed optimizer",
                recompute="recipe default (unknown)",
                precision="fp8",
                reported=nemo_reported.replace(";cp;vpp", ""),
                inferred=nemo_inferred + ";cp(=1);vpp(none)",
                notes="Full-parameter SFT step on packed 4096-token sequences (same compute as pre-training). "
                + nemo_notes,
                tflops=tf,
                accounting="model",
                tokens_per_gpu=tok,
            )
        )

    # NeMo long-sequence table: Llama 2 7B FP8 on H100 with context parallelism, 4K to 1M tokens.
    longseq = [
        (4, 4, 1024, 1, 1, 1, 768),
        (8, 8, 512, 1, 2, 1, 730),
        (16, 16, 256, 2, 1, 1, 660),
        (32, 32, 128, 2, 1, 2, 610),
        (64, 64, 64, 4, 1, 2, 574),
        (128, 128, 32, 4, 1, 4, 555),
        (256, 256, 16, 4, 1, 8, 549),
        (512, 512, 8, 8, 1, 16, 549),
        (1024, 1024, 4, 8, 1, 32, 536),
    ]
    for seq_k, n, gbs, tp, pp, cp, tf in longseq:
        out.append(
            make_row(
                next(next_id),
                NEMO_LONGSEQ,
                SHAPES["llama2_7b"],
                seq=seq_k * 1024,
                gbs=gbs,
                mbs=None,
                gpu=H100,
                n=n,
                tp=tp,
                pp=pp,
                cp=cp,
                zero="distributed optimizer",
                recompute="recipe default (unknown)",
                precision="fp8",
                reported="seq_len(K);n_gpus;global_batch_sequences(Batch Size);tp;pp;dp;cp;measured_tflops_per_gpu",
                inferred="arch;zero_stage_or_fsdp;seq_len(K x 1024)",
                notes="Only model TFLOP/s/GPU printed, by NeMo's formula of that release (attention FLOPs grow with "
                "s, so tokens/s is not derived here). 'Without CP' column skipped (its layout is not printed).",
                tflops=tf,
                accounting="model",
            )
        )

    # Megatron-Bridge performance archive: H100 rows whose layout or batch differ from the 25.09 rows already
    # in megatron_published_runs.csv.
    out.append(
        make_row(
            next(next_id),
            BRIDGE_260401,
            SHAPES["llama3_70b"],
            seq=8192,
            gbs=256,
            mbs=1,
            gpu=H100,
            n=64,
            tp=4,
            pp=8,
            vpp=5,
            zero="distributed optimizer",
            recompute="recipe default (unknown)",
            precision="fp8",
            reported="n_gpus;precision;gbs;mbs;seq;fsdp(0);tp;pp;cp;vp;ep;tokens_per_sec_per_gpu;"
            "measured_tflops_per_gpu",
            inferred="arch;zero_stage_or_fsdp;step_time_s",
            notes="GBS 256 (the 25.09 row has 128). Megatron-Core TFLOP formula halves causal attention "
            "(since 2025-03). FP8 peak 1979.",
            tflops=731,
            accounting="model",
            tokens_per_gpu=1664,
        )
    )
    out.append(
        make_row(
            next(next_id),
            BRIDGE_2606,
            SHAPES["llama31_405b"],
            seq=8192,
            gbs=1536,
            mbs=1,
            gpu=H100,
            n=1024,
            tp=8,
            pp=8,
            cp=2,
            vpp=8,
            zero="distributed optimizer",
            recompute="recipe default (unknown)",
            precision="fp8",
            reported="n_gpus;precision;gbs;mbs;seq;tp;pp;cp;vp;tokens_per_sec_per_gpu;measured_tflops_per_gpu",
            inferred="arch;zero_stage_or_fsdp;step_time_s",
            notes="GBS 1536 (the 25.09 row has 512). 126 layers over PP8 x VP8: uneven split (the recipe "
            "accounts for embedding/loss stages). Megatron-Core TFLOP formula halves causal attention. FP8 peak 1979.",
            tflops=822,
            accounting="model",
            tokens_per_gpu=326,
        )
    )
    out.append(
        make_row(
            next(next_id),
            BRIDGE_2606_SFT,
            SHAPES["llama3_70b"],
            seq=4096,
            gbs=32,
            mbs=1,
            gpu=H100,
            n=32,
            tp=4,
            pp=4,
            vpp=5,
            zero="distributed optimizer",
            recompute="recipe default (unknown)",
            precision="fp8",
            reported="n_gpus;precision;gbs;mbs;seq;tp;pp;cp;vp;tokens_per_sec_per_gpu;measured_tflops_per_gpu",
            inferred="arch;zero_stage_or_fsdp;step_time_s",
            notes="Full-parameter SFT (packed sequences), gradient accumulation 16. FP8 peak 1979.",
            tflops=710,
            accounting="model",
            tokens_per_gpu=1638,
        )
    )

    # Megatron-Bridge archive, dense Llama rows on Blackwell (DGX-B200, DGX-GB200): FP8 current scaling; the
    # MXFP8 figures in parentheses are not taken.
    blackwell = [
        # release, system, key, n, gbs, mbs, fsdp, tp, pp, cp, vp, ga, tokens/s/GPU, TFLOP/s/GPU
        ("25.09", GB200, "llama3_8b", 8, 128, 2, 0, 1, 1, 1, None, 8, 31357, 1614),
        ("25.09", GB200, "llama3_70b", 64, 128, 2, 64, 1, 1, 1, None, 1, 3986, 1791),
        ("25.09", GB200, "llama31_405b", 128, 64, 1, 64, 2, 1, 1, None, 1, 729, 1840),
        ("25.09", B200, "llama3_8b", 8, 128, 2, 0, 1, 1, 1, None, 8, 29994, 1544),
        ("25.09", B200, "llama31_405b", 128, 64, 1, 0, 4, 8, 2, 8, 32, 664, 1676),
        ("25.11", GB200, "llama3_70b", 64, 256, 2, 64, 1, 1, 1, None, 2, 4312, 1937),
        ("25.11", GB200, "llama31_405b", 256, 1536, 1, 0, 4, 16, 1, 4, 384, 813, 2053),
    ]
    for release, gpu, key, n, gbs, mbs, fsdp, tp, pp, cp, vp, ga, tok, tf in blackwell:
        system = "DGX-GB200" if gpu == GB200 else "DGX-B200"
        out.append(
            make_row(
                next(next_id),
                BRIDGE_ARCHIVE,
                SHAPES[key],
                detail=f"{release} NeMo container, Pre-Training, System: {system}, {SHAPES[key].name} row (archive at "
                "commit 067f987df0, 2026-08-22)",
                seq=8192,
                gbs=gbs,
                mbs=mbs,
                gpu=gpu,
                n=n,
                tp=tp,
                pp=pp,
                cp=cp,
                vpp=vp,
                zero=f"Megatron-FSDP {fsdp}" if fsdp else "distributed optimizer",
                recompute="recipe default (unknown)",
                precision="fp8 (current scaling)",
                reported="n_gpus;gbs;mbs;seq;fsdp;tp;pp;cp;vp;ep;ga;tokens_per_sec_per_gpu;measured_tflops_per_gpu",
                inferred="arch;precision (FP8-CS per the 25.11 table; 25.09 by its quantization note);"
                + ("" if fsdp else "zero_stage_or_fsdp;")
                + "step_time_s",
                notes=f"Gradient accumulation {ga}. Blackwell peaks from the catalog (FP8 dense "
                f"{FP8_PEAK_TFLOPS[_family(gpu)]:.0f}). Megatron-Core TFLOP formula halves causal attention.",
                tflops=tf,
                accounting="model",
                tokens_per_gpu=tok,
            )
        )

    # torchtitan async-TP benchmark, float8 rows (the bf16 rows are in published_runs_calibration.csv).
    titan_reported = "n_gpus;fsdp;tp;local batch;activation_recompute;quantization;tokens_per_sec_per_gpu(vanilla and async TP)"
    titan_notes = (
        "torch.compile; Grand Teton H100 96 GB HBM2e at 500 W; 400 Gb/s RDMA per GPU. Float8 training: "
        "peak_tflops_used=1979 (FP8 dense SXM); the GPUs run below SXM clocks."
    )
    titan = [
        ("llama31_70b", 256, 16, "full", "float8 tensorwise", 809.8, 942.4),
        ("llama31_70b", 256, 16, "full", "float8 rowwise", 599.6, 624.8),
        ("llama31_8b", 64, 12, "per-op selective", "float8 tensorwise", 5078.1, 5570.1),
        ("llama31_8b", 64, 12, "per-op selective", "float8 rowwise", 3708.5, 3914.9),
    ]
    for key, n, local, ac, quant, vanilla, async_tp in titan:
        for label, tok in (("vanilla TP", vanilla), ("async TP", async_tp)):
            out.append(
                make_row(
                    next(next_id),
                    TITAN_ASYNC,
                    SHAPES[key],
                    seq=8192,
                    gbs=local * (n // 8),
                    mbs=local,
                    gpu=H100_TITAN,
                    n=n,
                    tp=8,
                    pp=1,
                    zero=f"FSDP2 {n // 8}-way",
                    recompute=ac,
                    precision=f"fp8 ({quant})",
                    reported=titan_reported,
                    inferred="arch;seq_len(8192, torchtitan llama3 configs);global_batch_sequences(local x FSDP)",
                    notes=f"{label}, {quant}. {titan_notes}",
                    tokens_per_gpu=tok,
                    tp_overlap=label == "async TP",
                )
            )
    for nodes, tok, mem in ((4, 10938, 47.96), (8, 10753, 46.97)):
        n = nodes * 8
        out.append(
            make_row(
                next(next_id),
                TITAN_H200,
                SHAPES["llama31_8b"],
                seq=8192,
                gbs=2 * n,
                mbs=2,
                gpu=H200,
                n=n,
                tp=1,
                pp=1,
                zero=f"FSDP2 {n}-way",
                recompute="selective (per-op)",
                precision="fp8 (float8 tensorwise, fp8 all-gather)",
                reported="n_nodes;local_batch_size;compile;float8 converter flags;tokens_per_sec_per_gpu;"
                "peak_mem_gib_per_gpu",
                inferred="arch;seq_len and AC mode (llama3_8b.toml at that commit);FSDP degree (default = all GPUs)",
                notes="Sampled at iteration 100. 8 x H200 per host, 400 Gb/s CX-7 per GPU. "
                "enable_fsdp_float8_all_gather, precompute_float8_dynamic_scale_for_fsdp, "
                "force_recompute_fp8_weight_in_bwd. FP8 peak 1979.",
                tokens_per_gpu=tok,
                mem_gib=mem,
            )
        )

    # torchao float8 benchmarks: Llama3-8B on one node, batch 1, seq 8192, FSDP2, torch.compile, per-op SAC.
    torchao = [
        (TORCHAO_H100, H100_UNSTATED, "bf16", "none (bfloat16)", 47.65, 6150),
        (TORCHAO_H100, H100_UNSTATED, "fp8 (float8 tensorwise, fp8 all-gather)", "tensorwise", 47.77, 7689.5),
        (TORCHAO_H100, H100_UNSTATED, "fp8 (float8 rowwise, bf16 all-gather)", "rowwise", 47.79, 6768),
        (TORCHAO_MI300X, MI300X, "bf16", "none (bfloat16)", 39.09, 5376.5),
        (TORCHAO_MI300X, MI300X, "fp8 (float8 tensorwise, fp8 all-gather)", "tensorwise", 39.07, 6166.0),
        (
            TORCHAO_MI300X,
            MI300X,
            "fp8 (float8 rowwise_with_gw_hp, bf16 all-gather)",
            "rowwise_with_gw_hp",
            39.32,
            6100.0,
        ),
        (TORCHAO_MI300X, MI300X, "fp8 (float8 rowwise, bf16 all-gather)", "rowwise", 39.32, 5891.0),
    ]
    for src, gpu, precision, scaling, mem, tok in torchao:
        out.append(
            make_row(
                next(next_id),
                src,
                SHAPES["llama3_8b"],
                seq=8192,
                gbs=8,
                mbs=1,
                gpu=gpu,
                n=8,
                tp=1,
                pp=1,
                zero="FSDP2 8-way",
                recompute="per-op selective",
                precision=precision,
                reported="n_gpus(8, single node);batch size(1);seq_len;steps(100);torch.compile;FSDP2;scaling;"
                "activation_recompute(per op SAC);peak_mem_gib_per_gpu;tokens_per_sec_per_gpu(median)",
                inferred="arch;global_batch_sequences(batch 1 per GPU x 8);gpu variant;tokens/s read as per GPU "
                "(torchtitan logs tps per device)",
                notes=f"Scaling: {scaling}. Peak memory printed in GB (taken as GiB, as torchtitan logs it). "
                "The H100 variant (SXM 80 GB or the 96 GB 500 W parts of the torchtitan benchmarks) is not stated.",
                tokens_per_gpu=tok,
                mem_gib=mem,
            )
        )

    # NeMo-Megatron launcher (2022): GPT-3 5B on 1-32 DGX A100 nodes, tokens/s of the whole job.
    for nodes, total in ((1, 40345), (2, 79815), (4, 161754), (8, 312774), (16, 659481), (32, 1159288)):
        n = nodes * 8
        out.append(
            make_row(
                next(next_id),
                NEMO_LAUNCHER,
                SHAPES["gpt3_5b"],
                seq=2048,
                gbs=2048,
                mbs=2,
                gpu=A100_80,
                n=n,
                tp=1,
                pp=1,
                zero="distributed optimizer (distributed_fused_adam)",
                recompute="none (granularity full, method block, 0 layers)",
                precision="bf16",
                reported="n_nodes;tokens_per_sec_total;model (5B GPT-3);GPU (A100 80GB)",
                inferred="tp;pp;micro_batch;global_batch_sequences;seq_len;precision;optimizer;recompute "
                "(the launcher's conf/training/gpt3/5b.yaml at the same commit);arch (same config; vocab "
                "50257 GPT-2 BPE);tokens_per_sec_per_gpu",
                notes="Fixed global batch while nodes grow 1 -> 32 (gradient accumulation 128 -> 4): the README "
                "reports a 28.73x speed-up at 32 nodes. Pre-Transformer-Engine NeMo (Megatron fused softmax "
                "attention). The README does not say the default config was used.",
                tokens_per_gpu=total / n,
            )
        )

    # IBM fms-fsdp: FSDP / HSDP with torch.compile and SDPA, per-GPU batch 2, no TP/PP.
    fms_reported = (
        "model size;sharding strategy;compile;activation_recompute;batch size (per GPU);n_gpus;"
        "tokens_per_sec_per_gpu;measured_mfu_pct;hfu_pct"
    )
    fms_inferred = "arch;seq_len(4096, fms_fsdp/config/training.py);global_batch_sequences(2 per GPU, no grad accumulation)"
    fms = [
        # key, sharding, ac, (A100 tok/s, MFU, HFU), (H100 tok/s, MFU, HFU)
        ("llama2_7b", "HSDP (shard in node, replicate across nodes)", "none", (4550, 68, 68), (9600, 46, 46)),
        ("llama2_13b", "FSDP FULL_SHARD", "selective", (2150, 61, 69), (4850, 43, 46)),
        ("llama2_34b", "FSDP FULL_SHARD", "selective", (820, 55, 74), (1830, 38, 49)),
        ("llama2_70b", "FSDP FULL_SHARD", "selective", (410, 55, 74), (890, 38, 47)),
    ]
    for key, sharding, ac, a100, h100 in fms:
        for gpu, n, link, (tok, mfu, hfu) in ((A100_80, 128, "400 Gb/s", a100), (H100, 96, "800 Gb/s", h100)):
            out.append(
                make_row(
                    next(next_id),
                    FMS,
                    SHAPES[key],
                    seq=4096,
                    gbs=2 * n,
                    mbs=2,
                    gpu=gpu,
                    n=n,
                    tp=1,
                    pp=1,
                    zero=sharding,
                    recompute=ac,
                    precision="bf16",
                    reported=fms_reported,
                    inferred=fms_inferred,
                    notes=f"{n} GPUs with {link} node interconnect; torch.compile; MFU by the PaLM/nanoGPT method, "
                    "HFU by the PyTorch FLOP counter. The README notes 13B on A100 is held back by the small batch.",
                    tokens_per_gpu=tok,
                    measured_mfu_pct=f"{mfu:.1f}",
                    hfu_pct=f"{hfu:.1f}",
                )
            )
    run = make_row(
        next(next_id),
        FMS_RUN,
        SHAPES["llama2_7b"],
        seq=4096,
        gbs=256,
        mbs=2,
        gpu=A100_80,
        n=128,
        tp=1,
        pp=1,
        zero="FSDP/HSDP (not stated for the run)",
        recompute="selective",
        precision="bf16",
        reported="n_gpus(128 A100);seq_len(4k);total_tokens(2.2T);gpu_hours(162k);tokens_per_sec_per_gpu(3700);"
        "techniques (SDPA flash v2, FSDP overlap, selective AC)",
        inferred="arch;global_batch_sequences(2 per GPU, config default);zero_stage_or_fsdp",
        notes="Sustained figure of a real 2.2T-token pre-training run (includes data loading, checkpointing and "
        "restarts only insofar as the README's 3700 tokens/s/GPU does).",
        tokens_per_gpu=3700,
    )
    run.update(total_tokens="2200000000000", gpu_hours="162000")
    out.append(run)

    out.append(
        make_row(
            next(next_id),
            AUTOMODEL,
            SHAPES["llama3_70b"],
            seq=8192,
            gbs=128,
            mbs=1,
            gpu=H100,
            n=64,
            tp=1,
            pp=1,
            cp=2,
            zero="FSDP2 32-way (+CP 2)",
            recompute="full (activation_checkpointing: True)",
            precision="bf16",
            reported="n_gpus;gbs;mbs;lbs;ga(4);seq_len;tp;pp;cp;fsdp(32);kernel optimizations(TE + fsdp2_prefetch);"
            "step_time_s(18.90);measured_tflops_per_gpu(389);tokens_per_sec_per_gpu(866.77)",
            inferred="arch;activation_recompute and torch.compile (examples/llm_benchmark/llama3_3/"
            "custom_llama3_1_70b_pretrain_benchmark_8nodes.yaml)",
            notes="Hugging Face Llama implementation with Transformer Engine kernels, SDPA attention (required "
            "for CP), FSDP2 prefetch, torch.compile, mock data, no gradient clipping; step time includes the "
            "optimizer step.",
            tflops=389,
            accounting="model",
            tokens_per_gpu=866.77,
        )
    )

    # DeepSpeed DeepCompile blog: ZeRO-3 (and ZeRO-3 with optimizer offload) of Hugging Face Llama-3-70B on H100.
    # Values are read off the blog's bar charts by pixel position (about +-1.5 TFLOP/s on Figure 3, +-1 on
    # Figure 4); the benchmark scripts fix the rest of the setup.
    dc_inferred = (
        "measured_tflops_per_gpu(read from the bar chart);tokens_per_sec_per_gpu(TFLOPs / the script's FLOPs per "
        "token);precision(bf16, ds_config template default);arch(public Llama 3 70B config)"
    )
    dc_notes = (
        "TFLOP/s by DeepSpeedExamples plot_common.py: Megatron-style count with an extra forward for activation "
        "checkpointing (HFU-style), but with ffn 32768, vocab 32000 and no KV projection for this model, so "
        "tokens/s is derived with that same count. HF model, micro batch 1 per GPU, activation checkpointing on, "
        "4 nodes (hostfile_n4) for 32 GPUs."
    )
    zero3 = [(1, 243, 285), (2, 250, 304), (4, 261, 324), (8, 258, 329), (16, 261, 335)]
    for ga, eager, compiled in zero3:
        for label, tf, zero in (
            ("ZeRO3+Eager", eager, "ZeRO-3"),
            ("DeepCompile", compiled, "ZeRO-3 (DeepCompile)"),
        ):
            out.append(
                make_row(
                    next(next_id),
                    DEEPCOMPILE,
                    SHAPES["llama3_70b"],
                    detail=f"Figure 3 (perf_zero3.png), Llama-3-70B, 32 GPUs, batch size 1, accumulation steps "
                    f"{ga}, {label} bar; scripts run_bench_acc.sh",
                    seq=1024,
                    gbs=32 * ga,
                    mbs=1,
                    gpu=H100,
                    n=32,
                    tp=1,
                    pp=1,
                    zero=zero,
                    recompute="full",
                    precision="bf16",
                    reported="n_gpus;micro_batch;seq_len;gradient accumulation;measured_tflops_per_gpu (bar chart)",
                    inferred=dc_inferred,
                    notes=f"{label}. " + dc_notes,
                    tflops=tf,
                    accounting="hardware",
                    tokens_per_gpu=tf * 1e12 / deepcompile_flops_per_token(1024),
                    compiled=label == "DeepCompile",
                )
            )
    offload = [(512, 13.0, 89.6), (1024, 24.0, 166.5), (2048, 49.1, 260.7)]
    for seq, eager, compiled in offload:
        # DeepSpeed's offload steps the states on the CPU (CPU Adam); DeepCompile's pass streams them back to
        # the GPU, which steps them (deepspeed/compile/passes/offload_adam_states.py)
        for label, tf, zero, moved in (
            ("ZeRO3+Eager with DeepSpeed offload", eager, "ZeRO-3", "optimizer"),
            ("DeepCompile offload_adam_states", compiled, "ZeRO-3 (DeepCompile)", "optimizer-states"),
        ):
            out.append(
                make_row(
                    next(next_id),
                    DEEPCOMPILE,
                    SHAPES["llama3_70b"],
                    detail=f"Figure 4 (perf_offload.png), Llama-3-70B on 16 x H100-80GB, batch size 1, sequence "
                    f"length {seq}, {label} bar; scripts run_bench_offload.sh",
                    seq=seq,
                    gbs=16,
                    mbs=1,
                    gpu=H100,
                    n=16,
                    tp=1,
                    pp=1,
                    zero=zero,
                    recompute="full",
                    precision="bf16",
                    reported="n_gpus;micro_batch;seq_len;what is offloaded (optimizer states);"
                    "measured_tflops_per_gpu (bar chart)",
                    inferred=dc_inferred + ";global_batch_sequences(accumulation 1)",
                    notes=f"{label}: 16 GPUs is half of what ZeRO-3 needs without offload. DeepCompile keeps the "
                    "optimizer compute on GPU and moves only Adam states, asynchronously. " + dc_notes,
                    tflops=tf,
                    accounting="hardware",
                    tokens_per_gpu=tf * 1e12 / deepcompile_flops_per_token(seq),
                    offload=moved,
                    compiled=label.startswith("DeepCompile"),
                )
            )

    # BigScience tr11 prequel: 3D-topology benchmarks of BLOOM-style models on 48 nodes of 8 x A100 80GB.
    prequel_reported = (
        "n_nodes;size;hidden;n_layers;dp;tp;pp;micro_batch;global_batch_sequences;peak_mem_gib_per_gpu(Mem, "
        "first/last stage);step_time_s(Sec/it at iteration 2);measured_tflops_per_gpu"
    )
    prequel_inferred = (
        "n_heads(64, stated for the final round 'above too');seq_len(2048, tr11 setting);zero_stage_or_fsdp(ZeRO-1, "
        "the setup's ZERO_STAGE per the ZS table);activation_recompute(full: TFLOPs counted with recompute);"
        "precision;vocab;tokens_per_sec_per_gpu"
    )
    prequel_notes = (
        "Megatron-DeepSpeed HFU-style TFLOPs after the PR #251 fix (Megatron-LM HFU formula: 96BslH^2(1+s/6h+V/16lh), recompute counted). Sec/it is a "
        "single iteration-2 snapshot. Tied embedding on the first and last stages, transformer blocks split "
        "evenly."
    )
    prequel = [
        # (table, date, hidden, layers, dp, pp, mbs, mem_gib, sec_per_it, tflops)
        (
            "48 node contenders, NHIDDEN=14336/NLAYERS=72",
            "2022-02-21",
            14336,
            72,
            4,
            12,
            1,
            29,
            143.31,
            112.49,
        ),
        (
            "48 node contenders, NHIDDEN=14336/NLAYERS=72",
            "2022-02-21",
            14336,
            72,
            4,
            12,
            2,
            37,
            134.02,
            120.29,
        ),
        (
            "48 node contenders, NHIDDEN=14336/NLAYERS=72",
            "2022-02-21",
            14336,
            72,
            4,
            12,
            4,
            49,
            123.69,
            130.34,
        ),
        (
            "48 node contenders, NHIDDEN=14336/NLAYERS=72",
            "2022-02-21",
            14336,
            72,
            4,
            12,
            8,
            69,
            129.26,
            124.72,
        ),
        (
            "48 node contenders, NHIDDEN=14336/NLAYERS=72",
            "2022-02-21",
            14336,
            72,
            8,
            6,
            1,
            38,
            139.82,
            115.31,
        ),
        (
            "48 node contenders, NHIDDEN=14336/NLAYERS=72",
            "2022-02-21",
            14336,
            72,
            8,
            6,
            2,
            44,
            131.02,
            123.05,
        ),
        (
            "48 node contenders, NHIDDEN=14336/NLAYERS=72",
            "2022-02-21",
            14336,
            72,
            8,
            6,
            4,
            56,
            121.48,
            132.71,
        ),
        (
            "48 node contenders, NHIDDEN=13824/NLAYERS=84",
            "2022-02-21",
            13824,
            84,
            4,
            12,
            2,
            39,
            143.89,
            121.45,
        ),
        (
            "48 node contenders, NHIDDEN=13824/NLAYERS=84",
            "2022-02-21",
            13824,
            84,
            4,
            12,
            4,
            52,
            133.12,
            131.27,
        ),
        (
            "48 node contenders, NHIDDEN=13824/NLAYERS=84",
            "2022-02-21",
            13824,
            84,
            8,
            6,
            2,
            65,
            141.41,
            123.58,
        ),
        (
            "48 node contenders, NHIDDEN=13824/NLAYERS=84",
            "2022-02-21",
            13824,
            84,
            8,
            6,
            4,
            56,
            130.31,
            134.11,
        ),
        (
            "Final round comparison, NHIDDEN=12288/NLAYERS=96",
            "2022-02-23",
            12288,
            96,
            8,
            6,
            2,
            None,
            136.73,
            115.73,
        ),
        (
            "Final round comparison, NHIDDEN=12288/NLAYERS=96",
            "2022-02-23",
            12288,
            96,
            8,
            6,
            4,
            None,
            122.96,
            128.69,
        ),
        (
            "Final round comparison, NHIDDEN=13312/NLAYERS=84",
            "2022-02-23",
            13312,
            84,
            4,
            12,
            4,
            None,
            125.52,
            129.29,
        ),
        (
            "Final round comparison, NHIDDEN=13312/NLAYERS=84",
            "2022-02-23",
            13312,
            84,
            8,
            6,
            2,
            None,
            135.55,
            119.72,
        ),
        (
            "Final round comparison, NHIDDEN=13312/NLAYERS=84",
            "2022-02-23",
            13312,
            84,
            8,
            6,
            4,
            None,
            122.93,
            132.00,
        ),
        (
            "Final round comparison, NHIDDEN=13824/NLAYERS=78",
            "2022-02-23",
            13824,
            78,
            8,
            6,
            4,
            None,
            121.28,
            133.93,
        ),
        (
            "Final round comparison, NHIDDEN=14336/NLAYERS=72",
            "2022-02-23",
            14336,
            72,
            4,
            12,
            4,
            None,
            123.79,
            130.24,
        ),
        (
            "Final round comparison, NHIDDEN=14336/NLAYERS=72",
            "2022-02-23",
            14336,
            72,
            8,
            6,
            4,
            None,
            120.85,
            133.40,
        ),
    ]
    for table, date, hidden, layers, dp, pp, mbs, mem, sec, tf in prequel:
        reported = (
            prequel_reported
            if mem is not None
            else prequel_reported.replace(";peak_mem_gib_per_gpu(Mem, ", ";(")
        )
        out.append(
            make_row(
                next(next_id),
                BLOOM_PREQUEL,
                bloom_variant(hidden, layers),
                detail=f"section '{table}' (table dated {date}; file first committed 2022-03-02, ddfe9cc)",
                seq=2048,
                gbs=2048,
                mbs=mbs,
                gpu=A100_80,
                n=dp * 8 * pp,
                tp=8,
                pp=pp,
                zero="ZeRO-1",
                recompute="full",
                precision="fp16/bf16 mixed",
                reported=reported,
                inferred=prequel_inferred,
                notes=prequel_notes + ("" if mem is not None else " Mem column empty in this table."),
                tflops=tf,
                accounting="hardware",
                step_s=sec,
                mem_gib=None if mem is None else float(mem),
            )
        )

    out.append(
        make_row(
            next(next_id),
            BLOOM_MAIN,
            SHAPES["bloom_176b"],
            seq=2048,
            gbs=2048,
            mbs=2,
            gpu=A100_80,
            n=384,
            tp=4,
            pp=12,
            zero="ZeRO-1 (BF16_Optimizer's own)",
            recompute="full",
            precision="bf16",
            reported="n_gpus;tp;pp;dp;micro_batch;global_batch_sequences;seq_len;n_layers;hidden;n_heads;"
            "step_time_s(104.70);measured_tflops_per_gpu(149.77, hardware with recompute)",
            inferred="ffn_hidden(4h);vocab(250880 padded);tokens_per_sec_per_gpu",
            notes="Uneven pipeline split: --pp-partition-method 'type:transformer|embedding' puts "
            "[embed + 5 blocks] on stage 0, 6 blocks on stages 1-10, [5 blocks + embed] on stage 11. HFU-style "
            "TFLOPs (4*2 coefficient, activation checkpointing). Steady state at GBS 2048, end of epoch one.",
            tflops=149.77,
            accounting="hardware",
            step_s=104.70,
        )
    )

    out.append(
        make_row(
            next(next_id),
            OPT,
            SHAPES["opt_175b"],
            seq=2048,
            gbs=1024,
            mbs=None,
            gpu=A100_80,
            n=992,
            tp=8,
            pp=1,
            zero="FSDP (fairscale fully_sharded, --no-reshard-after-forward: SHARD_GRAD_OP) 124-way",
            recompute="full (--checkpoint-activations)",
            precision="fp16 mixed",
            reported="n_gpus(992 80GB A100);FSDP + Megatron tensor parallelism;measured_tflops_per_gpu('up to 147');"
            "n_layers;hidden;n_heads;batch(2M tokens, Table 1);tokens_per_sec_total(wps 1.00-1.02e5, runs "
            "12.45-12.48, projects/OPT/chronicles/images/run12_upgrade_shift.jpeg)",
            inferred="tp(8, from 124 hosts x 8 TP shards);global_batch_sequences(2M tokens / 2048 = 1024);"
            "vocab;ffn_hidden(4h);zero_stage_or_fsdp and activation_recompute(metaseq launcher/opt_baselines.py: "
            "--ddp-backend fully_sharded --no-reshard-after-forward (its save_dir_key 'zero2'), "
            "--checkpoint-activations --distribute-checkpointed-activations);tokens_per_sec_total(1.01e5, the middle "
            "of the chart's wps);tflops_accounting(hardware: 1.01e5 tokens/s on 992 GPUs is 109.6 model TFLOP/s per "
            "GPU, 146 with the recompute forward counted, the paper's 147)",
            notes="The paper's 'up to' 147 TFLOP/s per GPU is a best figure; the measurement taken is the sustained "
            "throughput metaseq's TensorBoard shows for run 12 halfway through training (wps = words, i.e. tokens, "
            "per second over all ranks: 1.00e5 before and 1.02e5 after the Megatron 2.4 -> 2.6 upgrade the 56 % "
            "update describes), read off the chart to about 1 %. Counted as model FLOPs that is 109.6 TFLOP/s per "
            "GPU; with the recompute forward 146, so the paper's 147 counts it. Paper figures taken from its text; "
            "not re-checked against a PDF in this session.",
            tflops=147,
            accounting="hardware",
            tokens_per_gpu=1.01e5 / 992,
        )
    )

    out.append(
        make_row(
            next(next_id),
            NEOX,
            SHAPES["gptneox_20b"],
            seq=2048,
            gbs=1538,
            mbs=4,
            gpu=A100_40,
            n=96,
            tp=2,
            pp=4,
            zero="ZeRO-1",
            recompute="full",
            precision="fp16 mixed",
            reported="n_gpus(12 x 8 A100-SXM4-40GB);global_batch_sequences(1538 contexts, ~3.15M tokens);seq_len;"
            "n_layers;hidden;n_heads;measured_tflops_per_gpu(117)",
            inferred="micro_batch/zero/recompute/precision (configs/20B.yml; tp 2 and pp 4 are also printed in "
            "the model card);tflops_accounting(gpt-neox's logger at the 20B release, megatron/logging.py get_flops "
            "@c560814b: no factor for the recompute, which came in September 2023 with #1044);"
            "tokens_per_sec_per_gpu(derived: 117e12 / that count per token)",
            notes="configs/20B.yml gives micro batch 4 x grad-accum 32 x DP 12 = 1536, the paper says 1538. "
            "117 TFLOP/s per GPU from the paper text; not re-checked against a PDF in this session. Read as "
            "what the training logger of the release printed: 6 x total parameters + 60 x seq x hidden x layers "
            "FLOPs per token (neox_2022_flops_per_token).",
            tflops=117,
            accounting="gpt-neox logger of the 20B release: 6 N + 60 s h L per token (no recompute factor)",
            tokens_per_gpu=117e12 / neox_2022_flops_per_token(SHAPES["gptneox_20b"], 2048),
        )
    )
    out += flagperf_rows(next_id)
    out += titan_a100_rows(next_id)
    out += olmo_core_rows(next_id)
    out += zero_bubble_rows(next_id)
    out += ds4sci_longseq_rows(next_id)
    out += titan_405b_rows(next_id)
    return out


def titan_a100_rows(next_id: Iterator[int]) -> list[dict[str, str]]:
    """torchtitan docs/performance.md (file at commit 157a12c562, 2024-04-24): WPS (tokens/s per GPU) and MFU
    of Llama 2 13B/70B and Llama 3 8B/70B, FSDP2 over all 64 A100 80GB, one row per printed table line. The
    setup not printed there is that commit's: train_configs/llama2_13b.toml, llama2_70b.toml (seq_len 4096),
    llama3_8b.toml, llama3_70b.toml (seq_len 8192), all with compile = false and data_parallel_degree = -1;
    parallelize_llama.py wraps each transformer block in FSDP2 with MixedPrecisionPolicy(param_dtype=bfloat16,
    reduce_dtype=float32) and, for selective_ac_option = "op", a per-op policy that saves mm (every second one),
    SDPA and reduce-scatter outputs; an integer option N checkpoints every Nth block whole (config_manager.py's
    default is "2"). MFU is train.py's: 6 x all parameters + 12·L·h·s per token over 312 TFLOP/s, the count
    of derived_mfu_pct."""
    out: list[dict[str, str]] = []
    ac_modes = {
        "no": ("none", ""),
        "selective layer": (
            "full, every 2nd layer (torchtitan selective layer AC, selective_ac_option 2)",
            ";activation_recompute(selective layer = every 2nd block: selective_ac_option default '2' in "
            "torchtitan/config_manager.py; the number is not printed)",
        ),
        "selective op": ("per-op selective", ""),
        "full": ("full", ""),
    }
    table = [
        # table, key, seq_len (the model's train config), local batch, AC as printed, WPS, MFU %, note
        ("Llama 3", "llama3_8b", 8192, 1, "selective layer", 2904, 56.8, ""),
        ("Llama 3", "llama3_8b", 8192, 1, "selective op", 2973, 58.2, ""),
        ("Llama 3", "llama3_70b", 8192, 1, "full", 331, 51.7, ""),
        ("Llama 2", "llama2_13b", 4096, 2, "no", 2162, 61.1, ""),
        ("Llama 2", "llama2_13b", 4096, 2, "selective layer", 1914, 54.1, ""),
        ("Llama 2", "llama2_13b", 4096, 2, "selective op", 1904, 53.8, ""),
        (
            "Llama 2",
            "llama2_70b",
            4096,
            1,
            "selective op",
            355,
            50.8,
            " Local batch 1 because batch 2 runs out of memory with selective AC (the table's footnote); the "
            "first version of the file (395a526, 2024-04-18) printed OOM for 70B batch 2 with selective layer "
            "and selective op AC, not gathered (no measurement).",
        ),
        (
            "Llama 2",
            "llama2_70b",
            4096,
            2,
            "full",
            353,
            50.5,
            " The text adds that with full AC the MFU 'can go up to 54%' at a larger local batch (batch not "
            "printed; not gathered).",
        ),
    ]
    for name, key, seq, local, printed_ac, wps, mfu, extra in table:
        recompute, ac_inferred = ac_modes[printed_ac]
        config = f"train_configs/{key}.toml"
        tp_preset = key.endswith("70b")
        out.append(
            make_row(
                next(next_id),
                TITAN_A100,
                SHAPES[key],
                detail=f"'{name} performance numbers' table, {SHAPES[key].name} local batch {local}, "
                f"'{printed_ac}' AC row (file at commit 157a12c562, 2024-04-24)",
                seq=seq,
                gbs=local * 64,
                mbs=local,
                gpu=A100_80,
                n=64,
                tp=1,
                pp=1,
                zero="FSDP2 64-way",
                recompute=recompute,
                precision="bf16",
                reported="model size;n_gpus(64 A100 80GB);FSDP2 1D;local batch size;global batch (local x 64 FSDP "
                "ranks, the text's rule);activation checkpointing mode;tokens_per_sec_per_gpu(WPS);measured_mfu_pct",
                inferred=f"arch (torchtitan {key.split('_')[0]} flavor, public Llama config);seq_len({seq}, "
                f"{config} at 157a12c562);compile(no: compile = false in that config, not printed);precision(bf16 "
                "params, fp32 gradient reduce: FSDP2 MixedPrecisionPolicy in parallelize_llama.py);step_time_s"
                + ("" if tp_preset else f";norm(fused: norm_type = fused_rmsnorm in {config})")
                + ac_inferred,
                notes=f"AC printed as '{printed_ac}'. WPS is per GPU (train.py: the rank's tokens over the log "
                "interval's time); printed MFU = WPS x (6N + 12·L·h·s) / 312 TFLOP/s, which the derived columns "
                "reproduce with this seq_len. Eager model (torch.compile off in the presets), SDPA is_causal "
                "attention (flash kernel on A100), FSDP2 per transformer block, last block not resharded after "
                "forward. Iteration the numbers were read at and the interconnect are not printed."
                + (
                    f" {config} presets TP 8 and rmsnorm for 2D runs; these 1D rows override TP to 1 and the norm "
                    "they used is not printed."
                    if tp_preset
                    else f" {config} presets fused_rmsnorm (torchtitan's Triton RMSNorm: the norm column says fused)."
                )
                + extra,
                tokens_per_gpu=wps,
                compiled=False,
                norm="" if tp_preset else "fused",
                measured_mfu_pct=f"{mfu:.1f}",
            )
        )
    return out


def flagperf_rows(next_id: Iterator[int]) -> list[dict[str, str]]:
    """BAAI FlagPerf's NVIDIA LLM cases: Megatron-Core, Megatron-DeepSpeed and DeepSpeed ZeRO-3 on A100, A800,
    H100 and H800 nodes. Tokens/s per GPU are what each case's run_pretraining.py prints: the global batch's
    tokens over the last logged iteration time (Megatron) or DeepSpeed's RunningAvgSamplesPerSec, per GPU."""
    out: list[dict[str, str]] = []
    # Megatron-Core: pretrain_llama3.sh passes --use-mcore-models --transformer-impl transformer_engine
    # --use-distributed-optimizer --use-flash-attn --sequence-parallel --bf16, global batch 512 x 8192, and no
    # recompute, overlap or TP-overlap flag; the FP8 rows swap in training_adapter_H100_fp8.sh.
    mcore_reported = "n_gpus;precision;tp;pp;dp;tokens_per_sec_per_gpu;peak_mem_gib_per_gpu(nvidia-smi, x/80)"
    mcore_inferred = (
        "arch and flags (pretrain_llama3.sh);micro_batch(localbs=1 in config_*.py);"
        "activation_recompute(no recompute flag in the script)"
    )
    mcore_notes = (
        "The script keeps Megatron's defaults for what it does not pass: tied embeddings, learned absolute "
        "positions and linear biases on a Llama 3 shape (read here as the untied Llama 3 shape: the same GEMMs; "
        "~0.5 G fewer parameters of state when tied). The README's optimisation list names "
        "recompute-activations, which the script does not pass (with flash attention it would recompute "
        "nothing). No --overlap-grad-reduce, --overlap-param-gather or --tp-comm-overlap. The README's MFU column "
        "(A800 56.9 %, H100 bf16 39.3 %) is 6 x parameters FLOPs per token over the dense peak, without "
        "attention; tokens/s per GPU is the measurement taken."
    )
    fp8 = "fp8 (TE delayed scaling, hybrid E4M3/E5M2, amax history 1024, max)"
    llama3_8b = (
        "training/nvidia/llama3_8B-megatron/README.md results table (2024-05-15, commit 93730d18); "
        "training/benchmarks/llama3_8B/megatron/pretrain_llama3.sh"
    )
    for gpu, n, tp, pp, precision, tok, mem in (
        (A800, 8, 1, 2, "bf16", 3698.7, 76),
        (H100, 8, 2, 1, "bf16", 8103, 71),
        (H100, 8, 2, 1, fp8, 10486, 74),
        (H100, 16, 2, 1, "bf16", 7914, 62),
        (H100, 16, 2, 1, fp8, 10280, 64),
    ):
        out.append(
            make_row(
                next(next_id),
                FLAGPERF_MCORE,
                SHAPES["llama3_8b"],
                detail=llama3_8b,
                seq=8192,
                gbs=512,
                mbs=1,
                gpu=gpu,
                n=n,
                tp=tp,
                pp=pp,
                zero="distributed optimizer",
                recompute="none",
                precision=precision,
                reported=mcore_reported,
                inferred=mcore_inferred,
                notes=mcore_notes,
                tokens_per_gpu=tok,
                mem_gib=mem,
                tp_overlap=False,
            )
        )
    out.append(
        make_row(
            next(next_id),
            FLAGPERF_MCORE,
            SHAPES["llama3_70b"],
            detail="training/nvidia/llama3_70B-megatron/README.md results table (2024-06-14, commit ddd8f62a); "
            "training/benchmarks/llama3_70B/megatron/pretrain_llama3.sh",
            seq=8192,
            gbs=512,
            mbs=1,
            gpu=H100,
            n=64,
            tp=8,
            pp=4,
            zero="distributed optimizer",
            recompute="none",
            precision="bf16",
            reported=mcore_reported,
            inferred=mcore_inferred + ";system(8 x 8 H100 SXM, 400 Gb/s InfiniBand: read as DGX H100)",
            notes=mcore_notes,
            tokens_per_gpu=851,
            mem_gib=55,
            tp_overlap=False,
        )
    )
    # Megatron-DeepSpeed: ZeRO-1 (ds_config.json), micro batch 1 x 32 accumulations (the A100 row 128), bf16,
    # flash attention 2. In megatron-deepspeed_main.sh the line '#--recompute-activations \' sits inside the
    # quoted command, which `eval $cmd` reads as a comment to the end: no recompute, and the flags after it
    # (rmsnorm, no linear bias, --zero-stage, DeepSpeed activation checkpointing) were not passed either.
    for gpu, gas, tok in ((A800, 32, 4047), (A100_80, 128, 3974)):
        out.append(
            make_row(
                next(next_id),
                FLAGPERF_MEGATRON_DS,
                SHAPES["llama2_7b"],
                seq=4096,
                gbs=8 * gas,
                mbs=1,
                gpu=gpu,
                n=8,
                tp=1,
                pp=1,
                zero="ZeRO-1",
                recompute="none",
                precision="bf16",
                reported="n_gpus;dp;fix_hp(GAS);tokens_per_sec_per_gpu;peak_mem_gib_per_gpu(63/80)",
                inferred="arch, seq_len, micro_batch and ZeRO stage (config_A100x1x8.py, ds_config.json)"
                + (
                    ";gpu_type(the README's 'A100' row on an 80 GB part: 63/80 GiB)" if gpu == A100_80 else ""
                ),
                notes="The launch script's commented-out --recompute-activations line ends the evaluated "
                "command: LayerNorm and linear biases (Megatron defaults) on the Llama 2 7B shape, no recompute.",
                tokens_per_gpu=tok,
                mem_gib=63,
            )
        )
    # DeepSpeed ZeRO-3 of Hugging Face Llama 2 7B, one node, flash attention 2 (config flashattn = True), no
    # gradient checkpointing (the model never enables it), micro batch 1 x 4096 unless fix_hp says otherwise.
    for gpu, seq, mbs, gas, tok, mem in (
        (A800, 4096, 1, 1, 3564, 57),
        (A800, 2048, 3, 1, 3917, 70),
        (A800, 2048, 3, 64, 4062, 70),
        (H800, 4096, 1, 1, 7151, 59),
    ):
        out.append(
            make_row(
                next(next_id),
                FLAGPERF_ZERO3,
                SHAPES["llama2_7b"],
                seq=seq,
                gbs=8 * mbs * gas,
                mbs=mbs,
                gpu=gpu,
                n=8,
                tp=1,
                pp=1,
                zero="ZeRO-3",
                recompute="none",
                precision="bf16",
                reported="n_gpus;fix_hp(MPE, LBS, GAS);tokens_per_sec_per_gpu;peak_mem_gib_per_gpu",
                inferred="arch (llama2_7b_hf/config.json);seq_len, micro_batch, accumulation (config_*.py and "
                "ds_config.json unless fix_hp overrides them)",
                notes="ds_config.json: stage3_prefetch_bucket_size 1e7, reduce_bucket_size 1e7, "
                "allgather_bucket_size 1e8, overlap_comm, max live parameters 1e9; AdamW, gradient clipping 1.0. "
                "OpenWebText tokens, the first 100 M.",
                tokens_per_gpu=tok,
                mem_gib=mem,
            )
        )
    return out


def olmo_core_rows(next_id: Iterator[int]) -> list[dict[str, str]]:
    """AI2 OLMo-core README.md 'Official training scripts' table, its last version (file at commit 7e58d1289,
    2025-03-12, the last before 41f8ddc9f removed the table; every figure unchanged since e27ba7455, 2024-11-05):
    tokens/s per device ('TPS', footnote 1) of the 1B, 7B, 13B (OLMo-1124 arch) and Llama 8B scripts, BF16 and
    with --model.float8_config.enabled=true, 'measured on a cluster with NVIDIA H100 GPUs'. The table prints
    model, arch, context length 4096, precision, TPS, script and the command-line override only; the rest is
    the script at the commit each figure was first printed at (src/scripts/train/OLMo-1B.py, OLMo-7B.py,
    Llama-8B.py, OLMo-13B.py) and src/olmo_core/internal/experiment.py there: BeakerLaunchConfig(num_nodes=1,
    num_gpus=8), so one 8-GPU node, and on one node the model is built with dp_mesh=None (plain FSDP over the
    8 GPUs; a multi-node launch would have built a hybrid-shard mesh). No activation checkpointing (ac_config
    unset), torch.compile of each block (compile=True; SDPA attention, flash-attn not used under compile),
    FSDP2 with bf16 params and fp32 gradient reduce, fixed 4096-token sequences (FSL dataset, no intra-document
    masking). Float8 is OLMo-core's Float8Config default: torchao dynamic (tensorwise) scaling for input,
    weight and grad, FP8 FSDP all-gather with precomputed scales, output layer (w_out) left in bf16."""
    out: list[dict[str, str]] = []
    fp8 = "fp8 (torchao float8 tensorwise dynamic scaling, fp8 all-gather; output layer bf16)"
    table = [
        # key, script, printed precision, precision, TPS, global batch, micro batch, first printed (commit, date),
        # loss as the script then ran it
        (
            "olmo_core_1b",
            "OLMo-1B.py",
            "BF16",
            "bf16",
            55000,
            1024,
            8,
            ("e27ba7455", "2024-11-05"),
            "compiled",
        ),
        (
            "olmo_core_1b",
            "OLMo-1B.py",
            "BF16/FP8",
            fp8,
            65000,
            1024,
            8,
            ("e27ba7455", "2024-11-05"),
            "compiled",
        ),
        ("olmo_core_7b", "OLMo-7B.py", "BF16", "bf16", 10000, 1024, 2, ("8c03ca8a2", "2024-09-26"), "fused"),
        ("olmo_core_7b", "OLMo-7B.py", "BF16/FP8", fp8, 13000, 1024, 2, ("8c03ca8a2", "2024-09-26"), "fused"),
        (
            "olmo_core_llama3_8b",
            "Llama-8B.py",
            "BF16",
            "bf16",
            9500,
            1024,
            2,
            ("41400c46f", "2024-11-01"),
            "fused",
        ),
        (
            "olmo_core_llama3_8b",
            "Llama-8B.py",
            "BF16/FP8",
            fp8,
            12500,
            1024,
            2,
            ("41400c46f", "2024-11-01"),
            "fused",
        ),
        ("olmo_core_13b", "OLMo-13B.py", "BF16", "bf16", 4600, 2048, 1, ("8c03ca8a2", "2024-09-26"), "fused"),
        (
            "olmo_core_13b",
            "OLMo-13B.py",
            "BF16/FP8",
            fp8,
            5500,
            2048,
            1,
            ("310866e45", "2024-10-23"),
            "fused",
        ),
    ]
    losses = {
        "compiled": "the loss compiled (compile_loss=True, commit 00d34f693 of 2024-11-01)",
        "fused": "flash-attn's fused cross-entropy (fused_loss=True; the script switched to compile_loss=True on "
        "2024-11-01, after this figure, which the table kept)",
    }
    printed_model = {  # the table's 'Model size' and 'Model arch.' cells
        "olmo_core_1b": "1B OLMo-1124",
        "olmo_core_7b": "7B OLMo-1124",
        "olmo_core_llama3_8b": "8B Llama",
        "olmo_core_13b": "13B OLMo-1124",
    }
    for key, script, printed, precision, tps, gbs, mbs, (commit, date), loss in table:
        shape = SHAPES[key]
        is_fp8 = printed != "BF16"
        out.append(
            make_row(
                next(next_id),
                OLMO_CORE,
                shape,
                detail=f"README.md throughput table, {printed_model[key]} {printed} line ({tps:,} TPS), file at "
                f"commit 7e58d1289 (2025-03-12); figure first printed at {commit} ({date}); setup from "
                f"src/scripts/train/{script} and src/olmo_core/internal/experiment.py at {commit}",
                seq=4096,
                gbs=gbs,
                mbs=mbs,
                gpu=H100_UNSTATED,
                n=8,
                tp=1,
                pp=1,
                zero="FSDP2 8-way (full shard)",
                recompute="none",
                precision=precision,
                reported="model size;model arch (OLMo-1124 / Llama);seq_len(context length 4096);precision(BF16 or "
                "BF16/FP8: most matmuls in float8);tokens_per_sec_per_gpu(throughput, tokens per second per device);"
                "training script;command-line override;GPU type (H100)",
                inferred=f"arch ({shape.inferred});n_gpus(8: the script's BeakerLaunchConfig num_nodes=1, num_gpus=8 "
                "and no --launch.num_nodes override in the table);zero_stage_or_fsdp(FSDP2 over one node: "
                f"dp_mesh=None on 1 node);global_batch_sequences({gbs} x 4096 tokens, script);micro_batch("
                f"rank_microbatch_size={mbs} x 4096, script);activation_recompute(none: no ac_config);compile(model "
                "compile=True, script)"
                + (";fp8 recipe (Float8Config defaults)" if is_fp8 else "")
                + ";gpu variant;step_time_s",
                notes=f"Printed TPS is a rounded figure ({tps:,}); OLMo-core's SpeedMonitorCallback logs it per device "
                "as the rank's batch tokens over the wall time between steps (data loading included). One 8-GPU node "
                "is the launch default of the named script with the printed override; the table itself does not print "
                "the GPU count, node count or cluster (Ai2's Beaker H100 clusters; node type and network not stated), "
                "nor the iteration or software versions. OLMo-core's stack (FSDP2 fully_shard per block adapted from "
                "torchtitan, torch.compile per block, torchao Float8Linear) is the torchtitan profile's. Attention: "
                "PyTorch SDPA is_causal (its flash kernel on H100)"
                + (
                    ", with K/V repeated to 32 heads before SDPA (GQA)"
                    if key == "olmo_core_llama3_8b"
                    else ""
                )
                + f". Loss: {losses[loss]}. Reordered norm and QK norm (OLMo-1124) are not in mfukit's model spec."
                + (
                    " FP8: torchao tensorwise dynamic scaling under compile with FP8 FSDP all-gather (OLMo-core's "
                    "default; mfukit's torchtitan profile assumes 16-bit all-gather); peak_tflops_used 1979."
                    if is_fp8
                    else ""
                )
                + (
                    " The first version of this line (2024-09-26 to 2024-11-05) printed 44,000 (BF16) and 51,000 "
                    "(FP8) TPS with rank_microbatch_size 4 x 4096 and the fused loss; superseded, not gathered."
                    if key == "olmo_core_1b"
                    else ""
                ),
                tokens_per_gpu=tps,
            )
        )
    return out


def render() -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=HEADER, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows())
    return buffer.getvalue()


T4_SETUP = "model;n_layers;n_heads;hidden;seq_len;n_gpus;pp('Pipelines (GPUs)');micro_batch;micro-batches(#Microbatch)"
RESTATED_SETUP = "n_layers/n_heads/hidden/seq_len(Table 3's models, not restated with this table)"


def zero_bubble_rows(next_id: Iterator[int]) -> list[dict[str, str]]:
    """Zero Bubble Pipeline Parallelism (arXiv 2401.10241v1): every measured throughput of Megatron-LM's own 1F1B
    schedule, one row per printed cell. Pure pipeline parallelism: Table 3's "Pipelines (GPUs)" equals the GPU
    count (TP 1, DP 1), so the global batch is micro-batch x micro-batches. Throughput is printed as samples
    (1024-token sequences) per GPU per second. Tables: 4 (Section 5, the ICLR version's Table 4 too), 6 and 7
    (Section 6, ZB-V; arXiv only), 11 and 12 (Appendices F and H; the ICLR version's Tables 8 and 9).

    Not gathered: the ZB-1p, ZB-2p, ZB-2p* and ZB-V rows (the paper's own schedules, which no layout here
    expresses); Tables 5 and 8 (bubble rates computed from profiled F/B/W times, not measured); and Table 4's
    interleaved 1F1B (1F1B-I) rows, kept below but not written: 'each transformer layer serves as a chunk' over
    the fork's L + 2 padded layers (vpp 3/4/3/2 on pp 8/8/16/32) leaves the first chunk of the first stage and
    the last chunk of the last stage without a layer, a split Parallelism cannot hold (default_stage_split
    gives none below pp x vpp + 2 layers, and 22/30/46/62 layers do not divide over pp x vpp)."""
    out: list[dict[str, str]] = []
    seq = 1024
    stack_notes = (
        "Stack: sail-sg's Megatron-LM fork at branch arxiv (f68d387, 2023-11-29): the baseline is Megatron-Core's "
        "forward_backward_pipelining_without_interleaving (megatron/core/pipeline_parallel/schedules.py) with its "
        "DDP; the model is the legacy megatron/model GPT (no --use-mcore-models, --transformer-impl local: no "
        "Transformer Engine), no --use-flash-attn (eager core attention with fused masked softmax), --fp16, no "
        "recompute flag, no distributed optimizer, tied input/output embeddings (read here untied: the same "
        "GEMMs), all as examples/pretrain_zero_bubble.sh of that commit passes them (the paper prints none of "
        "these flags). The paper prints that the first and last stages hold one transformer layer less: the "
        "fork's --allow-padding-num-layers pads to L + 2 layers (megatron/model/transformer.py get_offset), "
        "(L + 2)/pp on the middle stages and one less at each end, the split the reader's default gives. "
        "Cluster: 'up to 32 NVIDIA A100 SXM 80G GPUs distributed across 4 nodes interconnected by a RoCE RDMA "
        "network' (8 per node); the RoCE rate and NIC count are not printed, so the rows run on the default DGX "
        "A100 node (8 x 200 Gb/s InfiniBand). Iteration time 'recorded after several warm-up iterations'. "
        "Memory (GB) as printed, taken as GiB: which statistic (max allocated or reserved, which rank) is not "
        "stated."
    )
    base_inferred = (
        "tp(1) and dp(1): Table 3's 'Pipelines (GPUs)' equals the GPU count;global_batch_sequences(micro_batch x "
        "micro-batches, DP 1);vpp(1: plain 1F1B);precision(fp16: --fp16 in examples/pretrain_zero_bubble.sh, "
        "branch arxiv);activation_recompute(none: no recompute flag there);zero_stage_or_fsdp(none: DP 1, no "
        "--use-distributed-optimizer);attention(eager: no --use-flash-attn)"
    )

    def add(
        table: str, key: str, n: int, mbs: int, m: int, samples: str, mem: int | None, setup: str
    ) -> None:
        shape = SHAPES[key]
        out.append(
            make_row(
                next(next_id),
                ZERO_BUBBLE,
                shape,
                detail=f"{table}; 1F1B row, {shape.name.split()[1]} on {n} GPUs, micro-batch {mbs}, "
                f"{m} micro-batches",
                seq=seq,
                gbs=mbs * m,
                mbs=mbs,
                gpu=A100_80,
                n=n,
                tp=1,
                pp=n,
                vpp=1,
                zero="none (DP 1)",
                recompute="none",
                precision="fp16 mixed",
                reported=f"{setup};schedule(1F1B, Megatron-LM's);tokens_per_sec_per_gpu(samples per GPU per "
                f"second {samples} x seq_len {seq})"
                + ("" if mem is None else f";peak_mem_gib_per_gpu(Memory (GB) {mem})"),
                inferred=base_inferred
                + ("" if setup == T4_SETUP else ";" + RESTATED_SETUP)
                + f";arch({shape.inferred})",
                notes=f"Printed: {samples} samples per GPU per second"
                + ("" if mem is None else f", {mem} GB")
                + ". "
                + stack_notes,
                tokens_per_gpu=float(samples) * seq,
                mem_gib=None if mem is None else float(mem),
            )
        )

    # Table 4 'Experiment result details' (Section 5.2), setup from Table 3: layers, heads, hidden, sequence 1024,
    # pipelines = GPUs, micro-batch size, micro-batches. The 1F1B-I cells (throughput, memory) are printed beside
    # 1F1B's and kept here; the docstring says why they are not rows.
    table4 = (
        "arXiv 2401.10241v1 Table 4 'Experiment result details', setup from Table 3 (ICLR 2024 Tables 3-4)"
    )
    for key, n, mbs, ms, plain, plain_mem, _interleaved, _interleaved_mem in (
        ("zb_1p5b", 8, 6, (24, 32, 64), ("11.8", "12.5", "13.6"), 30, ("13.1", "13.4", "13.9"), 40),
        ("zb_6p2b", 8, 3, (24, 32, 64), ("3.50", "3.70", "4.03"), 39, ("4.01", "4.08", "4.19"), 48),
        ("zb_14p6b", 16, 1, (48, 64, 128), ("1.40", "1.49", "1.64"), 32, ("1.54", "1.59", "1.66"), 39),
        ("zb_28p3b", 32, 1, (96, 128, 256), ("0.76", "0.80", "0.88"), 43, ("0.82", "0.85", "0.90"), 58),
    ):
        for m, samples in zip(ms, plain, strict=True):
            add(table4, key, n, mbs, m, samples, plain_mem, T4_SETUP)

    # Table 6 (Section 6.1, ZB-V against 1F1B 'under the same memory consumption'; arXiv only). Section 6 does not
    # restate the shapes: Table 3's models (the fork's efficiency.py arxiv_bubble_rates lists h/a/l 4096/32/32,
    # 5120/40/48, 6144/48/64 for these setups, the same models padded by two layers), sequence 1024.
    table6 = (
        "arXiv 2401.10241v1 Table 6 (Section 6.1, 1F1B vs ZB-V at the same memory; not in the ICLR version)"
    )
    t6_setup = "model;n_gpus(#GPU);pp(#Stage p, Table 8);micro_batch(b);micro-batches(m)"
    for key, n, mbs, ms, values, mem in (
        ("zb_6p2b", 16, 6, (48, 64, 128), ("3.38", "3.57", "3.91"), 61),
        ("zb_14p6b", 24, 2, (72, 96, 192), ("1.52", "1.61", "1.76"), 44),
        ("zb_28p3b", 32, 2, (96, 128, 256), ("0.82", "0.87", "0.95"), 69),
    ):
        for m, samples in zip(ms, values, strict=True):
            add(table6, key, n, mbs, m, samples, mem, t6_setup)

    # Table 7 (Section 6.1, 'Improvement when double the size of each microbatch'; arXiv only): only the smaller
    # micro-batch of 6.2B and 14.6B is new; its larger one repeats Table 6 (3.57, 1.61, 0.87), and 28.3B at b = 1,
    # m = 128 (0.80) is Table 4's setting and value, so neither is gathered twice. No memory printed.
    table7 = "arXiv 2401.10241v1 Table 7 (Section 6.1, micro-batch size ablation; not in the ICLR version)"
    for key, n, mbs, m, samples in (("zb_6p2b", 16, 3, 64, "3.48"), ("zb_14p6b", 24, 1, 96, "1.47")):
        add(table7, key, n, mbs, m, samples, None, t6_setup)

    # Table 11 (Appendix F, 1F1B at twice Table 3's micro-batch, at ZB-2p's memory). Its middle 14.6B and 28.3B
    # rows print m = 32, while the ZB-2p values beside them (1.83; 1.00) are Table 4's at m = 64 and 128: the
    # printed m is doubtful and those two 1F1B rows (1.62 and 0.85) are not gathered.
    table11 = "arXiv 2401.10241v1 Table 11 (Appendix F; ICLR 2024 Table 8)"
    appendix_setup = "model;pp(p) = n_gpus;micro-batches(m);micro_batch(b)"
    for key, n, mbs, points, mem in (
        ("zb_1p5b", 8, 12, ((24, "12.0"), (32, "12.6"), (64, "13.8")), 57),
        ("zb_6p2b", 8, 6, ((24, "3.56"), (32, "3.76"), (64, "4.09")), 66),
        ("zb_14p6b", 16, 2, ((48, "1.53"), (128, "1.78")), 50),
        ("zb_28p3b", 32, 2, ((96, "0.81"), (256, "0.94")), 72),
    ):
        for m, samples in points:
            add(table11, key, n, mbs, m, samples, mem, appendix_setup)

    # Table 12 (Appendix H, few micro-batches, m <= p).
    table12 = "arXiv 2401.10241v1 Table 12 (Appendix H, m <= p; ICLR 2024 Table 9)"
    for key, n, mbs, points in (
        ("zb_1p5b", 8, 6, ((2, "3.56", 11), (4, "5.74", 18), (8, "8.26", 29))),
        ("zb_6p2b", 8, 3, ((2, "1.04", 21), (4, "1.69", 28), (8, "2.45", 39))),
        ("zb_14p6b", 16, 1, ((4, "0.39", 19), (8, "0.65", 24), (16, "0.95", 32))),
    ):
        for m, samples, mem in points:
            add(table12, key, n, mbs, m, samples, mem, appendix_setup)
    return out


def ds4sci_longseq_rows(next_id: Iterator[int]) -> list[dict[str, str]]:
    """DeepSpeed4Science long-sequence support (microsoft/Megatron-DeepSpeed, 2023-09): the 'New Megatron-DeepSpeed'
    column of the README's table, one row per printed sequence length (2k-256k), TFLOPS per GPU at TP 32 on 4 DGX
    A100-40GB nodes ('connected through 8 HDR InfiniBand (200Gb/s per HDR)').

    The table does not name the model; the README offers two scripts (GPT 1.3B and GPT 30B), and only the 30B one
    sets mp_size=32 (the 1.3B one sets 8, and its 16 heads cannot be split 32 ways), so the rows are the 30B
    script's. Its flags at commit cc3a94c6: TP 32, PP 1 (--no-pipeline-parallel), ZeRO stage 0, micro-batch 1,
    global batch 2 (DP 1, so two micro-batches accumulated), --sequence-parallel, --use-flash-attn-triton, --fp16,
    --checkpoint-activations with --deepspeed-activation-checkpointing (every layer), learned positions
    (--max-position-embeddings = seq, the table partitioned across the TP ranks), GPT-2 BPE vocabulary, 4h GeLU
    MLP; the sequence length is the script's n_k x 1024. The TFLOPS are read as what the script's training log
    prints (throughput_calculator, which counts the recompute forward); tokens/s are derived from them with that
    same count (ds4sci_flops_per_token).

    Not gathered: the 'Old Megatron-DeepSpeed' column (25 and 28 TFLOPS at 2k and 4k, TP 32; the pre-rebase code,
    whose script for this table is not given) and its OoM cells (not measurements)."""
    out: list[dict[str, str]] = []
    layers, hidden, heads, vocab = DS4SCI_LAYERS, DS4SCI_HIDDEN, DS4SCI_HEADS, DS4SCI_VOCAB
    n_gpus, tp, gbs, mbs = 32, DS4SCI_TP, 2, 1
    notes_stack = (
        "Stack: microsoft/Megatron-DeepSpeed after its July-2023 rebase on Megatron-LM (legacy megatron/model GPT, "
        "no Transformer Engine), DeepSpeed engine with ZeRO stage 0 and fp16 (ds_config_gpt_TEMPLATE.json: dynamic "
        "loss scale, flops_profiler on at step 1), Megatron tensor parallelism 32 across the 4 nodes with Megatron "
        "sequence parallelism, no pipeline (--no-pipeline-parallel), the Triton flash-attention kernel (--use-flash-attn-triton, "
        "flash-attn 1.0.4 with OpenAI Triton's legacy backend per the README), DeepSpeed's (older) activation "
        "checkpointing of every layer, --no-async-tensor-model-parallel-allreduce, CUDA_DEVICE_MAX_CONNECTIONS=1. "
        "The README prints only the sequence length, TP and TFLOPS per GPU; the model (the 30B script: 64 layers, "
        "hidden 6144, 64 heads), batch, precision, recompute and attention are that script's. Cluster: 4 NVIDIA DGX "
        "A100-40GB nodes, 8 HDR InfiniBand (200 Gb/s each), the catalog's dgx-a100-40gb node. Software versions "
        "(DeepSpeed, PyTorch) are not stated. TFLOPS counting: throughput_calculator of that commit (24 x 4 x "
        "B s L h^2 (1 + s/6h + V/16Lh), V the padded 53,248), which counts the recompute forward and full "
        "attention; tokens/s here = printed TFLOPS / that count per token."
    )
    inferred = (
        "model(the table names none: the README's 30B script, the one of its two with mp_size=32);n_layers/hidden/"
        "n_heads(64/6144/64, that script);ffn_hidden(4h, Megatron default);vocab(50257 GPT-2 BPE, gpt2-vocab.json in "
        "the script; padded to 53248 in the model);seq_len(n_k x 1024 for the printed '2k'...'256k');"
        "global_batch_sequences(2) and micro_batch(1)(script);pp(1) and dp(1)(script: pp_size=1, --no-pipeline-"
        "parallel; 32 GPUs / TP 32);precision(fp16, script and ds config);activation_recompute(full, every layer: "
        "--checkpoint-activations --deepspeed-activation-checkpointing);sequence_parallel(--sequence-parallel);"
        "zero_stage_or_fsdp(stage 0);attention(flash: --use-flash-attn-triton);tflops_accounting(the script's "
        "training log, throughput_calculator, read as the source of the printed figure);tokens_per_sec_per_gpu("
        "derived: printed TFLOPS x 1e12 / ds4sci_flops_per_token(seq));step_time_s(derived)"
    )
    for label, n_k, tflops in (
        ("2k", 2, 68.0),
        ("4k", 4, 80.0),
        ("8k", 8, 86.0),
        ("16k", 16, 92.0),
        ("32k", 32, 100.0),
        ("64k", 64, 106.0),
        ("128k", 128, 119.0),
        ("256k", 256, 94.0),
    ):
        seq = 1024 * n_k
        shape = Shape(
            "GPT 30B (Megatron-DeepSpeed DS4Sci script)",
            _gpt_params(layers, hidden, vocab, seq),
            layers,
            hidden,
            heads,
            heads,
            4 * hidden,
            vocab,
            "arch from pretrain_gpt_30B_seq_parallel.sh (commit cc3a94c6); learned positions of seq_len",
        )
        out.append(
            make_row(
                next(next_id),
                DS4SCI_LONGSEQ,
                shape,
                detail=f"README table, 'New Megatron-DeepSpeed (TFLOPS)' column, Sequence Length {label}, "
                f"'{tflops:g} (TP size=32)'",
                seq=seq,
                gbs=gbs,
                mbs=mbs,
                gpu=A100_40,
                n=n_gpus,
                tp=tp,
                pp=1,
                vpp=1,
                zero="none (ZeRO stage 0, DP 1)",
                recompute="full (every layer; DeepSpeed activation checkpointing), sequence-parallel",
                precision="fp16 mixed",
                reported=f"seq_len('{label}');tp(32);n_gpus(4 DGX A100-40GB nodes);measured_tflops_per_gpu({tflops:g})",
                inferred=inferred + f";arch({shape.inferred})",
                notes=f"Printed: {tflops:g} TFLOPS at sequence length {label}, TP size 32. " + notes_stack,
                tflops=tflops,
                accounting="Megatron-DeepSpeed throughput_calculator: 96 B s L h^2 (1 + s/6h + V/16Lh) per step "
                "(recompute forward counted, full attention, padded vocab)",
                tokens_per_gpu=tflops * 1e12 / ds4sci_flops_per_token(seq),
            )
        )
    return out


def titan_405b_rows(next_id: Iterator[int]) -> list[dict[str, str]]:
    """torchtitan docs/performance.md, 'Llama 3.1 performance numbers' (added by PR #554 at 9515a140b on
    2024-08-22, corrected by PR #556 at 3faaa1a0d on 2024-08-23; unchanged until d4c86e3 replaced the page on
    2025-01-30): WPS (tokens/s per GPU) and MFU of Llama 3.1 405B with 2D parallelism on 128 H100, local batch 2,
    global batch 32 (the text: 2 x 16 FSDP ranks), full AC, one row per printed line (optimizations None, Float8,
    Float8 + Async TP). Not printed, from the commits: seq_len 8192, TP 8 (FSDP -1 = 16), norm_type rmsnorm,
    FSDP2 MixedPrecisionPolicy bf16 params / fp32 reduce, loss parallel and sequence-parallel norms of the TP
    plan (parallelize_llama.py), torchao Float8Linear with dynamic tensor-wise scaling, FP8 FSDP all-gather and
    precomputed scales (the [float8] section PR #554 added to llama3_405b.toml)."""
    out: list[dict[str, str]] = []
    fp8 = "fp8 (torchao float8 tensorwise dynamic scaling, fp8 all-gather, precomputed scales)"
    compile_notes = {
        "None": (
            False,
            "compile(no: not printed; read from llama3_405b.toml before PR #554, compile = false, which that PR "
            "switched on together with float8 and async TP, the optimizations the next rows name)",
        ),
        "Float8": (
            True,
            "compile(yes: not printed; the preset PR #554 committed with these figures sets compile = true and "
            "torchtitan/float8.py at that commit says Float8 is meant to run under torch.compile)",
        ),
        "Float8 + Async TP": (
            True,
            "compile(yes: parallelize_llama.py raises 'Async TP requires --training.compile')",
        ),
    }
    table = [
        # printed optimizations, WPS, MFU % (the PR #556 values), WPS and MFU of the first print (PR #554)
        ("None", 109, 29.0, (118, "37.1%")),
        ("Float8", 177, 23.46, (177, "27.77%")),
        ("Float8 + Async TP", 185, 24.52, (185, "29.03%")),
    ]
    for printed, wps, mfu, (first_wps, first_mfu) in table:
        is_fp8 = printed != "None"
        compiled, compile_inferred = compile_notes[printed]
        out.append(
            make_row(
                next(next_id),
                TITAN_405B,
                SHAPES["llama31_405b"],
                detail=f"'Llama 3.1 performance numbers' table, 405B, batch size 2, full AC, optimizations "
                f"'{printed}' ({wps} WPS, {mfu}% MFU), file at commit 3faaa1a0d (2024-08-23)",
                seq=8192,
                gbs=32,
                mbs=2,
                gpu=H100_TITAN,
                n=128,
                tp=8,
                pp=1,
                zero="FSDP2 16-way (x TP 8)",
                recompute="full",
                precision=fp8 if is_fp8 else "bf16",
                reported="model size(405B, Llama 3.1);n_gpus(128 H100, 94GB memory);2D parallelism (FSDP2 + TP);"
                "batch size(local 2);global_batch_sequences(2 x 16 FSDP ranks = 32, the text);activation "
                "checkpointing(full);optimizations(None / Float8 / Float8 + Async TP);tokens_per_sec_per_gpu(WPS);"
                "measured_mfu_pct",
                inferred="arch (torchtitan llama3 405B flavor: dim 16384, 126 layers, 128 heads, 8 KV heads, ffn "
                "53248; vocab 128256);seq_len(8192, train_configs/llama3_405b.toml);tp(8) and FSDP degree (16: "
                "tensor_parallel_degree = 8, data_parallel_degree = -1 in that preset; the text's 16 FSDP ranks);"
                f"{compile_inferred};"
                + (
                    "precision(torchao Float8Linear, dynamic tensor-wise scaling, FSDP float8 all-gather, precomputed "
                    "scales: the preset's [float8] section);"
                    if is_fp8
                    else "precision(bf16 params, fp32 gradient reduce: MixedPrecisionPolicy defaults);"
                )
                + "gpu variant and system (Grand Teton H100 96 GB HBM2e at 500 W, the page's 2025 description of "
                "its H100 hosts; this table says only '128 H100 (94GB memory)' and 'HBM2e based lower TDP SXM "
                "H100(95GB)');step_time_s",
                notes=f"Optimizations printed as '{printed}'. WPS is train.py's per-GPU figure (the rank's tokens "
                "over the log interval's time, divided by the model-parallel size); the iteration it was read at is "
                "not printed. Printed MFU = WPS x (6 x non-embedding parameters + 12·L·h·s) over "
                + ("1979 (FP8 dense SXM)" if is_fp8 else "989 (bf16 dense SXM)")
                + " TFLOP/s; derived_mfu_pct counts the embedding too. The page's footnote: the GPUs are HBM2e, "
                "lower-TDP SXM H100s whose peak lies between SXM and NVL, so the MFU is below the true one"
                + (
                    "; and for Float8 the attention matmuls stay in bf16, so the FP8-peak MFU is lower than expected. "
                    "The FP8 FSDP all-gather has no column here (the torchtitan_h200_trainy rows ran it too)"
                    if is_fp8
                    else ""
                )
                + ". TP plan: sequence-parallel norms, loss parallel; SDPA is_causal attention (flash kernel); "
                "rmsnorm (not the fused Triton one) per the preset. "
                + (
                    "Async TP: torch.compile's micro-pipelined TP collectives (tp_comm_overlap yes). "
                    if printed.endswith("Async TP")
                    else ""
                )
                + f"The first print (9515a140b, 2024-08-22) read {first_wps} WPS and {first_mfu} MFU (against the "
                "then NVL-sized peak); PR #556 corrected the MFU to the SXM peak the next day"
                + (
                    " and printed 109 WPS for this line without saying why; the corrected value is gathered"
                    if first_wps != wps
                    else ""
                )
                + ". Memory not printed.",
                tokens_per_gpu=wps,
                compiled=compiled,
                tp_overlap=printed.endswith("Async TP"),
                measured_mfu_pct=f"{mfu:.2f}",
            )
        )
    return out


if __name__ == "__main__":
    OUTPUT.write_text(render())
    print(f"wrote {OUTPUT} ({len(rows())} rows)")
