"""What ``mfukit validate`` and ``mfukit calibrate`` show: a site's measured runs against the model, row by
row and per source, and the error before and after a site calibration, as command outputs."""

from __future__ import annotations

from pathlib import Path

from mfukit import units
from mfukit.core.results import Output, Table
from mfukit.perf.measured_runs import SkippedRow
from mfukit.perf.validation import RowCheck, SourceSummary, summarise


def rows_table(checks: list[RowCheck]) -> Table:
    table = Table(
        "measured runs against the model",
        ["source", "row", "model", "GPUs", "layout", "measured", "predicted (80 %)", "error", "inside"],
        csv_columns=[
            "source",
            "row_id",
            "model",
            "num_gpus",
            "layout",
            "measured_mfu",
            "predicted_mfu",
            "error",
            "inside_interval",
        ],
    )
    for check in checks:
        case, layout = check.case, check.case.layout
        low, high = check.interval.around_mfu(check.predicted_mfu)
        table.add(
            case.source,
            case.row_id,
            case.label,
            case.num_gpus,
            f"TP{layout.tp} PP{layout.pp} DP{layout.dp}" + (f" CP{layout.cp}" if layout.cp > 1 else ""),
            units.format_percent(check.measured_mfu),
            f"{units.format_percent(check.predicted_mfu)} ({low * 100:.0f}-{high * 100:.0f})",
            f"{check.error:+.1%}",
            "yes" if check.inside else "no",
        )
    return table


def summary_table(summaries: list[SourceSummary]) -> Table:
    table = Table(
        "error of the predicted MFU, |predicted - measured| / measured",
        ["source", "rows", "median", "p90", "bias", "inside 80 % interval", "fitted on it"],
        csv_columns=["source", "rows", "median", "p90", "bias", "coverage", "in_sample"],
    )
    for summary in summaries:
        table.add(
            summary.source,
            summary.rows,
            units.format_percent(summary.median_abs_error),
            units.format_percent(summary.p90_abs_error),
            f"{summary.median_signed_error:+.1%}",
            units.format_percent(summary.coverage, 0),
            "yes (in-sample)" if summary.in_sample else "no",
        )
    return table


def skipped_table(skipped: list[SkippedRow]) -> Table:
    table = Table("rows not predicted", ["row", "why"], csv_columns=["row_id", "reason"])
    for row in skipped:
        table.add(row.row_id, row.reason)
    return table


def summary_json(summaries: list[SourceSummary]) -> list[dict[str, object]]:
    return [
        {
            "source": s.source,
            "rows": s.rows,
            "median_abs_rel_error": s.median_abs_error,
            "p90_abs_rel_error": s.p90_abs_error,
            "median_signed_rel_error": s.median_signed_error,
            "interval_coverage": s.coverage,
            "in_sample": s.in_sample,
        }
        for s in summaries
    ]


def validate_output(runs_path: Path, checks: list[RowCheck], skipped: list[SkippedRow]) -> Output:
    """The output of ``validate``: every predicted row, the error per source, the rows skipped."""
    summaries = summarise(checks)
    warnings = [f"row {row.row_id} skipped: {row.reason}" for row in skipped]
    if any(check.in_sample for check in checks):
        warnings.append(
            "rows of sources the shipped constants were fitted on are in-sample: their error is not a test "
            "(benchmarks/accuracy.py gives the leave-one-source-out figures)"
        )
    tables = [rows_table(checks), summary_table(summaries)]
    if skipped:
        tables.append(skipped_table(skipped))
    output = Output(
        schema="validate/1",
        inputs={"runs": str(runs_path)},
        result={
            "rows": len(checks),
            "skipped": [{"row_id": row.row_id, "reason": row.reason} for row in skipped],
            "summary": summary_json(summaries),
            "runs": [
                {
                    "source": c.case.source,
                    "row_id": c.case.row_id,
                    "measured_mfu": c.measured_mfu,
                    "predicted_mfu": c.predicted_mfu,
                    "mfu_interval": list(c.interval.around_mfu(c.predicted_mfu)),
                    "in_sample": c.in_sample,
                }
                for c in checks
            ],
        },
        assumptions=[
            "MFU counts model FLOPs with full s^2 attention (mfukit's convention) over the dense peak of the "
            "run's precision; a measurement given as TFLOP/s, tokens/s or step time is converted with it",
            "intervals: 10th-90th percentile of the leave-one-source-out residuals of comparable runs, stretched "
            "until 80 % of held-out runs fall inside (perf.uncertainty)",
        ],
        warnings=warnings,
        tables=tables,
    )
    return output


def calibrate_output(
    runs_path: Path,
    out_dir: Path,
    cases: int,
    checks: tuple[list[RowCheck], list[RowCheck]],
    skipped: list[SkippedRow],
) -> Output:
    """The output of ``calibrate``: the error per source before and after (in-sample) the overlay in
    ``out_dir`` fitted on ``cases`` rows; ``checks``: the rows checked before and after."""
    before, after = checks
    before_summary, after_summary = summarise(before), summarise(after)
    table = Table(
        f"calibrated on {cases} runs: error before and after (after is in-sample)",
        ["source", "rows", "median before", "p90 before", "median after", "p90 after"],
        csv_columns=["source", "rows", "median_before", "p90_before", "median_after", "p90_after"],
    )
    for old, new in zip(before_summary, after_summary, strict=True):
        table.add(
            old.source,
            old.rows,
            units.format_percent(old.median_abs_error),
            units.format_percent(old.p90_abs_error),
            units.format_percent(new.median_abs_error),
            units.format_percent(new.p90_abs_error),
        )
    output = Output(
        schema="calibrate/1",
        inputs={"runs": str(runs_path), "out": str(out_dir)},
        result={
            "overlay": str(out_dir),
            "files": ["efficiency.toml", "loso_residuals.csv"],
            "rows": cases,
            "before": summary_json(before_summary),
            "after_in_sample": summary_json(after_summary),
        },
        assumptions=[
            "the site's runs refit the GPU curve of their family (single-node runs), their stack's host costs "
            "and the rank jitter; every other constant is the shipped one",
            f"use it: export MFUKIT_CATALOG={out_dir}",
        ],
        warnings=[f"row {row.row_id} skipped: {row.reason}" for row in skipped],
        tables=[table],
    )
    return output
