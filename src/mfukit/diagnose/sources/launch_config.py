"""The job's own launch configuration, as the training stacks print it at start-up.

- Megatron-LM: the rank-0 argument dump between ``---- arguments ----`` and ``---- end of arguments ----``
  (``'  {arg} {dots} {value}'``, dots padding to column 48; ``megatron/training/arguments.py``) and the
  ``using world size: N, data-parallel size: D, ... tensor-model-parallel size: T, pipeline-model-parallel
  size: P`` line; its memory report ``[Rank r] (after k iterations) memory (MB) | ... | max reserved: M``.
- NeMo: the model config it logs as YAML (``tensor_model_parallel_size: 4``, ``encoder_seq_length: 4096``,
  ``activations_checkpoint_granularity: selective``), in files that carry NeMo's ``[NeMo I`` prefix.
- DeepSpeed: ``DeepSpeedEngine configuration:`` and its ``'  {name} {dots} {value}'`` lines (dots to column
  29; ``runtime/config.py``), the flops profiler summary (``world size:``, ``batch size per GPU:``, ``FLOPS
  per GPU = ...:``), and the launcher's ``cmd = ...`` line for a sequence length flag.
- torchtitan: ``Running with configs: {json}`` (``debug.print_config``), ``Building N-D device mesh with
  [names], [sizes]``, ``CUDA capacity: <GPU> with N GiB memory``, ``Trainer is initialized with ... tokens per train step, ... maximum context length
  N`` and the ``memory: G GiB(p%)`` of its step lines.

Each value becomes a :class:`~mfukit.diagnose.records.Setting` under a canonical key (``tp``, ``seq_len``,
``precision``...) with the line it was read from, so the diagnosis can say where every number came from.
:func:`read_line` turns one line into settings (stateful only across the multi-line blocks), which
``mfukit watch`` can call as lines stream by. Every pattern here is bounded and free of nested quantifiers:
these are untrusted logs.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mfukit.diagnose.records import JobConfig, Setting, SettingValue
from mfukit.diagnose.sources import Source
from mfukit.diagnose.sources.jsonstream import open_text

ANSI = re.compile(r"\x1b\[[0-9;]{0,16}m")
_PREFIX = re.compile(r"^\[[^\]\n]{0,160}\] ?")
_ARG = re.compile(r"^ {1,4}([A-Za-z_][\w.-]{0,99}) \.{0,60} ?(\S.{0,4000})$")
_YAML = re.compile(r"^ {0,40}([a-z_][a-z0-9_]{0,79}): ([^\s#].{0,200})$")
_WORLD = re.compile(r"using world size: ?(\d{1,7})")
_MEMORY = re.compile(r"memory \(MB\) \|.{0,200}max reserved: ?([\d.]{1,20})")
_TITAN_MEMORY = re.compile(r"memory: {0,4}([\d.]{1,12}) ?GiB")
_TITAN_MESH = re.compile(r"Building \d{1,2}-D device mesh with \[([^\]]{0,200})\], \[([\d, ]{0,200})\]")
_TITAN_TRAINER = re.compile(
    r"tokens per DP rank, ([\d,]{1,20}) tokens per train step, gradient accumulation steps ([\d,]{1,9}), "
    r"maximum context length ([\d,]{1,9})"
)
_TITAN_DEVICE = re.compile(r"(?:CUDA|GPU|ROCm) capacity: (.{1,80}) with [\d.]{1,10} ?GiB memory")
_PROFILER = re.compile(r"^([A-Za-z][\w /=*+().-]{0,100}):  {0,80}(\S.{0,60})$")
_LAUNCH_SEQ = re.compile(
    r"--(?:seq[-_]length|max[-_]seq[-_]len|seq[-_]len|max[-_]seq[-_]length)[ =](\d{1,7})"
)
_NUMBER = re.compile(r"^[-+]?[\d.]{1,30}(?:[eE][-+]?\d{1,3})?$")

ARG_HEADER = "------------------------ arguments ------------------------"
ARG_FOOTER = "-------------------- end of arguments ---------------------"
DS_HEADER = "DeepSpeedEngine configuration:"
TITAN_HEADER = "Running with configs:"
PROFILER_HEADER = "DeepSpeed Flops Profiler"

# Megatron-LM argument names (megatron/training/arguments.py) and NeMo config keys -> canonical keys.
MEGATRON_KEYS: dict[str, str] = {
    "tensor_model_parallel_size": "tp",
    "pipeline_model_parallel_size": "pp",
    "data_parallel_size": "dp",
    "context_parallel_size": "cp",
    "expert_model_parallel_size": "ep",
    "virtual_pipeline_model_parallel_size": "vpp",
    "num_layers_per_virtual_pipeline_stage": "layers_per_virtual_stage",
    "world_size": "world_size",
    "seq_length": "seq_len",
    "encoder_seq_length": "seq_len",
    "global_batch_size": "global_batch_size",
    "micro_batch_size": "micro_batch_size",
    "use_distributed_optimizer": "distributed_optimizer",
    "sequence_parallel": "sequence_parallel",
    "recompute_granularity": "recompute",
    "activations_checkpoint_granularity": "recompute",
    "bf16": "bf16",
    "fp16": "fp16",
    "fp8": "fp8",
    "precision": "precision",
    "num_layers": "num_layers",
    "hidden_size": "hidden_size",
    "num_attention_heads": "num_attention_heads",
    "num_query_groups": "num_query_groups",
    "group_query_attention": "group_query_attention",
    "ffn_hidden_size": "ffn_hidden_size",
    "padded_vocab_size": "vocab_size",
    "swiglu": "swiglu",
    "activation": "activation",
    "untie_embeddings_and_output_weights": "untie_embeddings",
    "share_embeddings_and_output_weights": "tie_embeddings",
    "max_position_embeddings": "max_position_embeddings",
    "decoder_first_pipeline_num_layers": "first_stage_layers",
    "decoder_last_pipeline_num_layers": "last_stage_layers",
}
DEEPSPEED_KEYS: dict[str, str] = {
    "train_batch_size": "global_batch_size",
    "train_micro_batch_size_per_gpu": "micro_batch_size",
    "gradient_accumulation_steps": "gradient_accumulation",
    "zero_optimization_stage": "zero",
    "bfloat16_enabled": "bf16",
    "fp16_enabled": "fp16",
    "world_size": "world_size",
}
PROFILER_KEYS: dict[str, str] = {
    "world size": "world_size",
    "data parallel size": "dp",
    "model parallel size": "tp",
    "batch size per GPU": "micro_batch_size",
    "params per GPU": "params_per_gpu",
    "iter latency": "profiler_iter_latency_s",
    "samples/second": "profiler_samples_per_s",
}
# Canonical keys that count something (degrees, sizes, batch): a value printed for one that is not a whole
# number (a line cut or run into the next) is reported and skipped, not passed on as the count.
COUNT_KEYS = frozenset(
    {"tp", "pp", "dp", "cp", "ep", "vpp", "layers_per_virtual_stage", "world_size", "seq_len",
     "global_batch_size", "micro_batch_size", "gradient_accumulation", "zero", "num_layers", "hidden_size",
     "num_attention_heads", "num_query_groups", "ffn_hidden_size", "vocab_size", "max_position_embeddings",
     "first_stage_layers", "last_stage_layers"}
)  # fmt: skip
UNIT_SCALE = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "k": 1e3}
TIME_SCALE = {"s": 1.0, "ms": 1e-3, "us": 1e-6}


def _strip(line: str) -> str:
    """The line without ANSI colours and up to four leading ``[...]`` logger prefixes."""
    text = ANSI.sub("", line.rstrip("\n"))
    for _ in range(4):
        stripped = _PREFIX.sub("", text, count=1)
        if stripped == text:
            break
        text = stripped
    return text


def value_of(text: str) -> SettingValue | None:
    """A printed value as Python: ``True``/``true`` -> bool, ``None``/``null`` -> None, numbers, else text."""
    raw = text.strip().strip("'\"")
    lowered = raw.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("none", "null", "~", ""):
        return None
    if _NUMBER.match(raw):
        try:
            number = float(raw)
        except ValueError:
            return raw
        return int(number) if number.is_integer() and "." not in raw and "e" not in lowered else number
    return raw


def _scaled(text: str) -> float | None:
    """``1.23 T`` / ``45.6 ms`` / ``123.4 TFLOPS`` -> SI float (the profiler's ``*_to_string`` output)."""
    parts = text.split()
    if not parts or not _NUMBER.match(parts[0]):
        return None
    number = float(parts[0])
    unit = parts[1] if len(parts) > 1 else ""
    if unit in TIME_SCALE:
        return number * TIME_SCALE[unit]
    return number * UNIT_SCALE.get(unit[:1], 1.0)


@dataclass
class ConfigReader:
    """Reads settings from lines fed in order; remembers which multi-line block it is inside."""

    nemo: bool = False
    block: str | None = None
    json_lines: list[str] = field(default_factory=list)
    json_start: int = 0
    settings: dict[str, Setting] = field(default_factory=dict)
    framework: str | None = None
    unread: list[str] = field(default_factory=list)

    def _put(self, key: str, value: SettingValue | None, number: int, text: str) -> None:
        if value is None or key in self.settings:
            return
        if key in COUNT_KEYS and (isinstance(value, bool) or not isinstance(value, int)):
            self.unread.append(
                f"line {number}: {key} reads {str(value)[:60]!r}, not a whole number: skipped (the line is "
                "cut or runs into another); give it on the command line if the job's other lines lack it"
            )
            return
        self.settings[key] = Setting(value, number, text.strip()[:200])

    def feed(self, number: int, line: str) -> None:
        if "[NeMo " in line[:40]:
            self.nemo = True
        text = _strip(line)
        if self.block == "titan":
            self._titan_json(number, line)
            return
        if ARG_HEADER in text:
            self.block, self.framework = "megatron", self.framework or ("nemo" if self.nemo else "megatron")
            return
        if ARG_FOOTER in text:
            self.block = None
            return
        if DS_HEADER in text:
            self.block, self.framework = "deepspeed", self.framework or "deepspeed"
            return
        if PROFILER_HEADER in text:
            self.block, self.framework = "profiler", self.framework or "deepspeed"
            return
        if TITAN_HEADER in text:
            self.block, self.framework = "titan", "torchtitan"
            self.json_lines, self.json_start = [text.split(TITAN_HEADER, 1)[1]], number
            return
        if self.block in ("megatron", "deepspeed"):
            arg = _ARG.match(text)
            if arg is None and self.block == "deepspeed" and not line.startswith("["):
                return  # a nested config's repr or JSON, continued on lines of its own
            if arg is None or arg.group(1) == "json":
                self.block = None
            else:
                keys = MEGATRON_KEYS if self.block == "megatron" else DEEPSPEED_KEYS
                if arg.group(1) in keys:
                    self._put(keys[arg.group(1)], value_of(arg.group(2)), number, line)
                return
        if self.block == "profiler":
            self._profiler(number, line, text)
            return
        self._single(number, line, text)

    def _profiler(self, number: int, line: str, text: str) -> None:
        found = _PROFILER.match(text.strip())
        if found is None:
            if text.startswith("----") and "Aggregated" in text:
                self.block = None
            return
        name, value = found.group(1).strip(), found.group(2)
        if name.startswith("FLOPS per GPU"):
            self._put("profiler_flops_per_gpu_per_s", _scaled(value), number, line)
        elif name in PROFILER_KEYS:
            scaled = _scaled(value)
            if scaled is not None:
                as_int = PROFILER_KEYS[name] in ("world_size", "dp", "tp", "micro_batch_size")
                self._put(PROFILER_KEYS[name], int(scaled) if as_int else scaled, number, line)

    def _single(self, number: int, line: str, text: str) -> None:
        world = _WORLD.search(text)
        if world is not None:
            self.framework = self.framework or "megatron"
            self._put("world_size", int(world.group(1)), number, line)
            canonical = {"data-parallel": "dp", "tensor-model-parallel": "tp", "pipeline-model-parallel": "pp",
                         "context-parallel": "cp"}  # fmt: skip
            for piece in text.split(","):  # fields by key, in any order (main and 2023 spellings)
                name, _, size = piece.partition("size:")
                key = canonical.get(name.strip().rstrip("-").split(" ")[-1])
                if key is not None and size.strip().isdigit():
                    self._put(key, int(size.strip()), number, line)
            return
        memory = _MEMORY.search(text)
        if memory is not None:
            self._peak("memory_max_reserved_bytes", float(memory.group(1)) * 2**20, number, line)
            return
        mesh = _TITAN_MESH.search(text)
        if mesh is not None:
            names = [n.strip(" '\"") for n in mesh.group(1).split(",")]
            sizes = [int(s) for s in mesh.group(2).replace(" ", "").split(",") if s]
            if len(names) == len(sizes):
                ranks = 1
                for dim, degree in zip(names, sizes, strict=True):
                    ranks *= degree
                    if dim in ("tp", "pp", "cp"):
                        self._put(dim, degree, number, line)
                self._put("world_size", ranks, number, line)
            return
        device = _TITAN_DEVICE.search(text)
        if device is not None:
            self._put("device_name", device.group(1).strip(), number, line)
            return
        trainer = _TITAN_TRAINER.search(text)
        if trainer is not None:
            tokens, _, context = (int(g.replace(",", "")) for g in trainer.groups())
            self._put("seq_len", context, number, line)
            if context:
                self._put("global_batch_size", tokens // context, number, line)
            return
        if "tps:" in text and "step:" in text:
            titan = _TITAN_MEMORY.search(text)
            if titan is not None:
                self._peak("memory_max_reserved_bytes", float(titan.group(1)) * 2**30, number, line)
            return
        if "cmd = " in text or "spawned with command" in text:
            seq = _LAUNCH_SEQ.search(text)
            if seq is not None:
                self._put("seq_len", int(seq.group(1)), number, f"launch command: ... {seq.group(0)} ...")
            return
        if self.nemo:
            yaml = _YAML.match(text)
            if (
                yaml is not None
                and yaml.group(1) == "name"
                and yaml.group(2).strip() == "distributed_fused_adam"
            ):
                self._put("distributed_optimizer", True, number, line)  # NeMo's model.optim.name
            elif yaml is not None and yaml.group(1) in MEGATRON_KEYS:
                self.framework = self.framework or "nemo"
                self._put(MEGATRON_KEYS[yaml.group(1)], value_of(yaml.group(2)), number, line)

    def _peak(self, key: str, value: float, number: int, line: str) -> None:
        held = self.settings.get(key)
        if held is None or (isinstance(held.value, float) and value > held.value):
            self.settings[key] = Setting(value, number, line.strip()[:200])

    def _titan_json(self, number: int, line: str) -> None:
        text = _strip(line) if line.startswith("[titan]") else ANSI.sub("", line.rstrip("\n"))
        self.json_lines.append(text)
        if text.startswith("}") or len(self.json_lines) > 2000:
            self.block = None
            try:
                config = json.loads("\n".join(self.json_lines))
            except json.JSONDecodeError:
                return
            if isinstance(config, dict):
                self._titan_config(config, f"{TITAN_HEADER} (job config)")

    def _titan_config(self, config: dict[str, Any], text: str) -> None:
        """torchtitan's JobConfig sections: parallelism, training, activation_checkpoint, model."""
        number = self.json_start

        def section(name: str) -> dict[str, Any]:
            value = config.get(name)
            return value if isinstance(value, dict) else {}

        parallel, training = section("parallelism"), section("training")
        for name, key in (("tensor_parallel_degree", "tp"), ("pipeline_parallel_degree", "pp"),
                          ("context_parallel_degree", "cp")):  # fmt: skip
            if isinstance(parallel.get(name), int) and parallel[name] > 0:
                self._put(key, parallel[name], number, f"{text}: parallelism.{name}")
        shard, replicate = (
            parallel.get("data_parallel_shard_degree"),
            parallel.get("data_parallel_replicate_degree"),
        )
        if isinstance(shard, int) and shard > 0 and isinstance(replicate, int) and replicate > 0:
            self._put("dp", shard * replicate, number, f"{text}: parallelism.data_parallel_*_degree")
        if isinstance(shard, int) and (shard > 1 or shard == -1):
            self._put("fsdp", "full", number, f"{text}: parallelism.data_parallel_shard_degree")
        if isinstance(training.get("seq_len"), int):
            self._put("seq_len", training["seq_len"], number, f"{text}: training.seq_len")
        local = training.get("local_batch_size", training.get("batch_size"))
        if isinstance(local, int):
            self._put("micro_batch_size", local, number, f"{text}: training.local_batch_size")
        if isinstance(training.get("global_batch_size"), int) and training["global_batch_size"] > 0:
            self._put(
                "global_batch_size",
                training["global_batch_size"],
                number,
                f"{text}: training.global_batch_size",
            )
        dtype = training.get("mixed_precision_param")
        if isinstance(dtype, str):
            self._put("precision", dtype, number, f"{text}: training.mixed_precision_param")
        mode = section("activation_checkpoint").get("mode")
        if isinstance(mode, str):
            self._put("recompute", mode, number, f"{text}: activation_checkpoint.mode")
        model = section("model")
        for name in ("name", "flavor"):
            if isinstance(model.get(name), str):
                self._put(f"model_{name}", model[name], number, f"{text}: model.{name}")


def read_line(reader: ConfigReader, number: int, line: str) -> dict[str, Setting]:
    """Feed one line; the settings it added (empty for most lines)."""
    before = set(reader.settings)
    reader.feed(number, line)
    return {key: value for key, value in reader.settings.items() if key not in before}


MARKERS = (ARG_HEADER, DS_HEADER, TITAN_HEADER, PROFILER_HEADER, "using world size:", "memory (MB) |",
           "Building 1-D device mesh", "Trainer is initialized with", " capacity: ")  # fmt: skip


def detect(path: Path, head: str) -> bool:
    start = head.lstrip()
    if start[:1] == "{" or (start[:1] == "[" and start[1:].lstrip()[:1] in ("{", "]", "")):
        return False  # a JSON document (a trace, a report): its strings are not log lines
    return any(marker in head for marker in MARKERS) or (
        "[NeMo " in head and "tensor_model_parallel_size:" in head
    )


def parse(path: Path) -> list[JobConfig]:
    reader = ConfigReader()
    with open_text(path) as stream:
        for number, raw in enumerate(stream, start=1):
            reader.feed(number, raw)
    if not reader.settings and not reader.unread:
        return []
    return [JobConfig(str(path), reader.framework or "unknown", reader.settings, tuple(reader.unread))]


SOURCE = Source(
    kind="launch_config",
    description="launch configuration printed by Megatron-LM/NeMo (argument dump), DeepSpeed (config, flops "
    "profiler), torchtitan (job config)",
    detect=detect,
    parse=parse,
    embedded=True,
)
