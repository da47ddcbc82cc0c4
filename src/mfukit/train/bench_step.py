"""``mfukit bench step``: the MFU of one device's training step for a model preset (no torchrun, no data file).

The same model (``train.model``), optimizer (AdamW) and precision policy (bf16 autocast on CUDA, fp32 on
CPU) as ``mfukit train``, on random token ids; two warm-up steps (allocation, kernel selection, compile)
are excluded. MFU = ``perf.flops.model_flops_per_token`` x tokens/s / peak.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from dataclasses import dataclass
from typing import Any

import torch

from mfukit.core.model import ModelSpec
from mfukit.perf.flops import AttentionConvention, model_flops_per_token, utilization
from mfukit.train.model import Transformer, count_parameters, peak_memory_bytes

WARMUP_STEPS = 2


@dataclass(frozen=True)
class StepBench:
    params: int
    tokens_per_step: int
    step_times_s: list[float]
    flops_per_token: float
    peak_flops_per_s: float | None
    memory_bytes: int
    """peak allocated bytes on CUDA, peak resident set of the process on CPU"""

    @property
    def step_time_s(self) -> float:
        return statistics.median(self.step_times_s)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_per_step / self.step_time_s

    @property
    def achieved_flops_per_s(self) -> float:
        return self.flops_per_token * self.tokens_per_s

    @property
    def mfu(self) -> float | None:
        if self.peak_flops_per_s is None:
            return None
        return utilization(self.flops_per_token, self.tokens_per_s, self.peak_flops_per_s)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_step_bench(
    spec: ModelSpec,
    *,
    seq_len: int,
    micro_batch_size: int,
    steps: int,
    device: str,
    precision: str,
    peak_flops_per_s: float | None,
    attention: AttentionConvention = "full",
    compile_model: bool = False,
    seed: int = 0,
) -> StepBench:
    target = torch.device(device)
    torch.manual_seed(seed)
    with target:
        model = Transformer(spec, seq_len)
    if compile_model:
        for layer in model.layers:
            layer.compile()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1)
    autocast: Any = contextlib.nullcontext()
    if target.type == "cuda" and precision in ("bf16", "fp16"):
        autocast = torch.autocast("cuda", dtype=torch.bfloat16 if precision == "bf16" else torch.float16)
    tokens = torch.randint(spec.vocab_size, (micro_batch_size, seq_len + 1), device=target)
    times: list[float] = []
    for step in range(WARMUP_STEPS + steps):
        _sync(target)
        started = time.perf_counter()
        with autocast:
            loss = model(tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        _sync(target)
        if step >= WARMUP_STEPS:
            times.append(time.perf_counter() - started)
    memory = peak_memory_bytes(target)
    return StepBench(
        params=count_parameters(model),
        tokens_per_step=micro_batch_size * seq_len,
        step_times_s=times,
        flops_per_token=model_flops_per_token(spec, seq_len, attention),
        peak_flops_per_s=peak_flops_per_s,
        memory_bytes=memory,
    )
