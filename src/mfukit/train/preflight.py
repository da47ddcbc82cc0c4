"""Before ``mfukit train`` launches anything: does one rank's training state fit the memory it will have?

The need is ``perf.memory``'s per-GPU peak (the planner's model: weights, gradients, AdamW states,
activations, buffers) for the harness's layout: data parallel over the world size, DDP or FSDP2
``fully_shard`` (FSDP2's 16/DP bytes per parameter), no TP/PP. On CUDA it is compared with the HBM of each
local GPU (``total_bytes``, CUDA context and NCCL buffers included, as ``mfukit estimate`` does); on CPU
with the host's ``MemAvailable`` (``/proc/meminfo``) shared by the ranks on this node (``reserved_bytes``:
no CUDA context, no NCCL). Every rank builds the whole fp32 model before FSDP shards it
(``train.worker._build``), so 4 bytes per parameter is a floor of the need under FSDP too.

A model that does not fit stops the run with exit 2 before a data file is written or torchrun starts:
otherwise the OOM killer ends a rank, torchrun restarts it, and it is killed again.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mfukit import units
from mfukit.core.parallelism import Parallelism
from mfukit.errors import InputError
from mfukit.perf.memory import StepShape, estimate_memory
from mfukit.perf.model_states import FP32_BYTES
from mfukit.train.prepare import Prepared

MEMINFO = Path("/proc/meminfo")
BUILD_PART = "whole fp32 model built before sharding"


@dataclass(frozen=True)
class MemoryNeed:
    """One rank's peak memory need and what each rank has."""

    need_bytes: float
    """the larger of the step's peak and the whole fp32 model built at start-up"""
    parts_bytes: dict[str, float]
    available_bytes: float
    available_how: str

    @property
    def fits(self) -> bool:
        return self.need_bytes <= self.available_bytes


def host_available_bytes() -> float | None:
    """``MemAvailable`` of ``/proc/meminfo`` (the kernel's estimate of memory usable without swapping)."""
    try:
        text = MEMINFO.read_text(encoding="ascii")
    except OSError:
        return None
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name == "MemAvailable":
            kib, _, unit = value.strip().partition(" ")
            return float(kib) * 1024 if unit == "kB" else float(kib)
    return None


def rank_need(prepared: Prepared, *, cuda: bool) -> tuple[float, dict[str, float]]:
    """Bytes one rank needs at its peak, and the breakdown (perf.memory's parts, zeros left out)."""
    config = prepared.config
    layout = Parallelism(dp=prepared.world_size, fsdp="full" if config.parallel == "fsdp" else "none")
    shape = StepShape(
        seq_len=config.seq_len,
        micro_batch_size=config.micro_batch_size,
        precision=config.precision if cuda else "fp32",
        kernels="eager",  # train.model is plain PyTorch modules, attention through SDPA
    )
    peak = estimate_memory(config.model, layout, shape).peak
    parts = {name: value for name, value in peak.parts().items() if value > 0}
    if not cuda:
        parts.pop("CUDA context", None)
        parts.pop("NCCL buffers", None)
    step_bytes = peak.total_bytes if cuda else peak.reserved_bytes
    build_bytes = FP32_BYTES * config.model.total_params()
    if build_bytes > step_bytes:
        return build_bytes, {BUILD_PART: build_bytes}
    return step_bytes, parts


def check_fits(prepared: Prepared, *, cuda: bool, nproc_per_node: int, source: str) -> MemoryNeed | None:
    """Raise InputError (exit 2) when one rank's need exceeds its memory; None when the memory is unknown."""
    need, parts = rank_need(prepared, cuda=cuda)
    if cuda:
        import torch

        local = range(max(1, min(nproc_per_node, torch.cuda.device_count())))
        hbm = min(torch.cuda.get_device_properties(i).total_memory for i in local)
        available, how = float(hbm), "HBM of the smallest local GPU"
    else:
        host = host_available_bytes()
        if host is None:
            return None
        available = host / nproc_per_node
        how = f"MemAvailable {units.format_bytes(host)} / {nproc_per_node} rank(s) on this host"
    result = MemoryNeed(need, parts, available, how)
    if result.fits:
        return result
    config = prepared.config
    breakdown = ", ".join(f"{name} {units.format_bytes(value)}" for name, value in parts.items())
    precision = f"{config.precision} autocast" if cuda and config.precision != "fp32" else "fp32"
    if BUILD_PART in parts:
        hint = "every rank builds the whole fp32 model before FSDP shards it: use a smaller model or devices with more memory"
    elif cuda:
        hint = (
            'use more GPUs with FSDP (parallelism.fsdp = "full", a larger parallelism.dp or --nproc-per-node), '
            "a smaller micro batch or sequence, or a smaller model"
        )
    else:
        hint = (
            "use a smaller model preset (e.g. examples/tiny-cpu.toml), a GPU (--device cuda), or fewer ranks"
        )
    raise InputError(
        f"{config.model.name} ({units.format_count(config.model.total_params())} parameters, "
        f"{config.parallel.upper()} over {prepared.world_size} rank(s), {precision}) needs "
        f"~{units.format_bytes(need)} per rank ({breakdown}; the memory model of `mfukit estimate`) but a "
        f"rank has {units.format_bytes(available)} ({how})",
        source=source,
        field="model",
        value=config.model.name,
        hint=hint,
    )
