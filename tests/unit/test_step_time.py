"""The step-time model: its parts add up, and each mechanism moves the step the way the physics says."""

from __future__ import annotations

import numpy as np
import pytest

from mfukit import catalog
from mfukit.core.model import ModelSpec
from mfukit.core.parallelism import Parallelism
from mfukit.core.scenario import Precision
from mfukit.perf import flops
from mfukit.perf.efficiency import efficiency_for
from mfukit.perf.layouts import Workload, grid_of
from mfukit.perf.step_shapes import LayerShapes, layer_shapes
from mfukit.perf.step_time import (
    BREAKDOWN,
    Prepared,
    StepEstimate,
    estimate_steps,
    evaluate,
    machine_for,
    nccl_sm_share,
    prepare,
)

GPT3 = catalog.model("gpt3-175b")
A100 = catalog.system("dgx-a100-80gb"), catalog.accelerator("a100-80gb-sxm")


def run(
    layouts: list[Parallelism],
    *,
    model: str = "gpt3-175b",
    seq_len: int = 2048,
    batch: int = 1536,
    micro: int = 1,
    flash: bool = True,
    system: tuple = A100,  # type: ignore[type-arg]
    gpus: int | None = None,
    dropout: bool = False,
) -> StepEstimate:
    spec = catalog.model(model)
    workload = Workload(
        model=spec,
        seq_len=seq_len,
        global_batch_sequences=batch,
        flash_attention=flash,
        attention_dropout=dropout,
        hidden_dropout=dropout,
    )
    grid = grid_of(
        layouts,
        model=spec,
        micro_batch_size=[micro] * len(layouts),
        num_microbatches=[batch // (layout.dp * micro) for layout in layouts],
    )
    machine = machine_for(*system, gpus or max(layout.world_size for layout in layouts))
    return estimate_steps(workload, grid, machine)


def test_breakdown_adds_up_and_rates_agree() -> None:
    layout = Parallelism(tp=8, pp=8, dp=16, sequence_parallel=True, recompute="selective", zero=1)
    estimate = run([layout])
    parts = estimate.row(0)
    assert set(parts) == set(BREAKDOWN)
    assert sum(parts.values()) == pytest.approx(float(estimate.step_time_s[0]), rel=1e-12)
    tokens = 1536 * 2048
    assert float(estimate.tokens_per_s[0]) == pytest.approx(tokens / float(estimate.step_time_s[0]))
    expected_mfu = (
        flops.model_flops_per_token(GPT3, 2048) * tokens / float(estimate.step_time_s[0]) / 1024 / 312e12
    )
    assert float(estimate.mfu[0]) == pytest.approx(expected_mfu, rel=1e-9)
    assert float(estimate.hfu[0]) > float(estimate.mfu[0])  # selective recompute repeats the attention


def test_interleaving_shrinks_the_bubble_by_about_v() -> None:
    plain = Parallelism(tp=8, pp=8, dp=16, sequence_parallel=True, zero=1)
    estimate = run([plain, plain.model_copy(update={"vpp": 4})])
    bubble = estimate.breakdown_s["pipeline_bubble"]
    assert bubble[1] == pytest.approx(bubble[0] / 4, rel=0.25)
    # 1F1B: (p - 1) stage times of fill and drain, m micro-batches of the slowest stage
    m = 1536 // 16
    stage = (estimate.step_time_s[0] - bubble[0] - estimate.breakdown_s["dp_comm"][0]) / m
    assert bubble[0] / (m * stage) == pytest.approx(7 / m, rel=0.3)


def test_tensor_parallelism_across_nodes_costs_more_than_inside() -> None:
    inside = Parallelism(tp=8, pp=1, dp=16, sequence_parallel=True, zero=1)
    across = Parallelism(tp=16, pp=1, dp=8, sequence_parallel=True, zero=1)
    estimate = run([inside, across], gpus=128)
    per_microbatch = estimate.breakdown_s["tp_comm"] / np.asarray([1536 / 16, 1536 / 8])
    # a ring across two nodes runs at the node's NIC bandwidth (nccl: min(NVLink, NICs)), below NVLink
    assert per_microbatch[1] > 1.1 * per_microbatch[0]


def test_data_parallel_sync_hides_behind_the_last_backward_except_its_last_bucket() -> None:
    layout = Parallelism(tp=8, pp=4, dp=32, sequence_parallel=True, zero=1)
    spec = GPT3
    workload = Workload(model=spec, seq_len=2048, global_batch_sequences=1536)
    grid = grid_of([layout], model=spec, micro_batch_size=[1], num_microbatches=[48])
    prepared = prepare(workload, grid, machine_for(*A100, 1024))
    exposed = evaluate(prepared).breakdown_s["dp_comm"][0]
    raw = max(
        stage.grad_sync_s[0] + stage.param_gather_s[0]
        for stage in (prepared.comm.dp_first, prepared.comm.dp_last)
    )
    assert 0 < exposed < raw
    assert exposed >= prepared.comm.dp_first.bucket_s[0]


def test_flash_attention_beats_materialised_scores_at_long_sequences() -> None:
    layout = Parallelism(tp=8, pp=1, dp=1, sequence_parallel=True, recompute="full")
    flash = run([layout], model="llama2-7b", seq_len=16384, batch=8, flash=True)
    eager = run([layout], model="llama2-7b", seq_len=16384, batch=8, flash=False)
    assert eager.step_time_s[0] > 1.2 * flash.step_time_s[0]


def test_dropout_costs_hbm_traffic_only_where_its_masks_are_written() -> None:
    layout = Parallelism(tp=8, pp=1, dp=1, sequence_parallel=True, recompute="full")
    steps = {
        (flash, dropout): run([layout], seq_len=8192, batch=8, flash=flash, dropout=dropout)
        for flash in (True, False)
        for dropout in (True, False)
    }

    def extra(flash: bool) -> float:
        return float(steps[(flash, True)].step_time_s[0] - steps[(flash, False)].step_time_s[0])

    # both write the hidden-dropout masks (element-wise work); flash attention keeps its attention-dropout
    # mask in SRAM, while eager attention moves the dropped copy of the s^2 scores and its mask (9 + 11 B per
    # score instead of 4 + 6)
    flash_parts = {dropout: steps[(True, dropout)].breakdown_s for dropout in (True, False)}
    assert flash_parts[True]["memory_bound"][0] > flash_parts[False]["memory_bound"][0]
    assert flash_parts[True]["compute"][0] == flash_parts[False]["compute"][0]
    assert extra(flash=False) > 20 * extra(flash=True) > 0


@pytest.mark.parametrize("sequence_parallel", [False, True])
def test_dropout_bytes_are_the_masks_and_the_dropped_scores(sequence_parallel: bool) -> None:
    spec = catalog.model("gpt3-175b")
    layout = Parallelism(tp=8, pp=1, dp=1, sequence_parallel=sequence_parallel)
    grid = grid_of([layout], model=spec, micro_batch_size=[2], num_microbatches=[4])

    def shapes(dropout: bool) -> LayerShapes:
        workload = Workload(
            model=spec,
            seq_len=2048,
            global_batch_sequences=8,
            flash_attention=False,
            attention_dropout=dropout,
            hidden_dropout=dropout,
        )
        return layer_shapes(workload, grid)

    plain, dropped = shapes(False), shapes(True)
    tokens, hidden, heads = 2 * 2048, spec.hidden_size, spec.num_attention_heads / 8
    share = 1 / 8 if sequence_parallel else 1.0
    # two 1-byte masks a layer, written forward and read backward (the forward's bytes count three times)
    masks = float(dropped.memory_bytes["dense"][0] - plain.memory_bytes["dense"][0])
    assert 3 * masks == pytest.approx(2 * 2 * tokens * hidden * share)
    # eager attention's dropout reads, writes and stores its mask: 5 B per score each way
    scores = tokens * 2048 * heads
    for plain_bytes, dropped_bytes in zip(plain.score_bytes, dropped.score_bytes, strict=True):
        assert float(dropped_bytes[0] - plain_bytes[0]) == pytest.approx(5 * scores)


def test_moe_all_to_all_appears_with_expert_parallelism() -> None:
    dense = Parallelism(tp=2, pp=1, dp=32, ep=1, sequence_parallel=True, zero=1)
    expert = dense.model_copy(update={"ep": 8})
    estimate = run([dense, expert], model="mixtral-8x7b", seq_len=4096, batch=512)
    assert estimate.breakdown_s["ep_comm"][0] == 0
    assert estimate.breakdown_s["ep_comm"][1] > 0


def test_context_parallel_splits_the_attention() -> None:
    base = Parallelism(tp=8, pp=1, dp=2, cp=1, sequence_parallel=True, recompute="full", fsdp="full")
    split = base.model_copy(update={"dp": 1, "cp": 2})
    estimate = run([base, split], model="llama3.1-8b", seq_len=65536, batch=2)
    # the same GPUs, half the tokens each per micro-batch but two micro-batches of one sequence fewer
    assert estimate.breakdown_s["cp_comm"][1] >= 0
    assert np.all(estimate.step_time_s > estimate.compute_bound_s)


def test_recompute_costs_time() -> None:
    layouts = [
        Parallelism(tp=8, pp=8, dp=16, sequence_parallel=True, recompute=mode, zero=1)
        for mode in ("none", "selective", "full")
    ]
    estimate = run(layouts)
    step = estimate.step_time_s
    assert step[0] < step[1] < step[2]
    assert estimate.breakdown_s["recompute"][0] == 0


def test_recomputing_the_first_layers_of_each_chunk_costs_their_share_of_full_recompute() -> None:
    # GPT-3 175B on PP 8: 12 layers a stage; 3 layers of each chunk recomputed is a quarter of them, and
    # with two chunks per rank (vpp 2, 6 layers each) half
    base = Parallelism(tp=8, pp=8, dp=16, sequence_parallel=True, zero=1)
    layouts = [
        base,
        base.model_copy(update={"recompute": "full"}),
        base.model_copy(update={"recompute": "full", "recompute_layers": 3}),
        base.model_copy(update={"recompute": "full", "recompute_layers": 12}),
        base.model_copy(update={"recompute": "full", "recompute_layers": 3, "vpp": 2}),
        base.model_copy(update={"recompute": "full", "vpp": 2}),
    ]
    estimate = run(layouts)
    recompute = estimate.breakdown_s["recompute"]
    assert recompute[2] == pytest.approx(recompute[1] / 4, rel=1e-9)
    assert recompute[3] == pytest.approx(recompute[1], rel=1e-12)  # the whole stage: full recompute
    assert recompute[4] == pytest.approx(recompute[5] / 2, rel=1e-9)
    # HFU counts the recomputed layers' forward again: a quarter of what full recompute adds
    extra = estimate.hfu / estimate.mfu - 1
    assert extra[0] == 0 and extra[2] == pytest.approx(extra[1] / 4, rel=1e-9)
    assert estimate.step_time_s[0] < estimate.step_time_s[2] < estimate.step_time_s[1]


def test_recompute_layers_without_full_recompute_is_refused() -> None:
    with pytest.raises(ValueError, match="set recompute = full"):
        Parallelism(tp=8, recompute="selective", recompute_layers=4)


def test_fsdp_gathers_are_charged_every_microbatch() -> None:
    one = Parallelism(dp=64, fsdp="full", recompute="full")
    estimate_1 = run([one], model="llama2-7b", seq_len=4096, batch=64, micro=1)
    # more micro-batches of the same total batch: more gathers, never fewer
    estimate_2 = run([one], model="llama2-7b", seq_len=4096, batch=256, micro=1)
    assert estimate_2.breakdown_s["fsdp_comm"][0] >= estimate_1.breakdown_s["fsdp_comm"][0]


def _one_layout(
    layout: Parallelism,
    *,
    model: object,
    system: str,
    framework: str,
    gpus: int,
    micro: int = 1,
    batch: int = 256,
    seq_len: int = 2048,
) -> StepEstimate:
    workload = Workload(
        model=model,  # type: ignore[arg-type]
        seq_len=seq_len,
        global_batch_sequences=batch,
        framework=framework,
    )
    grid = grid_of(
        [layout],
        model=workload.model,
        micro_batch_size=[micro],
        num_microbatches=[batch // (layout.dp * micro)],
    )
    node = catalog.system(system)
    return estimate_steps(workload, grid, machine_for(node, catalog.accelerator(node.accelerator), gpus))


def test_small_layers_are_launch_bound_and_the_host_floor_scales_with_micro_batches() -> None:
    # GPT-3 125M at micro-batch 1: the GPU finishes a layer before the host has launched the next one
    tiny = catalog.model("gpt3-125m")
    one, two = (
        _one_layout(
            Parallelism(dp=8), model=tiny, system="dgx-a100-80gb", framework="megatron", gpus=8, batch=b
        )
        for b in (64, 128)
    )
    assert float(one.breakdown_s["other"][0]) > 0.2 * float(one.step_time_s[0])
    # twice the micro-batches, twice the launches
    assert float(two.breakdown_s["other"][0]) == pytest.approx(
        2 * float(one.breakdown_s["other"][0]), rel=0.05
    )
    big = _one_layout(
        Parallelism(tp=8, pp=8, dp=16), model=GPT3, system="dgx-a100-80gb", framework="megatron", gpus=1024
    )
    # hidden behind the GPU: the host's share of a 175B step is a small fraction of the tiny model's (the
    # shares themselves move with the fitted host costs)
    big_share = float(big.breakdown_s["other"][0]) / float(big.step_time_s[0])
    assert big_share < 0.1 * float(one.breakdown_s["other"][0]) / float(one.step_time_s[0])
    assert big_share < 0.05


def test_nanotron_exposes_the_zero1_weight_gather_that_megatron_overlaps() -> None:
    # nanotron all-gathers the updated weights after the optimizer step; Megatron's --overlap-param-gather
    # hides them under the next forward (framework facts, perf/data/efficiency.toml)
    model = catalog.model("llama3.1-8b")
    layout = Parallelism(tp=1, dp=64, zero=1)
    nanotron, megatron = (
        _one_layout(layout, model=model, system="p5-48xlarge", framework=name, gpus=64, micro=1)
        for name in ("nanotron", "megatron")
    )
    # both reduce fp32 gradients (Megatron-LM sets grad_reduce_in_fp32 for bf16); only nanotron waits for the gather
    assert float(nanotron.breakdown_s["dp_comm"][0]) > 2 * float(megatron.breakdown_s["dp_comm"][0])


def test_a_worse_network_profile_never_speeds_a_step_up() -> None:
    from mfukit.comm.topology import from_system
    from mfukit.perf.efficiency import NetworkProfile
    from mfukit.perf.step_time import with_network_profile

    model = catalog.model("llama3.1-8b")
    node = catalog.system("p5-48xlarge")
    h100 = catalog.accelerator("h100-sxm")
    layouts = [
        Parallelism(tp=8, dp=16, sequence_parallel=True),
        Parallelism(tp=16, dp=8),
        Parallelism(dp=128),
    ]
    workload = Workload(model=model, seq_len=4096, global_batch_sequences=256, framework="nanotron")
    grid = grid_of(
        layouts,
        model=model,
        micro_batch_size=[1] * 3,
        num_microbatches=[256 // layout.dp for layout in layouts],
    )
    steps = []
    for efficiency, latency in ((0.6, 1e-6), (0.3, 1e-6), (0.3, 3e-5)):
        topology, notes = from_system(node, h100, num_nodes=16)
        profile = NetworkProfile(name="efa-v2", efficiency=efficiency, step_latency_s=latency)
        topology, _ = with_network_profile(topology, "efa-v2", notes, profile)
        steps.append(
            estimate_steps(workload, grid, machine_for(node, h100, 128, topology=topology)).step_time_s
        )
    assert np.all(steps[1] >= steps[0] * (1 - 1e-12)) and np.all(steps[2] >= steps[1] * (1 - 1e-12))
    assert np.any(steps[2] > steps[0] * 1.01)


def _stack_run(layout: Parallelism, framework: str, *, micro: int, batch: int = 1536) -> StepEstimate:
    workload = Workload(model=GPT3, seq_len=2048, global_batch_sequences=batch, framework=framework)
    grid = grid_of(
        [layout], model=GPT3, micro_batch_size=[micro], num_microbatches=[batch // (layout.dp * micro)]
    )
    return estimate_steps(workload, grid, machine_for(*A100, layout.world_size))


def test_deepspeed_zero3_exposes_what_fsdp_prefetch_hides() -> None:
    # the same ZeRO-3 layout: FSDP gathers a whole layer one ahead, DeepSpeed one matrix at a time with 5e7
    # parameters of prefetch (a GPT-3 layer on TP 4 is 4.5e8 parameters per GPU)
    layout = Parallelism(tp=4, dp=256, zero=3, zero_impl="deepspeed")
    fsdp = _stack_run(layout, "fsdp", micro=3)
    deepspeed = _stack_run(layout, "deepspeed", micro=3)
    assert float(deepspeed.breakdown_s["fsdp_comm"][0]) > 3 * float(fsdp.breakdown_s["fsdp_comm"][0])
    assert float(deepspeed.mfu[0]) < float(fsdp.mfu[0])


def test_sharded_gathers_grow_exposed_as_the_per_gpu_batch_shrinks() -> None:
    # at a fixed global batch, more DP ranks leave less compute per layer to hide each layer's gathers under
    small, large = (
        _stack_run(Parallelism(tp=8, dp=dp, zero=3, zero_impl="deepspeed"), "deepspeed", micro=1)
        for dp in (64, 192)
    )
    assert float(large.mfu[0]) < float(small.mfu[0])
    share = {
        n: float(e.breakdown_s["fsdp_comm"][0] / e.step_time_s[0]) for n, e in ((64, small), (192, large))
    }
    assert share[192] > share[64]


def test_the_slowest_of_more_ranks_is_later() -> None:
    from mfukit.perf.step_time import straggler_factor

    factors = straggler_factor(np.asarray([1, 8, 1024, 16384]), 0.01)
    assert factors[0] == 0.0 and np.all(np.diff(factors) > 0)
    assert float(factors[2]) == pytest.approx(0.01 * np.sqrt(2 * np.log(1024)))


def test_hidden_communication_still_costs_the_sms_it_holds() -> None:
    from mfukit.perf.step_time import hidden_cost, nccl_sm_share

    share = nccl_sm_share(catalog.accelerator("a100-80gb-sxm"))
    assert share == pytest.approx(24 / 108)
    cost = hidden_cost(np.asarray([1.0, 1.0]), np.asarray([2.0, 0.5]), share)
    assert cost.tolist() == pytest.approx([share, 0.5 + 0.5 * share])


def test_fp8_inputs_cast_inside_fused_norm_and_activation_kernels_cost_nothing_of_their_own() -> None:
    from mfukit.perf.efficiency import efficiency_for

    spec = catalog.model("llama2-70b")
    system, accelerator = catalog.system("dgx-h100"), catalog.accelerator("h100-sxm")
    workload = Workload(model=spec, seq_len=4096, global_batch_sequences=64, precision="fp8")
    layout = Parallelism(tp=8, dp=8, sequence_parallel=True)
    grid = grid_of([layout], model=spec, micro_batch_size=[1], num_microbatches=[8])
    prepared = prepare(workload, grid, machine_for(system, accelerator, 64))
    base = efficiency_for(accelerator, "megatron-core")
    fused, unfused = (base.model_copy(update={"fp8_fused_input_casts": value}) for value in (1.0, 0.0))
    saved = (
        evaluate(prepared, unfused).breakdown_s["memory_bound"]
        - evaluate(prepared, fused).breakdown_s["memory_bound"]
    )
    # what the fused kernels save: the recipe's bytes on the QKV, first- and second-MLP inputs (the
    # projection's input, from attention, still pays), every layer of every micro-batch
    h, ffn, t = spec.hidden_size, spec.intermediate_size, 4096.0
    per_layer = base.fp8_input_cast_bytes * t * (h + h + ffn / 8)
    expected = 8 * spec.num_hidden_layers * per_layer / (accelerator.hbm_bytes_per_s * base.hbm_fraction)
    assert float(saved[0]) == pytest.approx(expected, rel=1e-6)


def test_fp8_all_gathers_halve_fsdp_traffic_and_cast_only_the_ranks_shard() -> None:
    spec = catalog.model("llama3.1-405b")
    system, accelerator = catalog.system("dgx-h100"), catalog.accelerator("h100-sxm")
    layout = Parallelism(tp=8, dp=16, fsdp="full", sequence_parallel=True, recompute="full")
    grid = grid_of([layout], model=spec, micro_batch_size=[2], num_microbatches=[1])
    machine = machine_for(system, accelerator, 128)

    def prepared(fp8_weights: str) -> Prepared:
        workload = Workload(
            model=spec, seq_len=8192, global_batch_sequences=32, precision="fp8", framework="torchtitan",
            fp8_weights=fp8_weights,  # type: ignore[arg-type]
        )  # fmt: skip
        return prepare(workload, grid, machine)

    bf16, fp8 = prepared("transient"), prepared("gathered")
    # the unit all-gathers move 1 B per weight instead of 2 (the reduce-scatters stay in fp32)
    assert float(fp8.comm.dp_first.unit_gather_s[0]) < 0.6 * float(bf16.comm.dp_first.unit_gather_s[0])
    assert float(fp8.fp8_weight_cast_share[0]) == 1 / 16 and float(bf16.fp8_weight_cast_share[0]) == 1.0
    # a layout that does not shard its weights gathers nothing and casts all of them
    unsharded = grid_of([Parallelism(tp=8, dp=16, sequence_parallel=True)], model=spec, micro_batch_size=[2],
                        num_microbatches=[1])  # fmt: skip
    plain = prepare(
        Workload(
            model=spec, seq_len=8192, global_batch_sequences=32, precision="fp8", fp8_weights="gathered"
        ),
        unsharded,
        machine,
    )
    assert float(plain.fp8_weight_cast_share[0]) == 1.0
    # so the step spends less on exposed gathers and on the weight casts
    steps = {name: evaluate(p).breakdown_s for name, p in (("bf16", bf16), ("fp8", fp8))}
    assert steps["fp8"]["fsdp_comm"][0] < steps["bf16"]["fsdp_comm"][0]
    assert steps["fp8"]["memory_bound"][0] < steps["bf16"]["memory_bound"][0]


def test_current_scaling_pays_an_amax_pass_on_every_fp8_input() -> None:
    spec = catalog.model("llama2-70b")
    system, accelerator = catalog.system("dgx-h100"), catalog.accelerator("h100-sxm")
    layout = Parallelism(tp=8, dp=8, sequence_parallel=True)
    grid = grid_of([layout], model=spec, micro_batch_size=[1], num_microbatches=[8])
    machine = machine_for(system, accelerator, 64)
    parts = {
        recipe: evaluate(
            prepare(
                Workload(
                    model=spec, seq_len=4096, global_batch_sequences=64, precision="fp8", fp8_recipe=recipe
                ),
                grid,
                machine,
            )
        ).breakdown_s["memory_bound"][0]
        for recipe in ("delayed", "current")
    }
    assert parts["current"] > parts["delayed"]


def _accumulation_s(
    layout: Parallelism,
    framework: str,
    precision: Precision,
    micro: tuple[int, ...],
    *,
    batch: int = 2048,
    model: ModelSpec = GPT3,
) -> list[float]:
    """The gradient-accumulation part of the step of ``layout`` at each micro-batch size of ``micro`` (same
    batch)."""
    out = []
    for m in micro:
        workload = Workload(
            model=model, seq_len=2048, global_batch_sequences=batch, framework=framework, precision=precision
        )
        grid = grid_of(
            [layout], model=model, micro_batch_size=[m], num_microbatches=[batch // (layout.dp * m)]
        )
        estimate = estimate_steps(workload, grid, machine_for(*A100, layout.world_size))
        out.append(float(estimate.breakdown_s["grad_accumulation"][0]))
    return out


def _pass_s_per_weight(framework: str, precision: Precision) -> float:
    """Seconds the stack's accumulation pass takes per weight on an A100: its bytes at the element-wise rate."""
    efficiency = efficiency_for(A100[1], framework)
    return efficiency.grad_accumulation_bytes(precision) / (A100[1].hbm_bytes_per_s * efficiency.hbm_fraction)


def test_deepspeed_bf16_pipeline_pays_its_gradient_accumulation_pass_every_micro_batch() -> None:
    # BigScience's 176B trials: the same batch in micro-batches of 1 and 4 on one TP 8 x PP 12 layout
    layout = Parallelism(tp=8, pp=12, dp=4, zero=1, recompute="full")
    batch, micro = 2048, (1, 4)
    one, four = _accumulation_s(layout, "megatron-deepspeed", "bf16", micro, batch=batch)
    # the last stage (8 layers and the output layer) is the slowest: its weights on one GPU, each moving the
    # stack's bytes (copied into fp32 and added into the fp32 buffers) per micro-batch
    h, vocab = GPT3.hidden_size, GPT3.vocab_size
    weights = (8 * (4 * h * h + 2 * h * GPT3.intermediate_size) + vocab * h) / 8
    per_weight = _pass_s_per_weight("megatron-deepspeed", "bf16")
    assert per_weight > 0
    micro_batches = [batch // (layout.dp * m) for m in micro]
    expected = (micro_batches[0] - micro_batches[1]) * weights * per_weight
    assert one - four == pytest.approx(expected, rel=0.02)
    assert one == pytest.approx(micro_batches[0] * weights * per_weight, rel=0.02)
    # Megatron's fused accumulation (in the weight-gradient GEMM), fp16 under local DDP, and sharded
    # gradients (ZeRO-3: only a shard accumulates) pay no pass of their own
    cases: tuple[tuple[str, Precision, Parallelism], ...] = (
        ("megatron-core", "bf16", layout),
        ("megatron-deepspeed", "fp16", layout),
        ("megatron-deepspeed", "bf16", Parallelism(tp=8, dp=64, zero=3, recompute="full")),
    )
    for framework, precision, sharded in cases:
        assert _accumulation_s(sharded, framework, precision, micro, batch=batch) == [0.0, 0.0], framework


def test_one_stage_accumulates_an_untied_embedding_and_output_layer_apart() -> None:
    # no pipeline: the one stage holds the embedding and the output layer, one matrix when they are tied
    layout = Parallelism(tp=8, dp=8, zero=1, recompute="full")
    tied, untied = (
        GPT3.model_copy(update={"tie_word_embeddings": tie, "name": f"gpt3 tied={tie}"})
        for tie in (True, False)
    )
    micro = (1, 4)
    one_tied, four_tied = _accumulation_s(layout, "megatron-deepspeed", "bf16", micro, batch=512, model=tied)
    one_untied, four_untied = _accumulation_s(
        layout, "megatron-deepspeed", "bf16", micro, batch=512, model=untied
    )
    # the untied output layer adds one vocabulary matrix per micro-batch: 64 - 16 more passes over it
    matrix = GPT3.vocab_size * GPT3.hidden_size / 8
    expected = (64 - 16) * matrix * _pass_s_per_weight("megatron-deepspeed", "bf16")
    assert (one_untied - four_untied) - (one_tied - four_tied) == pytest.approx(expected, rel=0.02)


def _prepared(
    layout: Parallelism, model: ModelSpec, framework: str, *, micro: int, micro_batches: int
) -> Prepared:
    """One layout of 4,096-token sequences on DGX A100s, as ``prepare`` gives it."""
    batch = layout.dp * micro * micro_batches
    workload = Workload(model=model, seq_len=4096, global_batch_sequences=batch, framework=framework)
    grid = grid_of([layout], model=model, micro_batch_size=[micro], num_microbatches=[micro_batches])
    return prepare(workload, grid, machine_for(*A100, layout.world_size))


def test_zero2_reduces_every_micro_batch_and_zero1_only_the_last() -> None:
    # Megatron-DeepSpeed overlaps no gradient reduction (its facts), so each reduction is exposed whole:
    # four times the micro-batches of one sequence each, three more reduce-scatters under ZeRO-2
    model = catalog.model("llama2-7b")
    totals = {}
    for zero in (1, 2):
        layout = Parallelism(dp=64, zero=zero, recompute="full")
        for batch in (64, 256):
            prepared = _prepared(layout, model, "megatron-deepspeed", micro=1, micro_batches=batch // 64)
            totals[zero, batch] = (
                float(evaluate(prepared).breakdown_s["dp_comm"][0]),
                float(prepared.comm.dp_first.grad_sync_s[0]),
            )
    (zero2_one, reduce_scatter), (zero2_four, _) = totals[2, 64], totals[2, 256]
    assert zero2_four - zero2_one == pytest.approx(3 * reduce_scatter, rel=1e-6)
    assert totals[1, 256][0] == pytest.approx(totals[1, 64][0], rel=1e-9)


def _hybrid(model_name: str, micro_batches: int) -> tuple[Prepared, StepEstimate]:
    layout = Parallelism(dp=128, fsdp="hybrid")
    prepared = _prepared(layout, catalog.model(model_name), "fsdp", micro=2, micro_batches=micro_batches)
    return prepared, evaluate(prepared)


def test_hybrid_fsdp_all_reduces_each_unit_across_replicas_under_the_backward() -> None:
    # HSDP on 16 nodes: each layer's gradient shard all-reduces across the 16 replicas as its backward ends,
    # under the backward of the layers still to run; the root unit (embedding, output layer, final norm)
    # finishes the backward, so its all-reduce is the one nothing hides (FSDP's post-backward hook)
    root_share = {}
    # the root (embedding and output layer) is 1.3 layers of Llama 2 7B (32K vocabulary), 4.8 of Llama 3.1 8B's
    for name in ("llama2-7b", "llama3.1-8b"):
        prepared, estimate = _hybrid(name, 1)
        dp = prepared.comm.dp_first
        sync, last = float(dp.grad_sync_s[0]), float(dp.bucket_s[0])
        assert 0 < last < 0.2 * sync  # one unit of 33: 4 % and 13 % of the all-reduces
        share = nccl_sm_share(prepared.machine.accelerator)
        assert float(estimate.breakdown_s["dp_comm"][0]) == pytest.approx(last + share * (sync - last))
        root_share[name] = last / sync * (catalog.model(name).num_hidden_layers + 1)
    # the root all-reduce of the 128K-vocabulary model is larger than an average unit's (4.2x)
    assert root_share["llama3.1-8b"] > 1


def test_hybrid_fsdp_all_reduces_every_micro_batch() -> None:
    # outside no_sync FSDP reduce-scatters and then all-reduces each micro-batch's gradients
    one, four = (float(_hybrid("llama2-7b", m)[1].breakdown_s["dp_comm"][0]) for m in (1, 4))
    assert four == pytest.approx(4 * one)
