"""What one training run is: the resolved, serialisable configuration every torchrun worker reads.

The launcher builds a :class:`TrainConfig` from the scenario and flags, writes it as ``config.json`` into
the run directory, and each worker (``python -m mfukit.train.worker config.json``) reads it back. The
:meth:`TrainConfig.config_hash` covers exactly what changes the numbers a checkpoint holds (model, data,
batch, optimiser), not where or on how many ranks the run happens, so a checkpoint resumes on another
world size but never under another model.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Literal

from pydantic import Field

from mfukit.core.files import write_text_atomic
from mfukit.core.model import ModelSpec
from mfukit.core.schema import Strict
from mfukit.errors import InputError

Parallel = Literal["ddp", "fsdp"]
Device = Literal["auto", "cpu", "cuda"]
AttentionConvention = Literal["full", "causal"]


class CheckpointPolicy(Strict):
    """When and how to checkpoint. Exactly one of ``interval_steps``, ``interval_s`` or ``daly_mtbf_s``."""

    interval_steps: int | None = Field(default=None, ge=1)
    interval_s: float | None = Field(default=None, gt=0)
    daly_mtbf_s: float | None = Field(
        default=None, gt=0, description="job MTBF for the Daly optimum, measured save time as delta"
    )
    blocking_s: float | None = Field(default=None, gt=0, description="override the measured save time")
    keep: int = Field(default=3, ge=1, description="committed checkpoints to keep")
    mode: Literal["sync", "async"] = "async"
    # DCP's FileSystemWriter writes a rank's shard with one thread into one file by default, which leaves a
    # disk or parallel file system that needs queue depth idle (bench checkpoint: 0.45 of the 4-file write
    # rate on one thread); 4 files per rank, as PyTorch's own thread_count option allows, fill it
    writer_threads: int = Field(default=4, ge=1, le=64, description="files (and threads) each rank writes")


class TrainConfig(Strict):
    name: str
    out_dir: str
    model: ModelSpec
    seq_len: int = Field(ge=2)
    global_batch_size: int = Field(ge=1, description="sequences per optimizer step, over all ranks")
    micro_batch_size: int = Field(ge=1)
    steps: int = Field(ge=1)
    lr: float = Field(gt=0)
    warmup_steps: int = Field(ge=0)
    weight_decay: float = Field(ge=0)
    seed: int = 0
    precision: Literal["bf16", "fp16", "fp8", "fp32"] = "bf16"
    parallel: Parallel = "ddp"
    device: Device = "auto"
    compile: bool = False
    data_path: str
    synthetic_tokens: int | None = Field(
        default=None,
        ge=2,
        description="data_path is the synthetic file of this many tokens (made if missing)",
    )
    checkpoint: CheckpointPolicy
    faults: list[str] = Field(default_factory=list)
    hang_timeout_s: float = Field(gt=0)
    peak_flops_per_s: float | None = Field(default=None, gt=0)
    peak_source: str = ""
    attention_flops: AttentionConvention = "full"
    verify_resume: bool = False
    log_every: int = Field(default=10, ge=1)

    @property
    def out(self) -> Path:
        return Path(self.out_dir)

    def config_hash(self) -> str:
        """sha256 over what determines the trained numbers (not paths, world size, faults or timeouts)."""
        numeric = self.model_dump(
            mode="json",
            include={
                "model",
                "seq_len",
                "global_batch_size",
                "steps",
                "lr",
                "warmup_steps",
                "weight_decay",
                "seed",
                "precision",
            },
        )
        numeric["model"].pop("source", None)
        numeric["model"].pop("display_name", None)
        numeric["data"] = Path(self.data_path).name
        text = json.dumps(numeric, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def write(self, path: Path) -> None:
        """Write atomically (temp file, then rename), so a worker never reads half a config."""
        write_text_atomic(path, self.model_dump_json(indent=2))

    @classmethod
    def read(cls, path: Path) -> TrainConfig:
        return cls.model_validate_json(path.read_text(encoding="utf-8"))


def check_trainable(spec: ModelSpec, *, source: str) -> None:
    """The harness builds dense decoders with RMSNorm, RoPE, SwiGLU and (grouped-query) attention."""
    unsupported = [
        ("mlp", spec.mlp, "swiglu"),
        ("norm", spec.norm, "rmsnorm"),
        ("position_embedding", spec.position_embedding, "rope"),
    ]
    for field, value, wanted in unsupported:
        if value != wanted:
            raise InputError(
                f"the training harness builds {wanted} models only",
                source=source,
                field=f"model.{field}",
                value=value,
                hint=f"set model.{field} = {wanted!r} (Llama-style decoder)",
            )
    for field in ("moe", "mla"):
        if getattr(spec, field) is not None:
            raise InputError(
                f"the training harness builds dense models; {field.upper()} is not supported",
                source=source,
                field=f"model.{field}",
                hint="train a dense preset (no [model.moe] / MLA fields)",
            )
    for field in ("attention_bias", "qkv_bias", "mlp_bias"):
        if getattr(spec, field):
            raise InputError(
                "the training harness builds bias-free layers (as Llama)",
                source=source,
                field=f"model.{field}",
                value=True,
                hint=f"set model.{field} = false",
            )
    if spec.num_nextn_predict_layers:
        raise InputError(
            "multi-token-prediction modules are not built by the harness",
            source=source,
            field="model.num_nextn_predict_layers",
            value=spec.num_nextn_predict_layers,
            hint="set it to 0",
        )
    if spec.head_size % 2:
        raise InputError(
            "RoPE needs an even head size",
            source=source,
            field="model.head_dim",
            value=spec.head_size,
            hint="choose hidden_size / num_attention_heads (or head_dim) even",
        )
