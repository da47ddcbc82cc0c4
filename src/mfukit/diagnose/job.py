"""The job being diagnosed: its model, batch, layout and cluster, each value with where it came from.

Flags (and a scenario file) override what the job printed; what it printed (:mod:`.sources.launch_config`:
Megatron/NeMo argument dumps, DeepSpeed's config, torchtitan's job config; the iteration lines' global
batch size; the GPU name in nvidia-smi output or a trace; NCCL's rank count) overrides the defaults. Every
value the diagnosis uses is a :class:`Provenance` (``flag``, ``log``, ``derived`` or ``default``), shown
in the table and the JSON; a default that moves the answer (sequence length, layout, precision) is a
warning, because the MFU and the expected MFU both scale with it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel

from mfukit import catalog
from mfukit.catalog import resolve
from mfukit.catalog.resolve import ResolvedNode
from mfukit.core.cluster import Cluster
from mfukit.core.model import ModelSpec
from mfukit.core.parallelism import Parallelism
from mfukit.core.scenario import TORCH_DTYPE_PRECISIONS, ClusterSection, TrainingSection
from mfukit.diagnose.records import GpuSeries, JobConfig, NcclLog, RankTrace, Record, Setting, TrainingLog
from mfukit.errors import MfukitError

Origin = Literal["flag", "log", "derived", "default"]
MOVES_THE_ANSWER = frozenset({"seq_len", "tp", "pp", "dp", "precision"})

# The framework names the performance model's fitted overheads know (perf/data/efficiency.toml), for the
# stack a log says ran: NeMo runs Megatron-Core; DeepSpeed's closest fitted stack is Megatron-DeepSpeed.
FRAMEWORK_PROFILE = {"megatron": "megatron", "nemo": "megatron", "deepspeed": "megatron-deepspeed",
                     "torchtitan": "torchtitan"}  # fmt: skip
PRECISIONS = {**TORCH_DTYPE_PRECISIONS, "bf16": "bf16", "bf16-mixed": "bf16", "fp16": "fp16", "16-mixed": "fp16",
              "fp8": "fp8", "fp32": "fp32", "32": "fp32"}  # fmt: skip
# torchtitan's llama3 flavors are the Llama 3.1 shapes (torchtitan/models/llama3/__init__.py llama3_args:
# 8B dim 4096 x 32 layers, 70B 8192 x 80, 405B 16384 x 126), which the catalog holds under these names.
TITAN_FLAVORS = {("llama3", "8b"): "llama3.1-8b", ("llama3", "70b"): "llama3.1-70b",
                 ("llama3", "405b"): "llama3.1-405b"}  # fmt: skip
_TOKEN = re.compile(r"[a-z0-9]{1,16}")


@dataclass(frozen=True)
class Provenance:
    name: str
    value: object
    origin: Origin
    where: str

    def as_dict(self) -> dict[str, object]:
        return {"name": self.name, "value": self.value, "origin": self.origin, "where": self.where}


@dataclass
class ResolvedJob:
    model: ModelSpec | None
    training: TrainingSection | None
    parallelism: Parallelism | None
    cluster: Cluster | None
    provenance: list[Provenance] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    framework: str | None = None

    def origin(self, name: str) -> Provenance | None:
        return next((p for p in self.provenance if p.name == name), None)


class _Settings:
    """The first file's value of each key (files in the order they were read)."""

    def __init__(self, configs: list[JobConfig]) -> None:
        self.found: dict[str, tuple[Setting, str]] = {}
        for config in configs:
            for key, setting in config.settings.items():
                self.found.setdefault(key, (setting, config.file))

    def get(self, key: str) -> tuple[object, str] | None:
        held = self.found.get(key)
        if held is None:
            return None
        setting, file = held
        return setting.value, f"{file}:{setting.line}: {setting.text}"


def _given(section: BaseModel | None, name: str) -> bool:
    return section is not None and name in section.model_fields_set


def _precision(settings: _Settings) -> tuple[str, str] | None:
    fp8 = settings.get("fp8")
    if fp8 is not None and fp8[0] not in (None, False):
        return "fp8", fp8[1]
    for key, name in (("bf16", "bf16"), ("fp16", "fp16")):
        held = settings.get(key)
        if held is not None and held[0] is True:
            return name, held[1]
    named = settings.get("precision")
    if named is not None and str(named[0]).lower().removeprefix("torch.") in PRECISIONS:
        return PRECISIONS[str(named[0]).lower().removeprefix("torch.")], named[1]
    return None


def _recompute(value: object) -> str:
    text = str(value).lower()
    return text if text in ("selective", "full") else "none"


