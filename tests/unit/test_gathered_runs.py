"""benchmarks/data/calibration/gathered_runs.csv: schema, provenance, layout arithmetic, no forbidden source, no
duplicate of the other calibration files, and byte-equal to what build_gathered_runs.py writes."""

from __future__ import annotations

import csv
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

from mfukit import catalog
from mfukit.perf.calibration_data import held_out_source
from mfukit.perf.measured_runs import OFFLOADS, OPTIONAL_COLUMNS, read_runs

FOLDER = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "calibration"
# the Megatron-stack file of shared/reference: reserved for checking the model, never fitted
MEGATRON_CSV = Path(__file__).resolve().parents[2] / "tests/data/perf/megatron_published_runs.csv"
GATHERED = FOLDER / "gathered_runs.csv"
FRAMEWORKS = {"megatron-core", "nemo", "megatron-deepspeed", "deepspeed", "torchtitan", "fsdp", "nanotron"}
ATTENTION = {"flash", "eager"}
SWITCH = {"", "yes", "no"}
INT_COLUMNS = ("row_id", "n_layers", "hidden", "n_heads", "n_kv_heads", "ffn_hidden", "vocab", "seq_len")
INT_COLUMNS += ("global_batch_sequences", "global_batch_tokens", "n_gpus", "tp", "pp", "dp", "cp", "ep")
FLOAT_COLUMNS = ("n_params", "peak_tflops_used", "measured_tflops_per_gpu", "measured_mfu_pct", "hfu_pct")
FLOAT_COLUMNS += ("tokens_per_sec_per_gpu", "tokens_per_sec_total", "step_time_s", "peak_mem_gib_per_gpu")
FLOAT_COLUMNS += ("derived_model_tflops_per_gpu", "derived_mfu_pct", "derived_mfu_vs_bf16_dense_pct")
MEASURED = ("measured_tflops_per_gpu", "measured_mfu_pct", "tokens_per_sec_per_gpu", "step_time_s")


