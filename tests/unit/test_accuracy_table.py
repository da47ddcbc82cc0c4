"""The accuracy table of docs/performance-model.md shows, under each source's title, that source's held-out
figures: the leave-one-source-out residuals the shipped calibration wrote (perf/data/loso_residuals.csv)."""

from __future__ import annotations

import collections
import importlib.util
import math
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from mfukit.perf.uncertainty import load_residuals

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "performance-model.md"


@pytest.fixture(scope="module")
def accuracy() -> ModuleType:
    spec = importlib.util.spec_from_file_location("accuracy_benchmark", ROOT / "benchmarks" / "accuracy.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def doc_table() -> list[list[str]]:
    lines = DOC.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| source | runs | median"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip().strip("*") for cell in line.strip("|").split("|")])
    return rows


def held_out_errors() -> dict[str, np.ndarray]:
    by_source: dict[str, list[float]] = collections.defaultdict(list)
    for residual in load_residuals():
        by_source[residual.source].append(math.exp(-residual.log_error) - 1)  # predicted / measured - 1
    return {source: np.asarray(errors) for source, errors in by_source.items()}


def test_every_source_has_one_row_under_its_own_title(accuracy: ModuleType) -> None:
    titles = [row[0] for row in doc_table()]
    sources = sorted(held_out_errors())
    assert titles[: len(sources)] == [accuracy.SOURCE_TITLES[source] for source in sources]
    assert len(set(accuracy.SOURCE_TITLES.values())) == len(accuracy.SOURCE_TITLES)


def test_each_rows_figures_are_its_sources_held_out_error(accuracy: ModuleType) -> None:
    source_of = {title: source for source, title in accuracy.SOURCE_TITLES.items()}
    errors = held_out_errors()
    for title, runs, median, p90, bias, *_ in doc_table()[: len(errors)]:
        row = accuracy.summarise(source_of[title], errors[source_of[title]])
        assert [runs, median, p90, bias] == [
            f"{row['rows']:,}",
            accuracy.percent(row["median_abs_rel_error"]),
            accuracy.percent(row["p90_abs_rel_error"]),
            accuracy.percent(row["median_signed_rel_error"], signed=True),
        ], title


def test_the_overall_row_weighs_every_source_equally(accuracy: ModuleType) -> None:
    errors = held_out_errors()
    values = np.concatenate(list(errors.values()))
    weights = np.concatenate([np.full(len(e), 1.0 / len(e)) for e in errors.values()])
    overall = accuracy.summarise("all sources, weighted equally", values, weights)
    title, runs, median, p90, *_ = doc_table()[len(errors)]
    assert title == "all sources, weighted equally"
    assert [runs, median, p90] == [
        f"{overall['rows']:,}",
        accuracy.percent(overall["median_abs_rel_error"]),
        accuracy.percent(overall["p90_abs_rel_error"]),
    ]
