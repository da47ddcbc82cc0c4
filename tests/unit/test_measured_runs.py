"""The calibration CSV schema as step-time cases: layouts the stacks pick themselves, bad rows named."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from mfukit.core.parallelism import Parallelism, default_stage_split, layout_problems
from mfukit.core.scenario import stack_alias
from mfukit.errors import InputError
from mfukit.perf.measured_runs import OPTIONAL_COLUMNS, read_runs

# the Megatron-stack rows of shared/reference: reserved for checking the model (never fitted), read here as a site's file
MEGATRON_CSV = Path(__file__).resolve().parents[2] / "tests/data/perf/megatron_published_runs.csv"
HEADER = MEGATRON_CSV.open().readline().strip().split(",")


def _write(path: Path, rows: list[dict[str, str]], extra: tuple[str, ...] = ()) -> Path:
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=[*HEADER, *extra])
        writer.writeheader()
        for row in rows:
            writer.writerow(row)
    return path


def _row(**values: str) -> dict[str, str]:
    base = {
        "row_id": "1",
        "source": "a site",
        "source_group": "site",
        "model_name": "GPT 7B",
        "n_layers": "32",
        "hidden": "4096",
        "n_heads": "32",
        "ffn_hidden": "16384",
        "vocab": "51200",
        "seq_len": "2048",
        "global_batch_sequences": "256",
        "micro_batch": "2",
        "gpu_type": "A100-SXM4-80GB",
        "n_gpus": "64",
        "tp": "2",
        "pp": "2",
        "dp": "16",
        "zero_stage_or_fsdp": "distributed optimizer",
        "activation_recompute": "selective",
        "precision": "bf16",
        "tokens_per_sec_per_gpu": "2500",
    }
    return base | values


@pytest.mark.parametrize(
    ("layers", "pp", "vpp", "split"),
    [
        (126, 16, 1, (7, 7)),  # Llama 3 405B's published split: (126 + 2) / 16 = 8, one fewer at each end
        (126, 8, 8, (15, 15)),  # NeMo's 405B recipe: 2 layers per virtual stage, the first and last hold 1
        (80, 8, 1, None),  # even
        (95, 8, 1, (12, 11)),  # 95 + 1 = 96: only the loss counted, the last stage one layer lighter
        (32, 5, 1, (7, 7)),  # no rule divides: edges of 7 + embedding / loss, the middle 6 each
        (29, 4, 1, None),  # nothing splits: Megatron asks for the counts (the layout check says so)
    ],
)
def test_default_stage_split_follows_megatron(
    layers: int, pp: int, vpp: int, split: tuple[int, int] | None
) -> None:
    assert default_stage_split(layers, pp, vpp) == split
    if split is not None:
        first, last = split
        layout = Parallelism(pp=pp, vpp=vpp, first_stage_layers=first, last_stage_layers=last)
        from mfukit import catalog

        model = catalog.model("llama3.1-405b").model_copy(update={"num_hidden_layers": layers})
        problems = layout_problems(
            layout, model, seq_len=8192, global_batch_sequences=None, micro_batch_size=1
        )
        assert not problems, problems


def test_stack_aliases_fold_spelling() -> None:
    assert stack_alias("Megatron") == "megatron-core"
    assert stack_alias("Megatron_Core") == "megatron-core"
    assert stack_alias("NeMo") == "nemo"
    assert stack_alias("DeepSpeed") == "deepspeed"
    assert stack_alias("caffe") == "caffe"  # a true miss stays a miss (the profile lookup names the stacks)


def test_a_row_becomes_a_case_with_the_stack_defaults(tmp_path: Path) -> None:
    path = _write(tmp_path / "runs.csv", [_row()], ("framework",))
    (case,), skipped = read_runs(path)
    assert not skipped
    assert case.workload.framework == "megatron-core" and case.layout.sequence_parallel  # MCore: SP with TP
    assert case.layout.zero == 1 and case.num_microbatches == 256 // (16 * 2)
    assert case.system.name == "dgx-a100-80gb" and case.measured_tokens_per_s_per_gpu == 2500


def test_an_unpublished_vpp_is_tuned_only_on_a_stack_that_interleaves(tmp_path: Path) -> None:
    rows = [
        _row(row_id="1"),
        _row(row_id="2", vpp="1"),
        _row(row_id="3", framework="megatron-deepspeed", zero_stage_or_fsdp="ZeRO-1"),
    ]
    tuned, published, deepspeed = read_runs(_write(tmp_path / "runs.csv", rows, ("framework",)))[0]
    # 32 layers on 2 ranks, 8 micro-batches: the interleaved schedule shrinks the bubble (pp - 1) / (v m)
    assert tuned.layout.vpp > 1 and 32 % (2 * tuned.layout.vpp) == 0
    assert published.layout.vpp == 1
    assert deepspeed.layout.vpp == 1  # DeepSpeed's PipelineEngine runs one stage per rank


def test_a_vpp_given_as_interleaved_is_tuned_over_more_than_one_virtual_stage(tmp_path: Path) -> None:
    # torchtitan's 405B table says "Interleaved 1F1B" without the virtual stages: a number of them that
    # splits the layers, more than one
    path = _write(tmp_path / "runs.csv", [_row(vpp="Interleaved")])
    (case,), _ = read_runs(path)
    assert case.layout.vpp > 1 and 32 % (2 * case.layout.vpp) == 0
    # a stack with one stage per rank cannot have run it
    row = _row(vpp="interleaved", framework="megatron-deepspeed", zero_stage_or_fsdp="ZeRO-1")
    with pytest.raises(InputError) as raised:
        read_runs(_write(tmp_path / "deepspeed.csv", [row], ("framework",)))
    assert raised.value.field == "vpp" and "no interleaved schedule" in str(raised.value)


@pytest.mark.parametrize(
    ("recompute", "hfu", "mfu", "expected"),
    [
        ("full", "", "", ("full", None)),
        ("full, 5 layers (--recompute-method block --recompute-num-layers 5)", "", "", ("full", 5)),
        ("full, every 2nd layer (torchtitan selective layer AC)", "", "", ("full", 8)),  # 16 per stage
        ("full, 40 layers", "", "", ("full", None)),  # more than a stage holds: every layer
        ("full, every other layer", "", "", ("full", 8)),
        ("full, uniform method, 1 layer", "", "", ("full", None)),  # every layer, checkpointed in groups
        # fms-fsdp's "selective" checkpointing of a share of the blocks: HFU / MFU = 1 + share x 0.33
        ("selective", "66.5", "60", ("full", 5)),
        ("selective", "60.2", "60", ("none", None)),
        ("selective", "80", "60", ("full", None)),
    ],
)
def test_partial_full_recompute_is_read_from_the_text_or_the_published_hfu(
    tmp_path: Path, recompute: str, hfu: str, mfu: str, expected: tuple[str, int | None]
) -> None:
    row = _fsdp_row(activation_recompute=recompute, hfu_pct=hfu, measured_mfu_pct=mfu)
    assert _recomputed(tmp_path, row) == expected


def test_a_recompute_share_read_from_hfu_is_raised_to_every_layer_where_it_could_not_have_fit(
    tmp_path: Path,
) -> None:
    # 5 of 16 layers a stage recomputed would leave 11 storing 16 sequences each: over 80 GB
    row = _fsdp_row(
        activation_recompute="selective",
        micro_batch="16",
        global_batch_sequences="1024",
        hfu_pct="66.5",
        measured_mfu_pct="60",
    )
    assert _recomputed(tmp_path, row) == ("full", None)


def _fsdp_row(**values: str) -> dict[str, str]:
    """A row of FSDP over 32 ranks on a pipeline of 2 (16 layers a stage)."""
    fsdp = {"framework": "fsdp", "zero_stage_or_fsdp": "FSDP FULL_SHARD", "tp": "1", "pp": "2", "dp": "32"}
    return _row(vpp="1", **fsdp) | values


def _recomputed(tmp_path: Path, row: dict[str, str]) -> tuple[str, int | None]:
    (case,), _ = read_runs(_write(tmp_path / "runs.csv", [row], ("framework",)))
    return case.layout.recompute, case.layout.recompute_layers


def test_full_recompute_of_no_layer_is_a_row_error(tmp_path: Path) -> None:
    with pytest.raises(InputError) as raised:
        _recomputed(tmp_path, _fsdp_row(activation_recompute="full, 0 layers"))
    assert raised.value.field == "activation_recompute" and "write none" in raised.value.render()


def test_deepspeed_zero3_and_eager_attention_are_read(tmp_path: Path) -> None:
    row = _row(zero_stage_or_fsdp="ZeRO-3", tp="1", pp="1", dp="64", framework="DeepSpeed", attention="eager")
    (case,), _ = read_runs(_write(tmp_path / "runs.csv", [row], ("framework", "attention")))
    assert case.layout.zero == 3 and case.layout.zero_impl == "deepspeed"
    assert case.workload.framework == "deepspeed" and not case.workload.flash_attention
    assert not case.layout.sequence_parallel


def test_apex_distributed_fused_adam_is_read_as_the_zero_2_it_implements(tmp_path: Path) -> None:
    row = _row(zero_stage_or_fsdp="distributed optimizer (distributed_fused_adam)", framework="nemo")
    (case,), _ = read_runs(_write(tmp_path / "runs.csv", [row], ("framework",)))
    assert case.layout.zero == 2  # gradients sharded too: no full fp32 main-gradient buffer


@pytest.mark.parametrize(
    ("attention", "cells", "expected"),
    [
        ("eager", {}, (True, True)),  # unstated: Megatron-LM's 0.1 of the 2021-22 eager runs
        ("flash", {}, (False, False)),  # unstated: the Llama-family recipes' none
        ("eager", {"attention_dropout": "0", "hidden_dropout": "0"}, (False, False)),
        ("flash", {"attention_dropout": "0", "hidden_dropout": "0.1"}, (False, True)),
    ],
)
def test_dropout_is_read_as_stated_and_by_the_attention_kernel_when_not(
    tmp_path: Path, attention: str, cells: dict[str, str], expected: tuple[bool, bool]
) -> None:
    columns = ("attention", "attention_dropout", "hidden_dropout")
    row = _row(attention=attention, **{"attention_dropout": "", "hidden_dropout": "", **cells})
    (case,), _ = read_runs(_write(tmp_path / "runs.csv", [row], columns))
    assert (case.workload.attention_dropout, case.workload.hidden_dropout) == expected


def test_a_dropout_of_one_or_more_is_refused_with_its_column(tmp_path: Path) -> None:
    row = _row(attention_dropout="1.0", hidden_dropout="")
    with pytest.raises(InputError) as raised:
        read_runs(_write(tmp_path / "runs.csv", [row], ("attention_dropout", "hidden_dropout")))
    assert raised.value.field == "attention_dropout" and "0 <= p < 1" in raised.value.render()


def test_compile_and_tp_overlap_are_read_and_blank_means_the_default(tmp_path: Path) -> None:
    extra = ("framework", "compile", "tp_comm_overlap")
    rows = [
        _row(row_id="1", framework="torchtitan", compile="yes", tp_comm_overlap="True"),
        _row(row_id="2", framework="torchtitan", compile="0", tp_comm_overlap="no"),
        _row(row_id="3", framework="torchtitan"),
    ]
    compiled, eager, blank = read_runs(_write(tmp_path / "runs.csv", rows, extra))[0]
    assert compiled.workload.compile and compiled.workload.tp_comm_overlap is True
    assert not eager.workload.compile and eager.workload.tp_comm_overlap is False
    assert not blank.workload.compile and blank.workload.tp_comm_overlap is None  # the stack's default


def test_the_norm_column_says_which_norm_kernel_ran_and_blank_keeps_the_stacks(tmp_path: Path) -> None:
    rows = [
        _row(row_id=str(i), framework="torchtitan", norm=norm)
        for i, norm in enumerate(("fused", "eager", ""))
    ]
    fused, eager, blank = read_runs(_write(tmp_path / "runs.csv", rows, ("framework", "norm")))[0]
    assert fused.workload.fused_norm is True and eager.workload.fused_norm is False
    assert blank.workload.fused_norm is None  # torchtitan's composite RMSNorm: as its eager kernels
    with pytest.raises(InputError) as raised:
        read_runs(_write(tmp_path / "bad.csv", [_row(norm="triton")], ("norm",)))
    assert raised.value.field == "norm"


@pytest.mark.parametrize("column", ["compile", "tp_comm_overlap"])
def test_a_switch_that_is_not_yes_or_no_names_its_column(tmp_path: Path, column: str) -> None:
    path = _write(tmp_path / "runs.csv", [_row(row_id="4", **{column: "sometimes"})], (column,))
    with pytest.raises(InputError) as raised:
        read_runs(path)
    text = raised.value.render()
    assert "row 4 (line 2)" in text and f"column '{column}'" in text and "yes or no" in text


def test_the_offload_column_says_what_moved_and_who_steps_the_optimizer(tmp_path: Path) -> None:
    rows = [
        _row(row_id="1", offload="optimizer"),
        _row(row_id="2", offload="optimizer-states; activations"),
        _row(row_id="3", offload=""),
    ]
    cpu, gpu, none = read_runs(_write(tmp_path / "runs.csv", rows, ("offload",)))[0]
    assert (cpu.workload.offload_optimizer, cpu.workload.offload_optimizer_step) == (1.0, "cpu")
    assert (gpu.workload.offload_optimizer, gpu.workload.offload_optimizer_step) == (1.0, "gpu")
    assert gpu.workload.offload_activations == 1.0 and gpu.workload.offload_params == 0.0
    assert none.workload.offload_optimizer == 0.0 and none.workload.offload_activations == 0.0
    bad = _write(tmp_path / "bad.csv", [_row(row_id="5", offload="optimiser")], ("offload",))
    with pytest.raises(InputError) as raised:
        read_runs(bad)
    text = raised.value.render()
    assert "row 5 (line 2)" in text and "offload: 'optimiser'" in text and "optimizer-states" in text
    both = _write(
        tmp_path / "both.csv", [_row(row_id="6", offload="optimizer+optimizer-states")], ("offload",)
    )
    with pytest.raises(InputError) as raised:
        read_runs(both)
    text = raised.value.render()
    assert "row 6 (line 2)" in text and "offload_optimizer_step" in text and "name each kind once" in text


def test_the_docs_name_every_optional_column() -> None:
    docs = (Path(__file__).resolve().parents[2] / "docs/performance-model.md").read_text()
    schema = docs[docs.index("## Site calibration") :]
    assert all(f"`{column}`" in schema for column in OPTIONAL_COLUMNS)


@pytest.mark.parametrize(
    ("column", "value", "said"),
    [
        ("tp", "two", "column 'tp'"),
        ("n_gpus", "60", "tp x pp x dp x cp = 64 but n_gpus = 60"),
        ("gpu_type", "V100", "unknown gpu_type"),
        ("tokens_per_sec_per_gpu", "-5", "column 'tokens_per_sec_per_gpu'"),
        ("precision", "fp8", "a100-80gb-sxm has no fp8 math"),  # A100 has no FP8 tensor cores
        ("precision", "mixed", "names none of fp8, bf16, fp16, fp32"),  # not read as 16-bit
        ("precision", "nvfp4 (bf16 first/last layers)", "names fp4, which is not modelled"),
        ("precision", "fp4 w/ fp32 accum", "names fp4, which is not modelled"),  # not read as fp32
        ("n_kv_heads", "5", "column 'n_kv_heads'"),  # does not divide the 32 heads
        ("hidden", "1e30", "column 'hidden'"),  # a shape no model has, not an MFU for it
        ("n_heads", "3", "column 'n_heads'"),  # does not divide the hidden size
    ],
)
def test_a_bad_cell_names_the_row_and_the_column(tmp_path: Path, column: str, value: str, said: str) -> None:
    path = _write(tmp_path / "runs.csv", [_row(row_id="7", **{column: value})])
    with pytest.raises(InputError) as raised:
        read_runs(path)
    text = raised.value.render()
    assert "row 7 (line 2)" in text and said in text


@pytest.mark.parametrize(
    ("cell", "precision"),
    [("", "bf16"), ("unknown", "bf16"), ("bfloat16", "bf16"), ("float16", "fp16"), ("16-bit", "bf16")],
)
def test_a_blank_or_torch_spelled_precision_is_read(tmp_path: Path, cell: str, precision: str) -> None:
    cases, _ = read_runs(_write(tmp_path / "runs.csv", [_row(precision=cell)]))
    assert cases[0].workload.precision == precision


def test_rows_without_a_published_layout_are_skipped_with_the_reason(tmp_path: Path) -> None:
    path = _write(tmp_path / "runs.csv", [_row(tp="", pp="", dp="")])
    cases, skipped = read_runs(path)
    assert not cases and skipped[0].reason == "not published: tp, pp, dp"


def test_an_fp8_scaling_the_model_lacks_is_skipped_and_tensorwise_is_read(tmp_path: Path) -> None:
    rows = [
        _row(row_id="1", precision="fp8 (float8 rowwise, bf16 all-gather)", gpu_type="H100-SXM5-80GB"),
        _row(row_id="2", precision="fp8 (float8 tensorwise, fp8 all-gather)", gpu_type="H100-SXM5-80GB"),
        _row(
            row_id="3", precision="bf16 (rowwise-parallel embedding)"
        ),  # not an FP8 run: the word is not a recipe
    ]
    cases, skipped = read_runs(_write(tmp_path / "runs.csv", rows))
    assert [case.row_id for case in cases] == [2, 3] and cases[0].workload.precision == "fp8"
    assert skipped[0].row_id == "1" and "rowwise scaling is not modelled" in skipped[0].reason


@pytest.mark.parametrize(
    ("framework", "precision", "fp8_weights"),
    [
        ("torchtitan", "fp8 (float8 tensorwise, fp8 all-gather)", "gathered"),  # torchao's FP8 all-gather
        ("torchtitan", "fp8 (float8 tensorwise)", "transient"),  # the stack's default: 16-bit all-gathers
        ("megatron-core", "fp8 (fp8 all-gather)", "primary"),  # --fp8-param-gather
        ("nemo", "fp8 (bf16 all-gather)", "cached"),  # NeMo's recipes gather FP8 unless the row says not
        ("nemo", "fp8", "primary"),
        (
            "torchtitan",
            "fp8 (float8 tensorwise, no fp8 all-gather)",
            "transient",
        ),  # said, and said not to run
        ("megatron-core", "fp8 (--fp8-param-gather)", "primary"),  # Megatron's own spelling
    ],
)
def test_the_precision_cell_says_how_the_weights_were_all_gathered(
    tmp_path: Path, framework: str, precision: str, fp8_weights: str
) -> None:
    row = _row(precision=precision, gpu_type="H100-SXM5-80GB", framework=framework)
    (case,), _ = read_runs(_write(tmp_path / "runs.csv", [row], ("framework",)))
    assert case.workload.fp8_weights == fp8_weights


def test_an_fp8_all_gather_on_a_stack_without_one_names_the_row(tmp_path: Path) -> None:
    row = _row(row_id="7", precision="fp8 (fp8 all-gather)", gpu_type="H100-SXM5-80GB", framework="deepspeed")
    with pytest.raises(InputError) as raised:
        read_runs(_write(tmp_path / "runs.csv", [row], ("framework",)))
    text = raised.value.render()
    assert (
        "row 7" in text
        and "deepspeed stack has no FP8 all-gather" in text
        and raised.value.field == "precision"
    )


def test_a_file_without_the_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "runs.csv"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(InputError) as raised:
        read_runs(path)
    assert "lacks the column" in raised.value.render()


def test_the_megatron_stack_file_reads_every_published_layout() -> None:
    cases, skipped = read_runs(MEGATRON_CSV)
    assert {case.source for case in cases} == {
        "korthikanti2022",
        "megatron_core_h100_2024",
        "nemo_megatron_bridge",
    }
    assert [row.row_id for row in skipped] == ["40", "41"]  # the strong-scaling rows publish no layout
    llama405 = next(case for case in cases if case.row_id == 82)
    assert (llama405.layout.first_stage_layers, llama405.layout.last_stage_layers) == (15, 15)
    assert llama405.workload.precision == "fp8" and llama405.workload.framework == "nemo"