def _read(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        return list(reader.fieldnames or []), list(reader)


@pytest.fixture(scope="module")
def gathered() -> tuple[list[str], list[dict[str, str]]]:
    return _read(GATHERED)


def _builder() -> ModuleType:
    spec = importlib.util.spec_from_file_location("build_gathered_runs", FOLDER / "build_gathered_runs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file executes
    spec.loader.exec_module(module)
    return module


def test_header_is_the_shared_schema_plus_the_optional_columns(
    gathered: tuple[list[str], list[dict[str, str]]],
) -> None:
    schema, _ = _read(MEGATRON_CSV)
    published, _ = _read(FOLDER / "published_runs_calibration.csv")
    assert schema == published
    header, rows = gathered
    assert header == schema + list(OPTIONAL_COLUMNS)
    assert len(rows) >= 50


def test_csv_is_what_the_builder_writes() -> None:
    assert GATHERED.read_text() == _builder().render()


def test_every_row_has_provenance_and_a_measured_figure(
    gathered: tuple[list[str], list[dict[str, str]]],
) -> None:
    for row in gathered[1]:
        for column in (
            "source",
            "source_detail",
            "source_group",
            "reported_fields",
            "model_name",
            "gpu_type",
        ):
            assert row[column].strip(), f"row {row['row_id']}: {column} is empty"
        assert re.fullmatch(r"[a-z0-9]+(_[a-z0-9]+)*", row["source_group"]), row["source_group"]
        assert any(row[column] for column in MEASURED), f"row {row['row_id']} has no measured figure"
        assert row["framework"] in FRAMEWORKS, row["framework"]
        assert row["attention"] in ATTENTION, row["attention"]
        assert all(not part or part in OFFLOADS for part in row["offload"].split("+")), row["offload"]
        assert row["compile"] in SWITCH and row["tp_comm_overlap"] in SWITCH, row["row_id"]
        if row["system"]:
            assert catalog.system(row["system"]).accelerator, row["system"]  # a catalog node


def test_numbers_parse_and_the_layout_multiplies_to_the_gpu_count(
    gathered: tuple[list[str], list[dict[str, str]]],
) -> None:
    for row in gathered[1]:
        ints = {column: int(row[column]) for column in INT_COLUMNS}
        for column in FLOAT_COLUMNS:
            if row[column]:
                assert float(row[column]) > 0, f"row {row['row_id']}: {column}"
        assert ints["tp"] * ints["pp"] * ints["dp"] * ints["cp"] == ints["n_gpus"], row["row_id"]
        assert ints["dp"] * ints["cp"] % ints["ep"] == 0, row["row_id"]
        assert ints["global_batch_tokens"] == ints["global_batch_sequences"] * ints["seq_len"]
        if row["micro_batch"]:
            assert ints["global_batch_sequences"] % (int(row["micro_batch"]) * ints["dp"]) == 0 or (
                row["source_group"] == "gptneox20b_paper"  # the paper's 1538 is not a multiple of 4 x 12
            ), row["row_id"]


def test_derived_columns_follow_from_the_measured_ones(
    gathered: tuple[list[str], list[dict[str, str]]],
) -> None:
    for row in gathered[1]:
        if not row["tokens_per_sec_per_gpu"]:
            assert not row["derived_model_tflops_per_gpu"]
            continue
        per_gpu = float(row["tokens_per_sec_per_gpu"])
        n_gpus = int(row["n_gpus"])
        assert float(row["tokens_per_sec_total"]) == pytest.approx(per_gpu * n_gpus, rel=1e-4)
        step_s = float(row["step_time_s"])
        assert step_s * per_gpu * n_gpus == pytest.approx(int(row["global_batch_tokens"]), rel=2e-3)
        flops_per_token = 6 * float(row["n_params"]) + 12 * int(row["n_layers"]) * int(row["hidden"]) * int(
            row["seq_len"]
        )
        derived = per_gpu * flops_per_token / 1e12
        assert float(row["derived_model_tflops_per_gpu"]) == pytest.approx(derived, abs=0.06)
        assert float(row["derived_mfu_pct"]) == pytest.approx(
            100 * derived / float(row["peak_tflops_used"]), abs=0.06
        )


def test_no_row_comes_from_a_forbidden_source(gathered: tuple[list[str], list[dict[str, str]]]) -> None:
    for row in gathered[1]:
        assert held_out_source(row) is None, f"row {row['row_id']} mentions {held_out_source(row)}"


def _key(row: dict[str, str]) -> tuple[str, ...]:
    """A run: GPU family, shape, layout, batch, and its measured throughput."""
    measured = row["tokens_per_sec_per_gpu"] or row["measured_tflops_per_gpu"] or row["step_time_s"]
    layout = ("n_gpus", "tp", "pp", "dp", "cp", "seq_len", "global_batch_sequences", "n_layers", "hidden")
    return (
        row["gpu_type"][:4],
        *(str(int(float(row[c] or 0))) for c in layout),
        f"{float(measured or 0):.1f}",
    )


def test_no_duplicate_of_the_other_calibration_files(
    gathered: tuple[list[str], list[dict[str, str]]],
) -> None:
    rows = gathered[1]
    ids = [int(row["row_id"]) for row in rows]
    assert len(set(ids)) == len(ids)
    keys = [_key(row) for row in rows]
    assert len(set(keys)) == len(keys)
    for path in (FOLDER / "published_runs_calibration.csv", MEGATRON_CSV):
        _, other = _read(path)
        assert not set(ids) & {int(row["row_id"]) for row in other}, path.name
        assert not set(keys) & {_key(row) for row in other}, path.name


def test_the_reserved_megatron_rows_never_reach_the_fit() -> None:
    from mfukit.perf.calibration_data import load_cases

    _, rows = _read(MEGATRON_CSV)
    assert {int(row["row_id"]) for row in rows if held_out_source(row)} == {27, 28}  # MT-NLG's model
    loaded = {case.source for case in load_cases()}
    assert not loaded & {"korthikanti2022", "megatron_core_h100_2024"}


def test_the_duplicate_key_sees_a_copied_row() -> None:
    _, other = _read(MEGATRON_CSV)
    copied = dict(other[0], row_id="99999")
    assert _key(copied) == _key(other[0])


def test_the_readme_table_counts_the_rows_of_each_source_group(
    gathered: tuple[list[str], list[dict[str, str]]],
) -> None:
    counts: dict[str, int] = {}
    for row in gathered[1]:
        counts[row["source_group"]] = counts.get(row["source_group"], 0) + 1
    readme = (FOLDER / "README.md").read_text()
    section = readme.split("## `gathered_runs.csv`", 1)[1]
    listed = {
        match.group(1): int(match.group(2))
        for match in re.finditer(r"^\| `([a-z0-9_]+)` \|[^\n]*?\| ([0-9]+) \|", section, flags=re.MULTILINE)
    }
    assert listed == counts
    assert f"| `gathered_runs.csv` | {len(gathered[1])} |" in readme


def test_flagperf_rows_run_on_the_nodes_and_stacks_their_cases_name() -> None:
    """FlagPerf's A800 rows run on the A800 node (NVLink cut to 400 GB/s), its Megatron-Core rows without TP
    overlap (the launch script passes no --tp-comm-overlap), its ZeRO-3 rows on DeepSpeed."""
    cases = [case for case in read_runs(GATHERED)[0] if case.source == "baai_flagperf"]
    a800 = [case for case in cases if case.accelerator.name == "a800-80gb-sxm"]
    assert a800 and all(case.system.name == "dgx-a800" for case in a800)
    assert (
        catalog.accelerator("a800-80gb-sxm").scale_up_bytes_per_s
        < catalog.accelerator("a100-80gb-sxm").scale_up_bytes_per_s
    )
    stacks = {case.workload.framework for case in cases}
    assert stacks == {"megatron-core", "megatron-deepspeed", "deepspeed"}
    assert all(
        case.workload.tp_comm_overlap is False for case in cases if case.workload.framework == "megatron-core"
    )
    assert all(case.layout.zero == 3 for case in cases if case.workload.framework == "deepspeed")
