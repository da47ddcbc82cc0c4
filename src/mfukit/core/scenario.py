"""The scenario file: one input (TOML, or YAML) for size, estimate, plan, ft and report.

Every section is optional except ``model``. Command-line flags override fields: they are applied on top
of the file and validated again, so an error names the flag when the flag is at fault and the file and
field otherwise. Names (presets, systems, GPUs) are resolved against the catalog by
:mod:`mfukit.catalog.resolve`; this module only checks shapes and units.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import yaml
from pydantic import Field, PlainSerializer, PlainValidator, ValidationError, ValidationInfo, field_validator

from mfukit import units
from mfukit.core.parallelism import Parallelism
from mfukit.core.schema import (
    MAX_POSITIVE_INT,
    BytesPerSecond,
    Count,
    FailureRate,
    Fraction,
    GpuCount,
    PositiveInt,
    Seconds,
    Strict,
    Usd,
    input_error_from,
)
from mfukit.errors import InputError

Precision = Literal["bf16", "fp16", "fp8", "fp32"]
# the precision each of torch's dtype names means (a config's torch_dtype, a runs file's precision cell)
TORCH_DTYPE_PRECISIONS: dict[str, Precision] = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
AttentionConvention = Literal["full", "causal"]
Fp8Recipe = Literal["delayed", "current"]
OptimizerStepDevice = Literal["cpu", "gpu"]
NormKernel = Literal["fused", "eager"]
# The software stacks the performance model tells apart (mfukit.perf.efficiency has a profile for each).
Stack = Literal["megatron-core", "nemo", "megatron-deepspeed", "deepspeed", "torchtitan", "fsdp", "nanotron"]
STACKS: tuple[Stack, ...] = get_args(Stack)
# the names users write for them (compared lower-case, with '_' and ' ' read as '-')
STACK_ALIASES: dict[str, Stack] = {
    "megatron": "megatron-core",
    "megatron-lm": "megatron-core",
    "mcore": "megatron-core",
    "nemo-megatron": "nemo",
    "megatron-bridge": "nemo",
    "nvidia-nemo": "nemo",
    "deepspeed-zero": "deepspeed",
    "megatron-ds": "megatron-deepspeed",
    "pytorch-fsdp": "fsdp",
    "llm-foundry": "fsdp",
    "composer": "fsdp",
}


def stack_alias(name: str) -> str:
    """The stack ``name`` means (aliases and spelling folded), or ``name`` itself when it means none."""
    folded = name.strip().lower().replace("_", "-").replace(" ", "-")
    if folded in STACKS:
        return folded
    return STACK_ALIASES.get(folded, name)


@dataclass(frozen=True)
class CheckpointInterval:
    """A checkpoint interval parsed at load: a duration in seconds or a count of optimizer steps, with the
    text the user wrote (for messages and for writing the scenario back)."""

    text: str
    seconds: float | None = None
    steps: float | None = None


def parse_interval(value: object) -> CheckpointInterval:
    """``"30min"`` -> 1800 s; ``"500steps"`` -> 500 steps. ValueError otherwise."""
    if isinstance(value, CheckpointInterval):
        return value
    if not isinstance(value, str):
        raise ValueError(f'{value!r} is not a duration ("30min") or steps ("500steps")')
    text = value.strip()
    if text.endswith(("steps", "step")):
        number = text.removesuffix("steps").removesuffix("step").strip()
        try:
            steps = float(number)
        except ValueError:
            raise ValueError(f'{value!r} is not a step count; expected e.g. "500steps"') from None
        if steps < 1:
            raise ValueError("a checkpoint interval must be at least 1 step")
        return CheckpointInterval(value, steps=steps)
    try:
        return CheckpointInterval(value, seconds=units.parse_duration_s(text))
    except InputError as error:
        raise ValueError(f'{error.message}; expected a duration ("30min") or steps ("500steps")') from None


# a checkpoint interval field: parsed once, when the scenario loads; written back as the user's text
Interval = Annotated[
    CheckpointInterval, PlainValidator(parse_interval), PlainSerializer(lambda interval: interval.text)
]


def sequences_in(tokens: float, seq_len: int) -> int:
    """The whole sequences of ``seq_len`` tokens a batch of ``tokens`` holds (at least one)."""
    return max(1, int(tokens // seq_len))


class TrainingSection(Strict):
    tokens: Count | None = Field(default=None, description="tokens to train on (the whole run)")
    seq_len: PositiveInt = Field(default=2048, description="tokens per sequence")
    global_batch_tokens: Count | None = Field(
        default=None,
        description="global batch in tokens (rounded to whole sequences, and by a layout to whole "
        "micro-batches per DP rank, by at most 10 %)",
    )
    global_batch_size: PositiveInt | None = Field(default=None, description="sequences per optimizer step")
    micro_batch_size: PositiveInt = Field(
        default=1,
        description="sequences per micro-batch per GPU; given: fixed, left out: the planner searches it "
        "(size and plan), 1 elsewhere",
    )
    precision: Precision = Field(
        default="bf16",
        description="training precision of the matmuls (mixed precision keeps fp32 master weights)",
    )
    deadline_s: Seconds | None = Field(
        default=None, alias="deadline", description="wall-clock target for `size` and `plan`"
    )
    attention_flops: AttentionConvention = Field(
        default="full",
        description="attention FLOP convention: full s^2 (PaLM / Megatron 2021) or causal-halved (Megatron since "
        "2025-03)",
    )
    framework: Stack = Field(
        default="megatron-core",
        description="the software stack that trains: its fitted overheads, overlaps, sharding implementation "
        "and fused kernels (" + ", ".join(STACKS) + "; megatron = megatron-core)",
    )
    compile: bool = Field(
        default=False,
        description="torch.compile of the model (Inductor): element-wise ops fuse into few kernels",
    )
    tp_comm_overlap: bool | None = Field(
        default=None,
        description="TP collectives split into chunks that overlap the GEMMs they feed (torchtitan's async TP, "
        "Megatron's --tp-comm-overlap); needs sequence parallelism; default: what the stack's recipes set "
        "(on for megatron-core and nemo with SP, off otherwise)",
    )
    fp8_all_gather: bool | None = Field(
        default=None,
        description="with precision fp8, the data-parallel all-gathers of the weights move FP8 (1 B) instead of "
        "16 bits: Megatron's --fp8-param-gather (FP8 primary weights: no cached FP8 copy beside 16-bit ones), "
        "torchao's float8.enable_fsdp_float8_all_gather (each rank casts its own FSDP shard before the gather); "
        "only megatron-core, nemo and torchtitan have one; default: the stack's (on for nemo, off otherwise)",
    )
    fp8_recipe: Fp8Recipe = Field(
        default="delayed",
        description="FP8 scaling under Transformer Engine (precision = fp8): delayed (the amax of past steps; the "
        "norm and activation kernels emit FP8, Megatron-Core's default) or current (each tensor's own amax first, "
        "one more pass over every FP8 input: Float8CurrentScaling, NeMo / Megatron-Bridge 'FP8-CS' recipes); "
        "torchtitan's torchao recipe is its own",
    )
    offload_optimizer: Fraction = Field(
        default=0.0,
        description="share of the optimizer states (fp32 master + Adam) kept in host memory: DeepSpeed "
        'offload_optimizer, Megatron --optimizer-cpu-offload --optimizer-offload-fraction (0..1 or "50%"); '
        "where they are stepped: offload_optimizer_step",
    )
    offload_optimizer_step: OptimizerStepDevice = Field(
        default="cpu",
        description="where offloaded optimizer states are stepped: cpu (the host runs Adam on them and sends "
        "the 16-bit weights back; DeepSpeed's fp32 gradient partition moves to the host too: ZeRO-Offload, "
        "Megatron --optimizer-cpu-offload) or gpu (they stream back to the GPU, which steps them: DeepSpeed "
        "DeepCompile offload_adam_states, Megatron-Core's OptimizerStateOffloader)",
    )
    offload_params: Fraction = Field(
        default=0.0,
        description="share of the sharded parameters (ZeRO-3 / FSDP layouts) kept in host memory and fetched for "
        "each pass: ZeRO-Infinity offload_param, FSDP2 CPUOffloadPolicy",
    )
    offload_activations: Fraction = Field(
        default=0.0,
        description="share of the layers whose stored activations go to host memory until their backward: "
        "Megatron/NeMo --cpu-offloading-num-layers / num_layers",
    )
    norm: NormKernel | None = Field(
        default=None,
        description="the norm kernel: fused (apex / Triton RMSNorm, one kernel that keeps its input and per-row "
        "statistics: torchtitan's 2024 fused_rmsnorm) or eager (composite ops that also keep the normalised "
        "output); default: the stack's (data/memory_stacks.toml)",
    )
    attention: Literal["flash", "eager"] = Field(
        default="flash",
        description="attention kernel: flash (FlashAttention / cuDNN fused: keeps the output and a log-sum-exp "
        "per row) or eager (softmax(QK^T)V in separate kernels: stores the s^2 scores and runs slower; "
        "2021-22 runs)",
    )
    attention_dropout: Fraction = Field(
        default=0.0,
        lt=1.0,
        description="probability of dropping an attention probability (Megatron --attention-dropout, NeMo and "
        "HF attention_dropout): with eager attention, above 0 stores a 1-byte mask and the dropped copy of the "
        "s^2 scores and moves them through HBM (Korthikanti et al. 2022, sec. 4.1); flash attention regenerates "
        "its mask in backward. Llama-family recipes use 0; Megatron-LM's own default is 0.1",
    )
    hidden_dropout: Fraction = Field(
        default=0.0,
        lt=1.0,
        description="probability of dropping a hidden activation after attention, after the MLP and after the "
        "embedding (Megatron --hidden-dropout, NeMo hidden_dropout, HF resid_pdrop): above 0, each keeps a "
        "1-byte mask per element (Korthikanti et al. 2022, sec. 4.1). Llama-family recipes use 0; Megatron-LM's "
        "own default is 0.1",
    )

    @field_validator("framework", mode="before")
    @classmethod
    def _stack_alias(cls, value: object) -> object:
        return stack_alias(value) if isinstance(value, str) else value

    @field_validator("global_batch_tokens")
    @classmethod
    def _batch_in_range(cls, tokens: float | None, info: ValidationInfo) -> float | None:
        # a batch given in tokens is bounded as one given in sequences (PositiveInt): 10^15 tokens had sent the
        # planner through 10^11 candidate micro-batch sizes
        seq_len = info.data.get("seq_len")
        if (
            tokens is not None
            and isinstance(seq_len, int)
            and sequences_in(tokens, seq_len) > MAX_POSITIVE_INT
        ):
            raise ValueError(f"more than {MAX_POSITIVE_INT:,} sequences of {seq_len:,} tokens per step")
        return tokens

    @property
    def global_batch_sequences(self) -> int | None:
        """Sequences per step: given directly, or whole sequences in ``global_batch_tokens``."""
        if self.global_batch_size is not None:
            return self.global_batch_size
        if self.global_batch_tokens is not None:
            return sequences_in(self.global_batch_tokens, self.seq_len)
        return None

    @property
    def tokens_per_step(self) -> int | None:
        """Tokens per optimizer step: the whole sequences of :attr:`global_batch_sequences` x ``seq_len``."""
        sequences = self.global_batch_sequences
        return sequences * self.seq_len if sequences is not None else None


class ClusterSection(Strict):
    system: str | None = Field(default=None, description="node preset from the catalog")
    gpu: str | None = Field(default=None, description="accelerator; picks its default node when no system")
    num_gpus: GpuCount | None = Field(default=None, description="GPUs in the job")
    num_nodes: GpuCount | None = Field(
        default=None, description="nodes in the job (GPUs = nodes x the system's GPUs per node)"
    )
    storage: str | None = Field(
        default=None, description="checkpoint storage tier from the catalog (`mfukit catalog list storage`)"
    )
    node_failure_rate_per_s: FailureRate | None = Field(
        default=None,
        ge=0,
        alias="failure_rate_per_1000_node_days",
        description="a flat node failure rate instead of a failure model",
    )
    nics_per_node: int | None = Field(default=None, ge=0, description="override the system's NIC count")
    nic_bytes_per_s: BytesPerSecond | None = Field(
        default=None, alias="nic_rate", description="override the system's NIC rate (per NIC, per direction)"
    )
    pue: float = Field(default=1.2, ge=1.0, le=3.0, description="data-centre power usage effectiveness")
    usd_per_gpu_hour: Usd | None = Field(default=None, description="price of one GPU-hour, for the cost")
    hbm_headroom: str | None = Field(
        default=None,
        description='HBM kept free per GPU, as a share ("5%") or a size ("4GiB"): estimate warns when the peak '
        "is inside it and plan rejects such layouts; default 5 % (room for allocator spikes, NCCL buffers "
        "created on first use, an eval step)",
    )

    @field_validator("hbm_headroom")
    @classmethod
    def _headroom_is_share_or_size(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                parse_headroom(value)
            except InputError as error:
                raise ValueError(f"{error.message}; expected {error.expected}") from None
        return value


class FtSection(Strict):
    failure_model: str = Field(default="llama3", description="a shipped failure preset or a TOML file path")
    checkpoint_interval: Interval | None = Field(
        default=None, description="how often to save; omitted: Daly's optimum for the failure rate"
    )
    checkpoint_mode: Literal["sync", "async", "single"] = Field(
        default="async",
        description="sync: every rank writes its shard; async: snapshot to host, persist in background; "
        "single: the full state gathered to one rank that writes it",
    )
    checkpoint_state: Literal["auto", "fsdp", "megatron", "deepspeed"] = Field(
        default="auto", description="which framework's resumable state decides the bytes per parameter"
    )
    checkpoint_blocking_s: Seconds | None = Field(
        default=None,
        alias="checkpoint_blocking",
        description="training time one save blocks; omitted: computed from the state and storage",
    )
    restart_s: Seconds | None = Field(
        default=None,
        alias="restart",
        description="failure to training again, in one; omitted: the sum of detection, init, load and "
        "fast-forward",
    )
    detection_s: Seconds | None = Field(default=None, alias="detection", description="failure -> job knows")
    replacement_s: Seconds | None = Field(
        default=None, alias="replacement", description="getting a replacement node when no spare is free"
    )
    repair_s: Seconds | None = Field(
        default=None, alias="repair", description="a failed node back in the spare pool; omit: never"
    )
    init_s: Seconds | None = Field(default=None, alias="init", description="process start, rendezvous, NCCL")
    fast_forward_s: Seconds | None = Field(
        default=None, alias="fast_forward", description="data-loader fast-forward after a load"
    )
    hot_spares: int = Field(default=0, ge=0, description="spare nodes ready to replace a failed one")
    goodput: Fraction | None = Field(default=None, description="flat goodput allowance when no failure model")
    rate_per_unit_s: dict[str, FailureRate] = Field(
        default_factory=dict,
        alias="rates",
        description="per-category overrides, failures per 1,000 unit-days (unit: the category's gpu/node/job)",
    )
    failure_distribution: Literal["exponential", "weibull"] = Field(
        default="exponential", description="time between failures: exponential, or Weibull with weibull_shape"
    )
    weibull_shape: float | None = Field(
        default=None, gt=0, le=5, description="Weibull shape k (k < 1: failures cluster early)"
    )
    step_time_s: Seconds | None = Field(default=None, alias="step_time", description="failure-free step time")
    mfu: Fraction | None = Field(default=None, description="MFU that derives the step time when not given")
    work_s: Seconds | None = Field(
        default=None, alias="work", description="failure-free training time; default from tokens"
    )
    straggler_rate_per_node_s: FailureRate = Field(
        default=0.0,
        ge=0,
        alias="straggler_rate_per_1000_node_days",
        description="straggler episodes per 1,000 node-days",
    )
    straggler_slowdown: Fraction = Field(default=0.0, description="throughput lost while a straggler runs")
    straggler_duration_s: Seconds | None = Field(
        default=None, alias="straggler_duration", description="how long one straggler episode lasts"
    )


def parse_headroom(value: str) -> tuple[Literal["share", "bytes"], float]:
    """``"5%"`` -> ("share", 0.05); ``"4GiB"`` -> ("bytes", 4 * 2**30). InputError otherwise."""
    text = str(value).strip()
    if text.endswith("%"):
        share = units.parse_fraction(text, field="cluster.hbm_headroom")
        if share >= 1.0:
            raise InputError(
                "must leave some HBM to use", field="cluster.hbm_headroom", value=value, expected='e.g. "5%"'
            )
        return "share", share
    return "bytes", units.parse_bytes(text, field="cluster.hbm_headroom")


class Scenario(Strict):
    model: dict[str, Any] = Field(description="preset, hf_config, or inline HF-style fields")
    training: TrainingSection = Field(default_factory=TrainingSection)
    cluster: ClusterSection = Field(default_factory=ClusterSection)
    parallelism: Parallelism | None = None
    ft: FtSection = Field(default_factory=FtSection)


def read_document(path: Path) -> dict[str, Any]:
    """A TOML or YAML file as a dict; a missing, unreadable or malformed file is an InputError."""
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8-sig")  # a UTF-8 BOM (Windows editors) is not content
    except FileNotFoundError:
        raise InputError("file not found", source=source, hint="check the path") from None
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"cannot read file: {error}", source=source) from None
    if path.suffix.lower() in {".yaml", ".yml"}:
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            raise InputError(
                f"malformed YAML{where}: {getattr(error, 'problem', error)}", source=source
            ) from None
        except RecursionError:
            raise _too_deep(source) from None
    else:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as error:
            raise InputError(
                f"malformed TOML: {error}", source=source, hint="check quoting and brackets"
            ) from None
        except RecursionError:
            raise _too_deep(source) from None
    if not isinstance(data, dict):
        raise InputError("must hold a table of sections at the top level", source=source)
    return data


def _too_deep(source: str) -> InputError:
    return InputError(
        "nests arrays or tables too deeply to read", source=source, hint="a scenario needs two levels at most"
    )


def load_scenario(path: Path | None, overrides: Mapping[str, Any] | None = None) -> Scenario:
    """The scenario in ``path`` (or an empty one) with ``overrides`` ({"training.tokens": "1.4T", ...}) applied.

    Overrides come from flags; each key is a dotted field, each value as the user typed it.
    """
    source = str(path) if path is not None else "command line"
    data = read_document(path) if path is not None else {}
    if path is not None:
        _validate(data, source=source)
    flags = {key: value for key, value in (overrides or {}).items() if value is not None}
    if not flags:
        return _validate(data, source=source)
    merged = _merge(data, flags)
    try:
        return Scenario.model_validate(merged)
    except ValidationError as error:
        problem = error.errors()[0]
        dotted = ".".join(str(part) for part in problem["loc"])
        flag = next((key for key in flags if dotted == key or dotted.startswith(key + ".")), None)
        where = "command line" if flag is not None or path is None else source
        raise input_error_from(error, Scenario, source=where) from None


def _validate(data: dict[str, Any], *, source: str) -> Scenario:
    try:
        return Scenario.model_validate(data)
    except ValidationError as error:
        raise input_error_from(error, Scenario, source=source) from None


def by_section(overrides: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``{"cluster.num_gpus": 8, "ft.mfu": 0.4}`` -> ``{"cluster": {"num_gpus": 8}, "ft": {"mfu": 0.4}}``: the
    one place a dotted override becomes its section and field."""
    found: dict[str, dict[str, Any]] = {}
    for dotted, value in overrides.items():
        section, _, field = dotted.partition(".")
        found.setdefault(section, {})[field] = value
    return found


def _merge(data: dict[str, Any], flags: Mapping[str, Any]) -> dict[str, Any]:
    merged: dict[str, Any] = {
        key: dict(value) if isinstance(value, dict) else value for key, value in data.items()
    }
    for section, fields in by_section(flags).items():
        target = merged.setdefault(section, {})
        if not isinstance(target, dict):
            raise InputError("must be a table", field=section, value=target)
        if section == "model" and fields.keys() & {"preset", "hf_config"}:
            target.pop("preset", None)
            target.pop("hf_config", None)
        target.update(fields)
    return merged
