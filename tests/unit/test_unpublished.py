"""The knobs a run did not publish: the micro-batch (1 with a pipeline) and the recompute, the fastest that
fits."""

from __future__ import annotations

import numpy as np

from mfukit import catalog
from mfukit.core.parallelism import Parallelism
from mfukit.perf.estimate import evaluate_layout
from mfukit.perf.layouts import Workload, grid_of
from mfukit.perf.planner import evaluate_grid_memory
from mfukit.perf.step_time import machine_for
from mfukit.perf.unpublished import _with_vpp, interleavings, tuned_choice

A100 = catalog.accelerator("a100-80gb-sxm")
DGX_A100 = catalog.system("dgx-a100-80gb")
GPT3 = catalog.model("gpt3-175b")
MACHINE = machine_for(DGX_A100, A100, 1024)


def _step_and_memory(workload: Workload, layout: Parallelism, size: int) -> tuple[float, float]:
    per_rank = workload.global_batch_sequences // layout.dp
    grid = grid_of(
        [layout], model=workload.model, micro_batch_size=[size], num_microbatches=[per_rank // size]
    )
    estimate, memory, _ = evaluate_grid_memory(workload, grid, MACHINE)
    return float(estimate.step_time_s[0]), float(memory.required_bytes[0])


def test_the_choice_is_the_fastest_candidate_that_fits() -> None:
    workload = Workload(model=GPT3, seq_len=2048, global_batch_sequences=1024)
    layout = Parallelism(tp=8, dp=128, zero=3)
    choice = tuned_choice(workload, layout, MACHINE, micro_batch_size=None, recomputes=None)
    chosen_step, chosen_memory = _step_and_memory(workload, choice.layout, choice.micro_batch_size)
    assert chosen_memory <= A100.hbm_bytes
    for mode in ("none", "selective", "full"):
        for size in (1, 2, 4, 8):
            step, memory = _step_and_memory(workload, layout.model_copy(update={"recompute": mode}), size)
            assert memory > A100.hbm_bytes or step >= chosen_step - 1e-9
    assert any("micro-batch not given" in note for note in choice.notes)
    assert any("recompute not given" in note for note in choice.notes)


def test_given_knobs_are_kept_and_a_pipeline_runs_micro_batches_of_one() -> None:
    workload = Workload(model=GPT3, seq_len=2048, global_batch_sequences=1536)
    layout = Parallelism(tp=8, pp=8, dp=16, recompute="selective", sequence_parallel=True)
    choice = tuned_choice(workload, layout, MACHINE, micro_batch_size=None, recomputes=("selective",))
    assert choice.micro_batch_size == 1 and choice.layout.recompute == "selective"
    assert len(choice.notes) == 1 and "pipeline" in choice.notes[0]
    fixed = tuned_choice(workload, layout, MACHINE, micro_batch_size=2, recomputes=("selective",))
    assert fixed.micro_batch_size == 2 and fixed.notes == []


def test_nothing_fitting_takes_the_least_memory() -> None:
    workload = Workload(model=GPT3, seq_len=2048, global_batch_sequences=64)
    layout = Parallelism(tp=1, dp=64)  # 175B replicated on each GPU: nothing fits
    choice = tuned_choice(workload, layout, MACHINE, micro_batch_size=None, recomputes=None)
    memories = [
        _step_and_memory(workload, layout.model_copy(update={"recompute": mode}), 1)[1]
        for mode in ("none", "selective", "full")
    ]
    assert choice.micro_batch_size == 1 and choice.layout.recompute == "full"
    assert np.argmin(memories) == 2


def test_fewer_zero3_gathers_make_the_tuned_choice_faster_than_micro_batches_of_one() -> None:
    workload = Workload(model=GPT3, seq_len=2048, global_batch_sequences=1024)
    layout = Parallelism(tp=8, dp=128, zero=3, recompute="full")
    tuned = evaluate_layout(workload, DGX_A100, A100, 1024, layout, micro_batch_size=None)
    one = evaluate_layout(workload, DGX_A100, A100, 1024, layout, micro_batch_size=1)
    assert tuned.plan is not None and one.plan is not None
    assert tuned.micro_batch_size > 1 and tuned.plan.step_time_s < one.plan.step_time_s
    assert tuned.layout.recompute == "full"  # given by the layout (it was set): kept


def test_interleavings_split_the_layers_evenly_or_as_the_recipes_do() -> None:
    assert interleavings(96, 1) == [1]
    assert interleavings(96, 8) == [1, 2, 3, 4, 6]  # 96 / (8 v) whole; 97 and 98 split for no other v
    # 126 layers on 16 ranks (Llama 3 405B): the embedding and the loss counted as layers, 128 / (16 v) whole
    assert interleavings(126, 16) == [1, 2, 4]
    assert interleavings(80, 4) == [1, 2, 4, 5]  # 80 / 12 and 80 / 24 do not divide, nor do 78 and 79


def test_an_unpublished_vpp_is_the_fastest_interleaving_that_fits() -> None:
    workload = Workload(model=GPT3, seq_len=2048, global_batch_sequences=512)
    layout = Parallelism(tp=8, pp=8, dp=4, recompute="selective", sequence_parallel=True)
    options = interleavings(GPT3.num_hidden_layers, layout.pp)
    choice = tuned_choice(
        workload, layout, MACHINE, micro_batch_size=1, recomputes=("selective",), vpps=options
    )
    assert choice.layout.vpp > 1 and any("vpp not given" in note for note in choice.notes)
    chosen_step, _ = _step_and_memory(workload, choice.layout, 1)
    for vpp in options:
        step, memory = _step_and_memory(workload, layout.model_copy(update={"vpp": vpp}), 1)
        assert memory > A100.hbm_bytes or step >= chosen_step - 1e-9
    # without candidates the layout's own vpp stays
    kept = tuned_choice(workload, layout, MACHINE, micro_batch_size=1, recomputes=("selective",))
    assert kept.layout.vpp == 1 and kept.notes == []


def test_a_recomputed_layer_count_keeps_its_share_when_the_virtual_stages_change() -> None:
    # 8 of the 16 layers of each rank (vpp 1) are 2 of the 4 layers of each of 4 chunks
    layout = Parallelism(tp=8, pp=4, dp=4, recompute="full", recompute_layers=8)
    chunked = _with_vpp(layout, 64, 4)
    assert chunked.vpp == 4 and chunked.recompute_layers == 2
