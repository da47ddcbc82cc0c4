"""Invariants of the memory model: more sharding, more recompute or larger TP never raise the peak.

NCCL keeps buffers per communicator, so going from 1 to 2 ranks in a dimension adds one (a real cost):
the TP and DP properties therefore compare degrees >= 2. Recompute is compared with flash attention (the
default) and at least two layers per stage: without flash attention, recomputing one layer materialises the
s^2 scores that selective recompute never keeps, and a stage of one layer and one micro-batch under full
recompute briefly holds the attention's log-sum-exp that selective drops (both real).
"""

from __future__ import annotations

import itertools
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from mfukit.core.model import ModelSpec
from mfukit.core.parallelism import Parallelism
from mfukit.perf.memory import StepShape, estimate_memory

models = st.builds(
    lambda layers, heads, head_dim, kv_div, ffn_mult, vocab, mlp: ModelSpec(
        num_hidden_layers=layers,
        hidden_size=heads * head_dim,
        num_attention_heads=heads,
        num_key_value_heads=heads // kv_div,
        intermediate_size=ffn_mult * heads * head_dim,
        vocab_size=vocab,
        mlp=mlp,
    ),
    st.sampled_from([8, 16, 32]),
    st.sampled_from([16, 32, 64]),
    st.sampled_from([64, 128]),
    st.sampled_from([1, 2, 8]),
    st.sampled_from([2, 3, 4]),
    st.sampled_from([32000, 128256]),
    st.sampled_from(["gelu", "swiglu"]),
)
shapes = st.builds(
    StepShape,
    seq_len=st.sampled_from([1024, 4096]),
    micro_batch_size=st.sampled_from([1, 2, 4]),
    num_microbatches=st.sampled_from([1, 8, 32]),
)
pps = st.sampled_from([1, 2, 4, 8])
recomputes = st.sampled_from(["none", "selective", "full"])


def peak(model: ModelSpec, shape: StepShape, **layout: object) -> float:
    return estimate_memory(model, Parallelism.model_validate(layout), shape).peak_bytes


@settings(max_examples=40, deadline=None)
@given(models, shapes, pps, st.sampled_from([2, 4, 16]), recomputes)
def test_more_dp_ranks_never_raise_memory(model, shape, pp, dp, recompute) -> None:  # type: ignore[no-untyped-def]
    for sharding in (
        {"zero": 0},
        {"zero": 1},
        {"zero": 1, "zero_impl": "deepspeed"},
        {"zero": 2},
        {"zero": 3},
        {"fsdp": "full"},
    ):
        common = {"pp": pp, "recompute": recompute, **sharding}
        assert peak(model, shape, dp=2 * dp, **common) <= peak(model, shape, dp=dp, **common)


@settings(max_examples=40, deadline=None)
@given(models, shapes, pps, st.sampled_from([2, 8, 64]))
def test_more_sharding_never_raises_memory(model, shape, pp, dp) -> None:  # type: ignore[no-untyped-def]
    common = {"pp": pp, "dp": dp}
    assert peak(model, shape, zero=1, **common) <= peak(model, shape, zero=0, **common)
    assert peak(model, shape, zero=2, **common) <= peak(model, shape, zero=1, zero_impl="deepspeed", **common)
    assert peak(model, shape, fsdp="full", **common) <= peak(model, shape, fsdp="hybrid", **common)


@settings(max_examples=40, deadline=None)
@given(models, shapes, st.sampled_from([1, 2, 4]), st.booleans())
def test_more_recompute_never_raises_memory(model, shape, pp, sp) -> None:  # type: ignore[no-untyped-def]
    common = {"pp": pp, "tp": 2, "sequence_parallel": sp}
    none, selective, full = (
        peak(model, shape, recompute=mode, **common) for mode in ("none", "selective", "full")
    )
    assert full <= selective <= none


@settings(max_examples=40, deadline=None)
@given(models, shapes, pps, recomputes, st.booleans())
def test_larger_tp_never_raises_memory(model, shape, pp, recompute, sp) -> None:  # type: ignore[no-untyped-def]
    sizes = [t for t in (2, 4, 8) if model.kv_heads % t == 0]
    peaks = [peak(model, shape, tp=t, pp=pp, recompute=recompute, sequence_parallel=sp) for t in sizes]
    assert all(later <= earlier for earlier, later in itertools.pairwise(peaks))


@settings(max_examples=30, deadline=None)
@given(models, shapes, pps, st.sampled_from([2, 8]), st.sampled_from([0.25, 0.5, 1.0]))
def test_more_offload_never_raises_memory(model, shape, pp, dp, share) -> None:  # type: ignore[no-untyped-def]
    for sharding in ({"zero": 1}, {"zero": 2}, {"zero": 3}, {"fsdp": "full"}):
        layout = Parallelism.model_validate({"pp": pp, "dp": dp, **sharding})
        base = estimate_memory(model, layout, shape).peak_bytes
        for field in ("offload_optimizer", "offload_params", "offload_activations"):
            half = estimate_memory(model, layout, replace(shape, **{field: share / 2})).peak_bytes
            more = estimate_memory(model, layout, replace(shape, **{field: share})).peak_bytes
            assert more <= half <= base
