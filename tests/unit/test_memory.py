"""The memory model against the formulas it implements (Korthikanti et al. 2022; Megatron; DeepSpeed)."""

from __future__ import annotations

import pytest

from mfukit.core.model import ModelSpec
from mfukit.core.parallelism import Parallelism, split_stage_layers
from mfukit.perf.activations import ActivationShape, embedding_input_bytes, layer_activation_bytes
from mfukit.perf.memory import StepShape, estimate_memory, in_flight_microbatches, stage_layers
from mfukit.perf.model_states import sharding_of, state_bytes_per_param

# GPT-3 175B (Brown et al. 2020, Table 2.1): the model of Korthikanti et al.'s Table 2.
GPT3 = ModelSpec(
    num_hidden_layers=96,
    hidden_size=12288,
    num_attention_heads=96,
    intermediate_size=4 * 12288,
    vocab_size=51200,
    mlp="gelu",
    norm="layernorm",
    position_embedding="learned",
)
S, B, H, A = 2048, 1, 12288, 96


def gpt_layer(**kwargs: object) -> float:
    shape = ActivationShape(
        seq_len=S,
        micro_batch_size=B,
        flash_attention=False,
        attention_dropout=True,
        hidden_dropout=True,
        **kwargs,
    )  # type: ignore[arg-type]
    return layer_activation_bytes(GPT3, shape)


def test_korthikanti_no_parallelism() -> None:
    assert gpt_layer() == pytest.approx(S * B * H * (34 + 5 * A * S / H))


@pytest.mark.parametrize("t", [2, 4, 8])
def test_korthikanti_tensor_parallel(t: int) -> None:
    assert gpt_layer(tp=t) == pytest.approx(S * B * H * (10 + 24 / t + 5 * A * S / (H * t)))


@pytest.mark.parametrize("t", [2, 8])
def test_korthikanti_sequence_parallel(t: int) -> None:
    assert gpt_layer(tp=t, sequence_parallel=True) == pytest.approx(S * B * H / t * (34 + 5 * A * S / H))


def test_korthikanti_selective_and_full_recompute() -> None:
    t = 8
    assert gpt_layer(tp=t, sequence_parallel=True, recompute="selective") == pytest.approx(S * B * H * 34 / t)
    assert gpt_layer(tp=t, sequence_parallel=True, recompute="full") == pytest.approx(2 * S * B * H / t)


def test_each_dropout_keeps_its_own_masks() -> None:
    def layer(attention: bool, hidden: bool, flash: bool = False) -> float:
        shape = ActivationShape(
            seq_len=S,
            micro_batch_size=B,
            flash_attention=flash,
            attention_dropout=attention,
            hidden_dropout=hidden,
        )
        return layer_activation_bytes(GPT3, shape)

    # hidden dropout: a 1-byte mask after attention and after the MLP (2sbh of Korthikanti's 34sbh)
    assert layer(False, True) - layer(False, False) == pytest.approx(2 * S * B * H)
    # attention dropout: the mask (a s^2 b) and the dropped 16-bit copy (2 a s^2 b) of the scores
    assert layer(True, False) - layer(False, False) == pytest.approx(3 * A * S * S * B)
    # flash attention regenerates its mask in backward: nothing stored
    assert layer(True, False, flash=True) == layer(False, False, flash=True)


def test_embedding_dropout_keeps_only_its_mask() -> None:
    # its output is the first layer's input, counted with the layer; its backward needs only the mask
    shape = ActivationShape(seq_len=S, micro_batch_size=B)
    dropped = ActivationShape(seq_len=S, micro_batch_size=B, hidden_dropout=True)
    assert embedding_input_bytes(GPT3, dropped) - embedding_input_bytes(GPT3, shape) == pytest.approx(
        S * B * H
    )


def test_flash_attention_drops_the_score_matrix() -> None:
    flash = layer_activation_bytes(
        GPT3, ActivationShape(seq_len=S, micro_batch_size=B, attention_dropout=True, hidden_dropout=True)
    )
    # the s^2 terms are gone; a float32 log-sum-exp per query row and head remains
    assert flash == pytest.approx(S * B * H * 34 + 4 * S * B * A)


def test_gqa_shrinks_k_and_v() -> None:
    mha = GPT3.model_copy(update={"mlp": "swiglu"})
    gqa = mha.model_copy(update={"num_key_value_heads": 8})
    shape = ActivationShape(seq_len=S, micro_batch_size=B)
    head = H // A
    assert layer_activation_bytes(mha, shape) - layer_activation_bytes(gqa, shape) == pytest.approx(
        2 * 2 * S * B * (A - 8) * head
    )


