"""``mfukit diagnose PATH...``: why a job sits below its expected MFU, from its own artifacts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.markup import escape

from mfukit.cli.common import emit, format_option, progress, report_option, scenario_options
from mfukit.cli.render import Format
from mfukit.core.results import Output
from mfukit.diagnose import report as diagnosis_report
from mfukit.diagnose.engine import diagnose as run_diagnosis
from mfukit.diagnose.given import job
from mfukit.diagnose.sources import sources

KINDS_HELP = "; ".join(source.description for source in sources())


@click.command(
    help=f"""Diagnose a training job from its artifacts: ranked causes of lost MFU, their fixes, the gates.

PATH is a file or a directory (scanned recursively; each file's kind is detected): {KINDS_HELP}.
Exit 1 when a finding has error severity."""
)
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--scenario", "scenario_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Scenario file with [model], [training], [parallelism], [cluster] and [ft] (the failure model).")  # fmt: skip
@scenario_options(
    "model", "gpu", "gpus", "system", "nodes", "seq_len", "global_batch_size", "global_batch_tokens",
    "micro_batch_size", "precision", "tp", "pp", "dp", "cp", "vpp", "sequence_parallel", "recompute",
    "recompute_layers", "zero", "fsdp", "framework", "failure_rate",
)  # fmt: skip
@format_option
@report_option
def diagnose(
    paths: tuple[Path, ...],
    scenario_path: Path | None,
    overrides: dict[str, Any],
    fmt: Format,
    report_dir: Path | None,
) -> int:
    known = job(scenario_path, overrides)
    model, cluster = known.model, known.cluster
    with progress("reading artifacts") as callback:
        diagnosis = run_diagnosis(paths, **known._asdict(), progress=callback)
    tables = [diagnosis_report.findings_table(diagnosis), *diagnosis_report.gates_tables(diagnosis)]
    for table in (
        diagnosis_report.breakdown_table(diagnosis),
        diagnosis_report.job_table(diagnosis),
        diagnosis_report.skipped_table(diagnosis),
    ):
        if table is not None:
            tables.append(table)
    warnings = [*diagnosis.job_warnings]
    warnings += [f"{f.title}: {f.summary}" for f in diagnosis.findings if f.id == "degraded_input"]
    if diagnosis.expected.warning is not None and diagnosis.mfu.measured is not None:
        warnings.append(diagnosis.expected.warning)
    output = Output(
        schema="diagnose/1",
        inputs={
            "paths": [str(p) for p in paths],
            "scenario": str(scenario_path) if scenario_path else None,
            "overrides": overrides,
            "model": model.name if model else None,
            "accelerator": cluster.accelerator.name if cluster else None,
            "num_gpus": cluster.num_gpus if cluster else None,
        },
        result=diagnosis_report.result(diagnosis),
        assumptions=diagnosis.assumptions,
        warnings=warnings,
        tables=tables,
        notes=[escape(line) for line in diagnosis_report.notes(diagnosis)],
        exit_code=1 if diagnosis.has_errors else 0,
    )
    if report_dir is not None:
        from mfukit.report.html import write_report

        output.files.append(write_report(diagnosis_report.html_report(diagnosis, warnings), report_dir))
    return emit(output, fmt)
