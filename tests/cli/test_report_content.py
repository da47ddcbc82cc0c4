"""What the reports' charts and tables say: labels that tell compared layouts apart, a breakdown axis that
shows where they differ, every policy's optimum inside the ETTR chart, the memory of the top layouts, and
the deadline beside time to train."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from mfukit.catalog.resolved import load_resolved
from mfukit.ft.plan import interval_grid_s, optimum_intervals_s
from mfukit.ft.setup import ft_inputs
from mfukit.perf.inputs import perf_inputs, search_space
from mfukit.perf.plan_report import breakdown_chart, labels, scaling_chart
from mfukit.perf.planner import search

ROOT = Path(__file__).parents[2]
SMALL = {"model.preset": "gpt3-1.3b", "cluster.gpu": "a100-80gb-sxm", "cluster.num_gpus": 16,
         "training.global_batch_size": 128}  # fmt: skip


def _plans(top_k: int = 5):  # type: ignore[no-untyped-def]
    inputs = perf_inputs(load_resolved(None, SMALL))
    found = search(
        inputs.workload, inputs.system, inputs.accelerator, [16], space=search_space(inputs), top_k=top_k
    )
    return found.plans


def test_labels_tell_the_compared_layouts_apart() -> None:
    plans = _plans(8)
    texts = labels(plans)
    assert len(set(texts)) == len(texts)
    best = plans[0]
    with_sp = replace(best, layout=best.layout.model_copy(update={"tp": 2, "sequence_parallel": True}))
    without = replace(best, layout=best.layout.model_copy(update={"tp": 2, "sequence_parallel": False}))
    pair = labels([with_sp, without])
    assert pair[0] != pair[1] and "+SP" in pair[0] and "+SP" not in pair[1]


def test_breakdown_axis_starts_below_the_shortest_compute_part() -> None:
    plans = _plans()
    chart = breakdown_chart(plans, {name: name for name in plans[0].breakdown_s})
    left, right = chart.figure.axes[0].get_xlim()
    first = next(iter(plans[0].breakdown_s))
    assert 0 < left < min(plan.breakdown_s[first] for plan in plans)
    assert right >= max(plan.step_time_s for plan in plans)


def test_ettr_chart_covers_every_policy_optimum() -> None:
    path = ROOT / "examples" / "llama3-405b_h100x16384.toml"
    inputs = ft_inputs(load_resolved(path))
    grid = interval_grid_s(inputs)
    optima = optimum_intervals_s(inputs)
    assert optima["sync"] > 10 * optima["async"]  # the optima are far apart: both must be inside
    assert all(grid[0] < interval < grid[-1] for interval in optima.values())


def test_plan_report_shows_top_memory_deadline_and_the_reduction_group(mfukit, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "r"
    run = mfukit(
        "plan", "--model", "llama3.1-8b", "--gpu", "h100-sxm", "--gpus", "64", "--global-batch-tokens", "4M",
        "--seq-len", "8192", "--cp", "2", "--tokens", "1T", "--deadline", "30d", "--report", str(out),
    )  # fmt: skip
    assert run.exit_code == 0, run.stderr
    html = (out / "report.html").read_text()
    assert "memory_top_layouts.png" in html and (out / "memory_top_layouts.png").is_file()
    assert "DP x CP (" in run.stdout  # the gradient group is DP x CP, not another DP degree
    assert "Scaling with GPU count" in html


def test_scaling_chart_marks_the_deadline_and_labels_each_count() -> None:
    inputs = perf_inputs(load_resolved(None, {**SMALL, "training.tokens": "26G"}))
    counts = [8, 16, 24, 32]
    found = search(
        inputs.workload,
        inputs.system,
        inputs.accelerator,
        counts,
        space=search_space(inputs),
        tokens=26e9,
        top_k=1,
    )
    chart = scaling_chart(found.best_per_count, 16, deadline_s=3 * 86400.0)
    mfu_axes, days_axes = chart.figure.axes
    deadline = [line for line in days_axes.get_lines() if line.get_label() == "deadline"]
    assert deadline and deadline[0].get_ydata()[0] == 3.0
    assert [tick.get_text() for tick in mfu_axes.get_xticklabels()] == ["8", "16", "24", "32"]
    assert len(mfu_axes.texts) == len(counts)  # each point names its layout


def test_duty_interval_reads_as_a_minimum(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("ft", "plan", str(ROOT / "examples" / "llama3-405b_h100x16384.toml"))
    assert "shortest interval for <= 50.0 % duty" in run.stdout