def accelerator_named(device: str) -> str | None:
    """The catalog accelerator a device name (``NVIDIA A100-SXM4-80GB``, ``NVIDIA H100 80GB HBM3``) is: the
    one whose name's every token is in the device's (``sxm4`` counts as ``sxm``); the most specific wins."""
    tokens = {re.sub(r"(sxm|pcie)\d$", r"\1", t) for t in _TOKEN.findall(device.lower())}
    if "hbm3" in tokens and "pcie" not in tokens and "nvl" not in tokens:
        tokens.add("sxm")
    best: tuple[int, str] | None = None
    for name in catalog.entries("accelerators"):
        wanted = set(_TOKEN.findall(name.lower()))
        if wanted <= tokens and (best is None or len(wanted) > best[0]):
            best = (len(wanted), name)
    return best[1] if best else None


def _device(records: list[Record], settings: _Settings) -> tuple[str, str] | None:
    printed = settings.get("device_name")
    if printed is not None:
        return str(printed[0]), printed[1]
    for record in records:
        if isinstance(record, GpuSeries) and record.name:
            return record.name, f"{record.file}: GPU name"
        if isinstance(record, RankTrace) and record.device_name:
            return record.device_name, f"{record.file}: device name"
    return None


def _nccl_ranks(records: list[Record]) -> tuple[int, str] | None:
    for record in records:
        if isinstance(record, NcclLog):
            ranks = getattr(record.report, "num_ranks", None)
            if isinstance(ranks, int) and ranks > 0:
                return ranks, f"{record.file}: NCCL nRanks"
    return None


def _model_from(settings: _Settings) -> tuple[ModelSpec, str] | None:
    """The model shape from a Megatron/NeMo argument dump, or a torchtitan flavor the catalog holds."""
    shape = {key: settings.get(key) for key in ("num_layers", "hidden_size", "num_attention_heads",
                                                 "ffn_hidden_size", "vocab_size")}  # fmt: skip
    if all(held is not None for held in shape.values()):
        values = {key: held[0] for key, held in shape.items() if held is not None}
        kv = None
        gqa, groups = settings.get("group_query_attention"), settings.get("num_query_groups")
        if gqa is not None and gqa[0] is True and groups is not None:
            kv = groups[0]
        swiglu = settings.get("swiglu")
        activation = settings.get("activation")
        gated = (swiglu is not None and swiglu[0] is True) or (
            activation is not None and "swiglu" in str(activation[0]).lower()
        )
        untie, tie = settings.get("untie_embeddings"), settings.get("tie_embeddings")
        tied = (tie[0] is True) if tie is not None else not (untie is not None and untie[0] is True)
        positions = settings.get("max_position_embeddings")
        fields: dict[str, object] = {
            "name": "from-launch-config",
            "num_hidden_layers": values["num_layers"],
            "hidden_size": values["hidden_size"],
            "num_attention_heads": values["num_attention_heads"],
            "intermediate_size": values["ffn_hidden_size"],
            "vocab_size": values["vocab_size"],
            "mlp": "swiglu" if gated else "gelu",
            "tie_word_embeddings": tied,
        }
        if kv is not None:
            fields["num_key_value_heads"] = kv
        if positions is not None:
            fields["max_position_embeddings"] = positions[0]
        where = (shape["num_layers"] or ("", ""))[1]
        try:
            return ModelSpec.model_validate(fields), where
        except ValueError:
            return None
    name, flavor = settings.get("model_name"), settings.get("model_flavor")
    if name is not None and flavor is not None:
        preset = TITAN_FLAVORS.get((str(name[0]).lower(), str(flavor[0]).lower()))
        if preset is not None:
            return catalog.model(preset), f"{flavor[1]} (torchtitan {name[0]} {flavor[0]} = {preset})"
    return None