@pytest.mark.parametrize(
    ("layout", "expected"),
    [
        (Parallelism(), 18.0),  # Megatron: 2 + 4 + 12
        (Parallelism(zero=1), 6 + 12 / 64),  # distributed optimizer
        (Parallelism(zero=1, zero_impl="deepspeed"), 4 + 16 / 64),
        (Parallelism(zero=2), 2 + 18 / 64),
        (Parallelism(zero=3), 18 / 64),
        (Parallelism(fsdp="full"), 16 / 64),
    ],
)
def test_bytes_per_param(layout: Parallelism, expected: float) -> None:
    assert state_bytes_per_param(sharding_of(layout), 64, "bf16", "fp32").total == pytest.approx(expected)


def test_pipeline_in_flight() -> None:
    assert in_flight_microbatches(8, 1, 0, 64) == 8  # 1F1B: stage 0 holds p
    assert in_flight_microbatches(8, 1, 7, 64) == 1
    assert in_flight_microbatches(8, 1, 0, 3) == 3  # fewer micro-batches than stages
    assert in_flight_microbatches(8, 4, 0, 64) == pytest.approx(8 * (1 + 7 / (8 * 4)))


def test_first_stage_holds_embedding_last_holds_logits() -> None:
    layout = Parallelism(tp=8, pp=4, dp=16, sequence_parallel=True, recompute="selective", zero=1)
    estimate = estimate_memory(GPT3, layout, StepShape(seq_len=S, num_microbatches=32))
    assert estimate.first.embedding_bytes > 0 and estimate.first.logits_and_loss_bytes == 0
    assert estimate.last.logits_and_loss_bytes > 0 and estimate.last.embedding_bytes == 0
    assert estimate.first.activations_bytes == pytest.approx(4 * estimate.last.activations_bytes)
    assert estimate.peak is estimate.first


def test_partial_full_recompute_keeps_the_inputs_of_the_layers_it_recomputes_only() -> None:
    # PP 4 of GPT-3 175B: 24 layers a stage; recomputing the first 6 of each stage keeps only their
    # inputs, the other 18 store what a layer without recompute stores
    def stored(**recompute: object) -> float:
        layout = Parallelism(tp=8, pp=4, dp=16, sequence_parallel=True, zero=1, **recompute)  # type: ignore[arg-type]
        return estimate_memory(
            GPT3, layout, StepShape(seq_len=S, num_microbatches=32)
        ).first.activations_bytes

    none, full = stored(), stored(recompute="full")
    assert stored(recompute="full", recompute_layers=6) == pytest.approx(full / 4 + 3 * none / 4, rel=1e-12)
    assert stored(recompute="full", recompute_layers=24) == pytest.approx(full, rel=1e-12)


def test_fits_against_hbm() -> None:
    layout = Parallelism(tp=8, pp=8, dp=16, sequence_parallel=True, recompute="selective", zero=1)
    estimate = estimate_memory(GPT3, layout, StepShape(seq_len=S, num_microbatches=64))
    assert estimate.fits(80 * 2**30)
    assert not estimate_memory(GPT3, Parallelism(dp=8), StepShape(seq_len=S)).fits(80 * 2**30)


def test_megatron_gpt3_175b_weights_and_optimizer() -> None:
    """Megatron's report for GPT-3 175B at TP 8, PP 8, DP 16 with the distributed optimizer: (6 + 12/16)
    bytes per parameter of the first stage's 12 layers and the embedding."""
    layout = Parallelism(tp=8, pp=8, dp=16, zero=1)
    stage = estimate_memory(GPT3, layout, StepShape(seq_len=S)).first
    layer = GPT3.layer_params(moe_layer=False)
    norms = 2 * 2 * H
    params = 12 * ((layer - norms) / 8 + norms) + GPT3.embedding_params() / 8
    states = stage.weights_bytes + stage.gradients_bytes + stage.optimizer_states_bytes
    assert states == pytest.approx(params * (6 + 12 / 16))


@pytest.mark.parametrize(
    ("num_layers", "pp", "first", "last"),
    [
        (32, 4, 2, None),
        (32, 4, None, 5),
        (32, 4, None, 6),
        (126, 16, 7, 7),
        (32, 4, None, None),
        (30, 4, None, None),
    ],
)
def test_memory_holds_the_layers_the_step_time_splits(
    num_layers: int, pp: int, first: int | None, last: int | None
) -> None:
    """One split for both: with only the first (or last) stage's count given, the rest spread evenly over the
    other stages, the last (first) included, as Megatron does; the memory model had given that stage
    num_layers // pp and the middle ones the remainder."""
    shape = StepShape(seq_len=2048, first_stage_layers=first, last_stage_layers=last)
    held = [len(stage_layers(num_layers, pp, rank, shape)) for rank in range(pp)]
    assert sum(held) == num_layers
    counts = split_stage_layers(num_layers, pp, first, last)
    if all(count.is_integer() for count in counts):  # Megatron's split needs whole counts; else sum only
        assert (held[0], held[1], held[-1]) == tuple(int(count) for count in counts)
