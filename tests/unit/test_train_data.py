"""The token file and the deterministic, world-size independent sampler."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mfukit.errors import InputError
from mfukit.train.data import (
    SYNTHETIC_NOISE,
    Sampler,
    TokenFile,
    ensure_synthetic,
    open_token_file,
    synthetic_floor_nats,
    windows,
)


def test_synthetic_file_is_deterministic_and_follows_its_chain(tmp_path: Path) -> None:
    first = ensure_synthetic(tmp_path / "a", vocab_size=64, num_tokens=1024 * 64, seed=3)
    second = ensure_synthetic(tmp_path / "b", vocab_size=64, num_tokens=1024 * 64, seed=3)
    a, b = np.asarray(first.open()), np.asarray(second.open())
    assert a.dtype == np.uint16 and len(a) == 1024 * 64
    assert np.array_equal(a, b)
    # the file is 1024 streams one after another; within a stream each token's most frequent successor
    # follows it with probability 1 - noise + noise / vocab
    streams = a.reshape(1024, -1)
    pairs = np.stack([streams[:, :-1].ravel(), streams[:, 1:].ravel()])
    counts = np.zeros((64, 64))
    np.add.at(counts, (pairs[0], pairs[1]), 1)
    follow = counts.max(axis=1).sum() / counts.sum()
    assert follow == pytest.approx(1 - SYNTHETIC_NOISE + SYNTHETIC_NOISE / 64, abs=0.01)


def test_synthetic_floor_is_the_chain_entropy() -> None:
    assert synthetic_floor_nats(2, noise=0.0) == pytest.approx(0.0, abs=1e-12)
    assert synthetic_floor_nats(1024, noise=1.0) == pytest.approx(math.log(1024))
    assert 0 < synthetic_floor_nats(2048) < math.log(2048)


def test_user_token_files_are_checked(tmp_path: Path) -> None:
    good = tmp_path / "good.bin"
    np.arange(100, dtype=np.uint16).tofile(good)
    tokens = open_token_file(good, vocab_size=128, seq_len=8)
    assert (tokens.num_tokens, tokens.num_sequences(8)) == (100, 12)
    with pytest.raises(InputError, match="token id 99 >= vocab_size 50"):
        open_token_file(good, vocab_size=50, seq_len=8)
    odd = tmp_path / "odd.bin"
    odd.write_bytes(b"\x00" * 7)
    with pytest.raises(InputError, match="whole number of 2-byte tokens"):
        open_token_file(odd, vocab_size=128, seq_len=2)
    with pytest.raises(InputError, match="not found"):
        open_token_file(tmp_path / "none.bin", vocab_size=128, seq_len=2)
    with pytest.raises(InputError, match="fewer than seq_len"):
        open_token_file(good, vocab_size=128, seq_len=200)


def test_windows_are_inputs_and_shifted_targets(tmp_path: Path) -> None:
    path = tmp_path / "t.bin"
    np.arange(50, dtype=np.uint16).tofile(path)
    rows = windows(TokenFile.at(path, 1000).open(), np.array([0, 3]), 4)
    assert rows.tolist() == [[0, 1, 2, 3, 4], [12, 13, 14, 15, 16]]


@given(st.integers(1, 40), st.integers(0, 1000), st.lists(st.integers(1, 30), min_size=1, max_size=8))
def test_sampler_order_depends_only_on_its_position(count: int, seed: int, takes: list[int]) -> None:
    """Resuming at any position (on any world size) yields exactly the sequences an unbroken run reads."""
    unbroken = Sampler(count, seed).take(sum(takes))
    pieces = []
    position = 0
    for size in takes:
        pieces.append(Sampler(count, seed, position=position).take(size))
        position += size
    assert np.array_equal(np.concatenate(pieces), unbroken)


def test_sampler_visits_every_sequence_once_per_epoch() -> None:
    order = Sampler(10, 7).take(20)
    assert sorted(order[:10].tolist()) == list(range(10))
    assert sorted(order[10:].tolist()) == list(range(10))
    assert not np.array_equal(order[:10], order[10:])  # a fresh permutation each epoch