def resolve_job(
    records: list[Record],
    *,
    model: ModelSpec | None,
    training: TrainingSection | None,
    parallelism: Parallelism | None,
    cluster: Cluster | None,
    node: ResolvedNode | None = None,
) -> ResolvedJob:
    """Flags over the job's own printed configuration over defaults (see the module docstring).
    ``node``: the node or GPU given, resolved (without a size, the job's world size completes it)."""
    configs = [r for r in records if isinstance(r, JobConfig)]
    logs = [r for r in records if isinstance(r, TrainingLog)]
    settings = _Settings(configs)
    provenance: list[Provenance] = []
    warnings: list[str] = [f"{c.file}: {line}" for c in configs for line in c.unread]

    def pick(
        name: str, section: BaseModel | None, key: str | None, default: object, *, convert: object = None
    ) -> object:
        if section is not None and _given(section, name):
            value = getattr(section, name)
            provenance.append(Provenance(name, value, "flag", "command line or scenario"))
            return value
        held = settings.get(key or name)
        if held is not None:
            value = convert(held[0]) if callable(convert) else held[0]
            provenance.append(Provenance(name, value, "log", held[1]))
            return value
        if default is not None:
            provenance.append(Provenance(name, default, "default", "mfukit default"))
            if name in MOVES_THE_ANSWER:
                warnings.append(
                    f"{name} = {default} is a default, not read from the job: the job's logs print no "
                    f"{name}; give it (--{name.replace('_', '-')}) if the job ran otherwise, the MFU moves with it"
                )
        return default

    framework = next((c.framework for c in configs if c.framework in FRAMEWORK_PROFILE), None)
    framework = framework or next((log.framework for log in logs if log.framework in FRAMEWORK_PROFILE), None)

    # --- model
    if model is not None:
        provenance.append(Provenance("model", model.name, "flag", "command line or scenario"))
    else:
        found = _model_from(settings)
        if found is not None:
            model = found[0]
            provenance.append(Provenance("model", model.name, "log", found[1]))

    # --- training
    fields: dict[str, object] = {}
    fields["seq_len"] = pick("seq_len", training, None, 2048)
    batch_flag = training is not None and (
        _given(training, "global_batch_size") or _given(training, "global_batch_tokens")
    )
    if batch_flag and training is not None:
        given = "global_batch_size" if _given(training, "global_batch_size") else "global_batch_tokens"
        fields[given] = getattr(training, given)
        provenance.append(Provenance(given, fields[given], "flag", "command line or scenario"))
    else:
        held = settings.get("global_batch_size")
        logged = next(((log.global_batch_size, log.file) for log in logs if log.global_batch_size), None)
        if held is not None:
            fields["global_batch_size"] = held[0]
            provenance.append(Provenance("global_batch_size", held[0], "log", held[1]))
        elif logged is not None:
            fields["global_batch_size"] = logged[0]
            provenance.append(
                Provenance("global_batch_size", logged[0], "log", f"{logged[1]}: iteration lines")
            )
    fields["micro_batch_size"] = pick("micro_batch_size", training, None, 1)
    if training is not None and _given(training, "precision"):
        fields["precision"] = training.precision
        provenance.append(Provenance("precision", training.precision, "flag", "command line or scenario"))
    else:
        found_precision = _precision(settings)
        if found_precision is not None:
            fields["precision"] = found_precision[0]
            provenance.append(Provenance("precision", found_precision[0], "log", found_precision[1]))
        else:
            fields["precision"] = "bf16"
            provenance.append(Provenance("precision", "bf16", "default", "mfukit default"))
            warnings.append(
                "precision = bf16 is a default, not read from the job: the job's logs print no precision; give "
                "it (--precision) if the job ran otherwise, the MFU moves with it"
            )
    if training is not None and _given(training, "framework"):
        fields["framework"] = training.framework
    elif framework is not None:
        fields["framework"] = FRAMEWORK_PROFILE[framework]
        provenance.append(
            Provenance("framework", fields["framework"], "derived", f"the log is {framework}'s")
        )
    if training is not None:
        kept = training.model_dump(exclude_unset=True, by_alias=True)
        fields = {**kept, **{k: v for k, v in fields.items() if k not in kept}}
    new_training = TrainingSection.model_validate(fields)

    # --- cluster: flags, else the GPU the artifacts name and the ranks they ran
    world = settings.get("world_size")
    if world is None and (ranks := _nccl_ranks(records)) is not None:
        world = ranks
    if cluster is not None:
        provenance.append(Provenance("num_gpus", cluster.num_gpus, "flag", "command line or scenario"))
        provenance.append(Provenance("gpu", cluster.accelerator.name, "flag", "command line or scenario"))
    else:
        flagged = node is not None
        device = None if flagged else _device(records, settings)
        name = accelerator_named(device[0]) if device else None
        if (flagged or name is not None) and world is not None and isinstance(world[0], int):
            if node is not None:
                cluster = node.cluster(world[0])
            else:
                try:
                    cluster = resolve.cluster(
                        ClusterSection(gpu=name, num_gpus=world[0]),
                        source=device[1] if device else "command line",
                    )
                except MfukitError:
                    cluster = None
            if cluster is not None:
                provenance.append(Provenance("num_gpus", world[0], "log", world[1]))
                if device is not None:
                    provenance.append(Provenance("gpu", name, "log", f"{device[1]} '{device[0]}'"))
                    provenance.append(
                        Provenance(
                            "system", cluster.system.name, "derived", f"{name}'s default node in the catalog"
                        )
                    )
                else:
                    provenance.append(
                        Provenance("gpu", cluster.accelerator.name, "flag", "command line or scenario")
                    )

    # --- layout
    layout_fields: dict[str, object] = {}
    logged_dp, size = settings.get("dp"), world[0] if world is not None else None
    for name, default in (("tp", 1), ("pp", 1), ("cp", 1)):
        if (
            name == "pp"
            and not _given(parallelism, "pp")
            and settings.get("pp") is None
            and logged_dp is not None
            and isinstance(size, int)
            and isinstance(logged_dp[0], int)
            and size % (int(layout_fields["tp"]) * logged_dp[0]) == 0  # type: ignore[call-overload]
        ):  # the job printed its world, TP and DP sizes: what is left is the pipeline
            layout_fields["pp"] = size // (int(layout_fields["tp"]) * logged_dp[0])  # type: ignore[call-overload]
            provenance.append(
                Provenance("pp", layout_fields["pp"], "derived", f"world size {size} / (tp x dp)")
            )
            continue
        layout_fields[name] = pick(name, parallelism, None, default)
    if parallelism is not None and _given(parallelism, "dp"):
        layout_fields["dp"] = pick("dp", parallelism, None, None)
    elif (held := settings.get("dp")) is not None:
        layout_fields["dp"] = pick("dp", None, None, None)
    else:
        gpus = cluster.num_gpus if cluster is not None else (world[0] if world else None)
        split = int(layout_fields["tp"]) * int(layout_fields["pp"]) * int(layout_fields["cp"])  # type: ignore[call-overload]
        if isinstance(gpus, int) and gpus >= split:
            layout_fields["dp"] = gpus // split
            provenance.append(Provenance("dp", gpus // split, "derived", f"{gpus} GPUs / (tp x pp x cp)"))
    vpp = pick("vpp", parallelism, None, None)
    if isinstance(vpp, int) and vpp > 1:
        layout_fields["vpp"] = vpp
    for name, key, convert in (
        ("sequence_parallel", None, bool),
        ("recompute", None, _recompute),
    ):
        value = pick(name, parallelism, key, None, convert=convert)
        if value is not None:
            layout_fields[name] = value
    if parallelism is not None and _given(parallelism, "zero"):
        layout_fields["zero"] = pick("zero", parallelism, None, None)
    elif (held := settings.get("distributed_optimizer")) is not None:
        layout_fields["zero"] = 1 if held[0] is True else 0
        provenance.append(Provenance("zero", layout_fields["zero"], "log", held[1]))
    elif (held := settings.get("zero")) is not None and isinstance(held[0], int):
        layout_fields["zero"], layout_fields["zero_impl"] = held[0], "deepspeed"
        provenance.append(Provenance("zero", held[0], "log", held[1]))
    fsdp = pick("fsdp", parallelism, None, None)
    if fsdp in ("full", "hybrid") and "zero" not in layout_fields:
        layout_fields["fsdp"] = fsdp
    for name, key in (("first_stage_layers", None), ("last_stage_layers", None)):
        value = pick(name, parallelism, key, None)
        if isinstance(value, int):
            layout_fields[name] = value
    if parallelism is not None:
        kept_layout = parallelism.model_dump(exclude_unset=True)
        layout_fields = {**layout_fields, **kept_layout}
    layout: Parallelism | None = None
    known = {p.name for p in provenance if p.origin in ("flag", "log")} & {"tp", "pp", "dp", "cp"}
    if not known:  # nothing says how the job was laid out: no layout, so no performance model of one
        provenance[:] = [p for p in provenance if p.name not in ("tp", "pp", "cp", "dp")]
        warnings[:] = [w for w in warnings if not w.startswith(("tp =", "pp =", "dp ="))]
        warnings.append(
            "the parallel layout is not in the job's logs nor given (--tp/--pp/--dp): the expected MFU cannot "
            "come from the performance model of the layout that ran"
        )
    elif "dp" in layout_fields:
        try:
            layout = Parallelism.model_validate(layout_fields)
        except ValueError as error:
            warnings.append(f"the layout read from the job is not valid ({error}); it is left out")
    if layout is None and parallelism is not None:
        layout = parallelism
    memory = settings.get("memory_max_reserved_bytes")
    if memory is not None and isinstance(memory[0], float):  # shown beside the model's estimate
        provenance.append(Provenance("max_reserved_memory_bytes", memory[0], "log", memory[1]))
    return ResolvedJob(model, new_training, layout, cluster, provenance, warnings, framework)
