"""The decoder-only transformer the harness trains, built from the planner's :class:`ModelSpec`.

Llama architecture (Touvron et al. 2023): pre-norm RMSNorm (Zhang & Sennrich 2019), rotary position
embeddings (Su et al. 2021, base 10,000 as in Llama 1/2), SwiGLU MLP (Shazeer 2020) and grouped-query
attention (Ainslie et al. 2023) through ``scaled_dot_product_attention`` (flash / memory-efficient kernels
where available). No biases, no dropout: a step is a pure function of parameters, optimizer state and
data, which is what lets a resumed run end bit-identical to an uninterrupted one. The parameter count
equals ``ModelSpec.total_params()`` exactly (a test checks it), so MFU here and in the planner count the
same model.
"""

from __future__ import annotations

import math
import resource

import torch
import torch.nn.functional as F  # noqa: N812 (the conventional name)
from torch import nn

from mfukit.core.model import ModelSpec

ROPE_BASE = 10_000.0
RMS_EPS = 1e-5
INIT_STD = 0.02


class RMSNorm(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        normed = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + RMS_EPS)
        return normed.type_as(x) * self.weight


def rope_tables(seq_len: int, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of shape (seq_len, head_dim / 2) for the rotary embedding."""
    inverse = 1.0 / (ROPE_BASE ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float32), inverse)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (x[2i], x[2i+1]) of ``x`` (batch, heads, seq, head_dim) by the position angle."""
    pairs = x.float().reshape(*x.shape[:-1], -1, 2)
    even, odd = pairs[..., 0], pairs[..., 1]
    rotated = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)
    return rotated.flatten(-2).type_as(x)


class Attention(nn.Module):
    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.heads = spec.num_attention_heads
        self.kv_heads = spec.kv_heads
        self.head_dim = spec.head_size
        width = spec.hidden_size
        self.wq = nn.Linear(width, self.heads * self.head_dim, bias=False)
        self.wk = nn.Linear(width, self.kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(width, self.kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(self.heads * self.head_dim, width, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        q = self.wq(x).view(batch, seq, self.heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(batch, seq, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(batch, seq, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.kv_heads != self.heads)
        projected: torch.Tensor = self.wo(out.transpose(1, 2).reshape(batch, seq, self.heads * self.head_dim))
        return projected


class SwiGLU(nn.Module):
    def __init__(self, width: int, hidden: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(width, hidden, bias=False)  # gate
        self.w3 = nn.Linear(width, hidden, bias=False)  # up
        self.w2 = nn.Linear(hidden, width, bias=False)  # down

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        down: torch.Tensor = self.w2(F.silu(self.w1(x)) * self.w3(x))
        return down


class Block(nn.Module):
    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(spec.hidden_size)
        self.attention = Attention(spec)
        self.mlp_norm = RMSNorm(spec.hidden_size)
        self.mlp = SwiGLU(spec.hidden_size, spec.intermediate_size)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), cos, sin)
        out: torch.Tensor = x + self.mlp(self.mlp_norm(x))
        return out


class Transformer(nn.Module):
    def __init__(self, spec: ModelSpec, seq_len: int) -> None:
        super().__init__()
        self.spec = spec
        self.embedding = nn.Embedding(spec.vocab_size, spec.hidden_size)
        self.layers = nn.ModuleList(Block(spec) for _ in range(spec.num_hidden_layers))
        self.norm = RMSNorm(spec.hidden_size)
        self.output = nn.Linear(spec.hidden_size, spec.vocab_size, bias=False)
        if spec.tie_word_embeddings:
            self.output.weight = self.embedding.weight
        cos, sin = rope_tables(seq_len, spec.head_size)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self._init_weights()

    def _init_weights(self) -> None:
        """Normal(0, 0.02); residual output projections scaled by 1/sqrt(2 L) (GPT-2, Radford et al. 2019)."""
        residual_std = INIT_STD / math.sqrt(2 * self.spec.num_hidden_layers)
        for name, parameter in self.named_parameters():
            if parameter.dim() < 2:
                continue
            std = residual_std if name.endswith(("wo.weight", "w2.weight")) else INIT_STD
            nn.init.normal_(parameter, mean=0.0, std=std)

    def logits(self, tokens: torch.Tensor) -> torch.Tensor:
        """Next-token logits (batch, seq, vocab) of ``tokens`` (batch, seq)."""
        seq = tokens.shape[1]
        cos, sin = self.get_buffer("rope_cos")[:seq], self.get_buffer("rope_sin")[:seq]
        x = self.embedding(tokens)
        for layer in self.layers:
            x = layer(x, cos, sin)
        out: torch.Tensor = self.output(self.norm(x))
        return out

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean next-token cross-entropy of ``tokens`` (batch, seq) against ``targets``."""
        return F.cross_entropy(self.logits(tokens).float().flatten(0, 1), targets.flatten())


def count_parameters(model: nn.Module) -> int:
    """Distinct trainable parameters (a tied embedding counts once)."""
    return sum(p.numel() for p in model.parameters())


def peak_memory_bytes(device: torch.device) -> int:
    """Peak memory of this process on ``device``: ``max_memory_allocated`` on CUDA, the peak RSS on CPU
    (the whole process: interpreter, torch and the model's tensors)."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # Linux reports KiB
