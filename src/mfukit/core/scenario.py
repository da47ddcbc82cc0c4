"""The scenario file: one input (TOML, or YAML) for size, estimate, plan, ft and report.

Every section is optional except ``model``. Command-line flags override fields: they are applied on top
of the file and validated again, so an error names the flag when the flag is at fault and the file and
field otherwise. Names (presets, systems, GPUs) are resolved against the catalog by
:mod:`mfukit.catalog.resolve`; this module only checks shapes and units.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError, field_validator

from mfukit import units
from mfukit.core.parallelism import Parallelism
from mfukit.core.schema import Count, Fraction, GpuCount, PositiveInt, Seconds, Strict, Usd, input_error_from
from mfukit.errors import InputError

Precision = Literal["bf16", "fp16", "fp8", "fp32"]
AttentionConvention = Literal["full", "causal"]


class TrainingSection(Strict):
    tokens: Count | None = None
    seq_len: PositiveInt = 2048
    global_batch_tokens: Count | None = None
    global_batch_size: PositiveInt | None = Field(default=None, description="sequences per optimizer step")
    micro_batch_size: PositiveInt = 1
    precision: Precision = "bf16"
    deadline_s: Seconds | None = Field(default=None, alias="deadline")
    attention_flops: AttentionConvention = Field(
        default="full",
        description="full s^2 (PaLM / Megatron 2021) or causal-halved (Megatron since 2025-03)",
    )
    framework: str = Field(
        default="megatron",
        description="training framework whose fitted overheads the step-time model uses "
        "(megatron, fsdp, nanotron, torchtitan)",
    )
    compile: bool = Field(
        default=False,
        description="torch.compile of the model (Inductor): element-wise ops fuse into few kernels",
    )
    tp_comm_overlap: bool = Field(
        default=False,
        description="TP collectives split into chunks that overlap the GEMMs they feed (torchtitan's async TP, "
        "Megatron's --tp-comm-overlap); needs sequence parallelism",
    )

    @property
    def global_batch_sequences(self) -> int | None:
        """Sequences per step: given directly, or whole sequences in ``global_batch_tokens``."""
        if self.global_batch_size is not None:
            return self.global_batch_size
        if self.global_batch_tokens is not None:
            return max(1, int(self.global_batch_tokens // self.seq_len))
        return None


class ClusterSection(Strict):
    system: str | None = Field(default=None, description="node preset from the catalog")
    gpu: str | None = Field(default=None, description="accelerator; picks its default node when no system")
    num_gpus: GpuCount | None = None
    num_nodes: GpuCount | None = None
    storage: str | None = None
    failure_rate_per_1000_node_days: float | None = Field(default=None, ge=0)
    nics_per_node: int | None = Field(default=None, ge=0, description="override the system's NIC count")
    nic_rate: str | None = Field(default=None, description='override the NIC rate, e.g. "400Gbps"')
    pue: float = Field(default=1.2, ge=1.0, le=3.0, description="data-centre power usage effectiveness")
    usd_per_gpu_hour: Usd | None = None

    @field_validator("nic_rate")
    @classmethod
    def _rate_has_unit(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                units.parse_bandwidth_bytes_per_s(value)
            except InputError as error:
                raise ValueError(f"{error.message}; expected {error.expected}") from None
        return value


class FtSection(Strict):
    failure_model: str = Field(default="llama3", description="a shipped failure preset or a TOML file path")
    checkpoint_interval: str | None = Field(default=None, description='"30min" or "500steps"; omit for Daly')
    checkpoint_mode: Literal["sync", "async", "single"] = Field(
        default="async",
        description="sync: every rank writes its shard; async: snapshot to host, persist in background; "
        "single: the full state gathered to one rank that writes it",
    )
    checkpoint_state: Literal["auto", "fsdp", "megatron", "deepspeed"] = Field(
        default="auto", description="which framework's resumable state decides the bytes per parameter"
    )
    checkpoint_blocking_s: Seconds | None = Field(default=None, alias="checkpoint_blocking")
    restart_s: Seconds | None = Field(default=None, alias="restart")
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
    rates: dict[str, float] = Field(
        default_factory=dict,
        description="per-category overrides, failures per 1,000 unit-days (unit: the category's gpu/node/job)",
    )
    failure_distribution: Literal["exponential", "weibull"] = "exponential"
    weibull_shape: float | None = Field(default=None, gt=0, le=5)
    step_time_s: Seconds | None = Field(default=None, alias="step_time", description="failure-free step time")
    mfu: Fraction | None = Field(default=None, description="MFU that derives the step time when not given")
    work_s: Seconds | None = Field(
        default=None, alias="work", description="failure-free training time; default from tokens"
    )
    straggler_rate_per_1000_node_days: float = Field(default=0.0, ge=0)
    straggler_slowdown: Fraction = Field(default=0.0, description="throughput lost while a straggler runs")
    straggler_duration_s: Seconds | None = Field(default=None, alias="straggler_duration")

    @field_validator("checkpoint_interval")
    @classmethod
    def _interval_is_time_or_steps(cls, value: str | None) -> str | None:
        if value is not None:
            parse_interval(value)
        return value


def parse_interval(value: str) -> tuple[Literal["s", "steps"], float]:
    """``"30min"`` -> ("s", 1800.0); ``"500steps"`` -> ("steps", 500.0). ValueError otherwise."""
    text = value.strip()
    if text.endswith(("steps", "step")):
        number = text.removesuffix("steps").removesuffix("step").strip()
        try:
            steps = float(number)
        except ValueError:
            raise ValueError(f'{value!r} is not a step count; expected e.g. "500steps"') from None
        if steps < 1:
            raise ValueError("a checkpoint interval must be at least 1 step")
        return "steps", steps
    try:
        return "s", units.parse_duration_s(text)
    except InputError as error:
        raise ValueError(f'{error.message}; expected a duration ("30min") or steps ("500steps")') from None


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


def _merge(data: dict[str, Any], flags: Mapping[str, Any]) -> dict[str, Any]:
    merged: dict[str, Any] = {
        key: dict(value) if isinstance(value, dict) else value for key, value in data.items()
    }
    for dotted, value in flags.items():
        section, _, field = dotted.partition(".")
        target = merged.setdefault(section, {})
        if not isinstance(target, dict):
            raise InputError("must be a table", field=section, value=target)
        if section == "model" and field in {"preset", "hf_config"}:
            target.pop("preset", None)
            target.pop("hf_config", None)
        target[field] = value
    return merged
