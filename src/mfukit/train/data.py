"""The token dataset: a memory-mapped token file and a deterministic sampler whose position is checkpointed.

The file is raw little-endian token ids (uint16 when the vocabulary fits, else uint32), as nanoGPT and
Megatron's ``.bin`` files are. Sequence ``i`` is the window ``tokens[i*s : i*s + s + 1]`` (inputs and
shifted targets). When no file is given, a synthetic one is generated once per run directory: a noisy
permutation chain (each token is followed by a fixed successor with probability 1 - noise, by a uniform
token otherwise), so the loss has a known floor a model can learn towards, unlike uniform noise.

The sampler visits sequences in a fresh seeded permutation every epoch. Its whole state is one integer,
the number of sequences consumed so far over all ranks, so a run that resumes on a different world size
reads exactly the sequences the original run would have read next.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from mfukit.core.files import write_text_atomic
from mfukit.errors import InputError

SYNTHETIC_NOISE = 0.1
_STREAMS = 1024


@dataclass(frozen=True)
class TokenFile:
    path: Path
    vocab_size: int
    num_tokens: int

    @property
    def dtype(self) -> np.dtype[Any]:
        return token_dtype(self.vocab_size)

    @classmethod
    def at(cls, path: Path, vocab_size: int) -> TokenFile:
        """The token file at ``path``, its length taken from its size."""
        return cls(path, vocab_size, path.stat().st_size // token_dtype(vocab_size).itemsize)

    def num_sequences(self, seq_len: int) -> int:
        return (self.num_tokens - 1) // seq_len

    def open(self) -> npt.NDArray[Any]:
        return np.memmap(self.path, dtype=self.dtype, mode="r", shape=(self.num_tokens,))


def token_dtype(vocab_size: int) -> np.dtype[Any]:
    """uint16 when every id fits, else uint32 (as nanoGPT's and Megatron's .bin files)."""
    return np.dtype(np.uint16 if vocab_size <= 2**16 else np.uint32)


def synthetic_floor_nats(vocab_size: int, noise: float = SYNTHETIC_NOISE) -> float:
    """Cross-entropy of the generating process: the lowest loss any model can reach on the synthetic data."""
    p_successor = 1 - noise + noise / vocab_size
    p_other = noise / vocab_size
    terms = [(1, p_successor), (vocab_size - 1, p_other)]
    return -sum(count * p * math.log(p) for count, p in terms if p > 0)


def synthetic_path(directory: Path, *, vocab_size: int, num_tokens: int, seed: int) -> Path:
    return directory / f"synthetic-v{vocab_size}-n{num_tokens}-s{seed}.bin"


def ensure_synthetic(directory: Path, *, vocab_size: int, num_tokens: int, seed: int) -> TokenFile:
    """The synthetic token file for these parameters, generated on first use (atomically)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = synthetic_path(directory, vocab_size=vocab_size, num_tokens=num_tokens, seed=seed)
    if path.exists() and path.stat().st_size == num_tokens * token_dtype(vocab_size).itemsize:
        return TokenFile(path, vocab_size, num_tokens)
    rng = np.random.default_rng(seed)
    successor = rng.permutation(vocab_size)
    length = -(-num_tokens // _STREAMS)
    tokens = np.empty((length, _STREAMS), dtype=np.int64)
    tokens[0] = rng.integers(vocab_size, size=_STREAMS)
    for position in range(1, length):
        following = successor[tokens[position - 1]]
        noisy = rng.random(_STREAMS) < SYNTHETIC_NOISE
        following[noisy] = rng.integers(vocab_size, size=int(noisy.sum()))
        tokens[position] = following
    flat = tokens.T.reshape(-1)[:num_tokens].astype(token_dtype(vocab_size))
    description = {
        "generator": "noisy permutation chain",
        "noise": SYNTHETIC_NOISE,
        "vocab_size": vocab_size,
        "num_tokens": num_tokens,
        "seed": seed,
        "floor_nats": synthetic_floor_nats(vocab_size),
    }
    sidecar = path.with_suffix(".json")
    write_text_atomic(sidecar, json.dumps(description, indent=2))
    temporary = path.with_suffix(".bin.tmp")
    flat.tofile(temporary)
    temporary.replace(path)
    return TokenFile(path, vocab_size, num_tokens)


def open_token_file(path: Path, *, vocab_size: int, seq_len: int) -> TokenFile:
    """A user's raw token file; checked for size and (on a sample) for ids inside the vocabulary."""
    if not path.is_file():
        raise InputError("token file not found", source=str(path), field="--data", hint="check the path")
    itemsize = token_dtype(vocab_size).itemsize
    size = path.stat().st_size
    if size % itemsize:
        raise InputError(
            f"size {size} B is not a whole number of {itemsize}-byte tokens",
            source=str(path),
            field="--data",
            expected=f"raw little-endian {'uint16' if itemsize == 2 else 'uint32'} ids for vocab {vocab_size}",
        )
    tokens = TokenFile.at(path, vocab_size)
    if tokens.num_sequences(seq_len) < 1:
        raise InputError(
            f"holds fewer than seq_len + 1 = {seq_len + 1} tokens", source=str(path), field="--data"
        )
    sample = np.asarray(tokens.open()[: min(tokens.num_tokens, 1 << 20)])
    if int(sample.max()) >= vocab_size:
        raise InputError(
            f"holds token id {int(sample.max())} >= vocab_size {vocab_size}",
            source=str(path),
            field="--data",
            hint="tokenize with the model's vocabulary or set model.vocab_size",
        )
    return tokens


class Sampler:
    """Deterministic sequence order: a seeded permutation per epoch, advanced by a global position."""

    def __init__(self, num_sequences: int, seed: int, position: int = 0) -> None:
        if num_sequences < 1:
            raise ValueError("a sampler needs at least one sequence")
        self.num_sequences = num_sequences
        self.seed = seed
        self.position = position
        self._epoch = -1
        self._order = np.empty(0, dtype=np.int64)

    def _permutation(self, epoch: int) -> npt.NDArray[np.int64]:
        if epoch != self._epoch:
            self._order = np.random.default_rng([self.seed, epoch]).permutation(self.num_sequences)
            self._epoch = epoch
        return self._order

    def take(self, count: int) -> npt.NDArray[np.int64]:
        """The next ``count`` sequence indices (over all ranks); advances the position."""
        out = np.empty(count, dtype=np.int64)
        for i in range(count):
            epoch, offset = divmod(self.position + i, self.num_sequences)
            out[i] = self._permutation(epoch)[offset]
        self.position += count
        return out


def windows(tokens: npt.NDArray[Any], indices: npt.NDArray[np.int64], seq_len: int) -> npt.NDArray[np.int64]:
    """Rows of ``seq_len + 1`` tokens (inputs and shifted targets) for the given sequence indices."""
    rows = np.empty((len(indices), seq_len + 1), dtype=np.int64)
    for row, index in enumerate(indices):
        start = int(index) * seq_len
        rows[row] = tokens[start : start + seq_len + 1]
    return rows
