"""What ``mfukit train`` shows of a finished run: its summary (steps, loss, MFU, measured and predicted
ETTR), the goodput ledger of its latest launch and its restarts."""

from __future__ import annotations

from mfukit import units
from mfukit.core.results import Output, Table, shown
from mfukit.train.prepare import TrainRequest
from mfukit.train.run import TrainOutcome


def run_output(request: TrainRequest, outcome: TrainOutcome) -> Output:
    """The output of ``train``: the run's summary, its goodput ledger and its restarts."""
    result = outcome.result
    summary = Table("Training run", ["quantity", "value"])
    summary.add("steps", f"{result['steps']} of {result['steps_planned']} ({result['status']})")
    summary.add("restarts", result["restarts"])
    summary.add("final loss", shown(result["final_loss"], lambda v: f"{v:.4f}"))
    summary.add("MFU (median step)", shown(result["mfu"], units.format_percent))
    summary.add("tokens/s (median step)", shown(result["tokens_per_s"], units.format_count))
    summary.add(
        "straggler (slowest / others, max)", shown(result["straggler_ratio_max"], lambda v: f"{v:.2f}x")
    )
    summary.add("checkpoints kept", ", ".join(str(step) for step in result["checkpoints"]) or "—")
    summary.add("ETTR measured (whole run)", shown(result["ettr_measured"], lambda v: f"{v:.3f}"))
    summary.add("ETTR measured (training phase)", shown(result["ettr_steady_state"], lambda v: f"{v:.3f}"))
    summary.add("ETTR predicted (ft model, this run)", shown(result["ettr_predicted"], lambda v: f"{v:.3f}"))
    summary.add("ETTR expected (failure model)", shown(result["ettr_expected"], lambda v: f"{v:.3f}"))
    ledger = Table(
        "Goodput ledger (latest launch)",
        ["bucket", "time", "share of wall"],
        csv_columns=["bucket", "time_s", "share"],
    )
    wall = result["goodput"]["wall_s"]
    for bucket, seconds in result["goodput"].items():
        if bucket == "wall_s":
            continue
        share = seconds / wall if wall else 0.0
        ledger.add(
            bucket.removesuffix("_s").replace("_", " "),
            shown(seconds, units.format_duration),
            shown(share, units.format_percent),
        )
    ledger.add("wall", shown(wall, units.format_duration), shown(1.0 if wall else 0.0, units.format_percent))
    tables = [summary, ledger]
    if result["recoveries"]:
        restarts = Table(
            "Restarts",
            ["attempt", "failure", "resumed at step", "recovery"],
            csv_columns=["attempt", "failure", "resumed_step", "recovery_s"],
        )
        for item in result["recoveries"]:
            restarts.add(
                item["attempt"],
                item["failure"],
                item["resumed_step"],
                shown(item["recovery_s"], units.format_duration),
            )
        tables.append(restarts)
    inputs = {
        "scenario": str(request.scenario_path) if request.scenario_path else None,
        "overrides": request.overrides,
        "steps": request.steps,
        "inject": list(request.inject),
        "nproc_per_node": request.nproc_per_node,
        "nnodes": request.nnodes,
        "max_restarts": request.max_restarts,
    }
    return Output(
        schema="train/1",
        inputs=inputs,
        result=result,
        assumptions=outcome.assumptions,
        warnings=outcome.warnings,
        tables=tables,
        notes=[
            f"run directory: {result['out_dir']} (metrics.jsonl, ledger.jsonl, goodput.json, logs/train.log)"
        ],
        exit_code=outcome.exit_code,
    )
