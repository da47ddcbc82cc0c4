"""``mfukit diagnose PATH...``: why a job sits below its expected MFU, from its own artifacts."""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

import click
from rich.markup import escape

from mfukit.catalog import resolve
from mfukit.cli.common import emit, format_option, progress, report_option, scenario_options
from mfukit.cli.render import Format
from mfukit.core.cluster import Cluster
from mfukit.core.model import ModelSpec
from mfukit.core.parallelism import Parallelism
from mfukit.core.results import Output
from mfukit.core.scenario import ClusterSection, FtSection, TrainingSection, load_scenario
from mfukit.core.schema import validate_as
from mfukit.diagnose import report as diagnosis_report
from mfukit.diagnose.engine import diagnose as run_diagnosis
from mfukit.diagnose.sources import sources


def _section(overrides: dict[str, Any], prefix: str) -> dict[str, Any]:
    return {key.split(".", 1)[1]: value for key, value in overrides.items() if key.startswith(prefix + ".")}


class Job(NamedTuple):
    """What the diagnosis knows about the job besides its artifacts (each part may be absent)."""

    model: ModelSpec | None
    training: TrainingSection | None
    parallelism: Parallelism | None
    cluster: Cluster | None
    ft: FtSection | None
    cluster_flags: ClusterSection | None = None
    """the node or GPU given without a size: the job's own world size completes it"""


def job(scenario_path: Path | None, overrides: dict[str, Any]) -> Job:
    """The model, training settings, layout, cluster and failure model from a scenario and/or flags."""
    if scenario_path is not None or "model.preset" in overrides:
        scenario = load_scenario(scenario_path, overrides)
        source = str(scenario_path) if scenario_path else "command line"
        base = scenario_path.parent if scenario_path else None
        model = resolve.model_spec(scenario.model, source=source, base_dir=base)
        section = scenario.cluster
        cluster = None
        if (section.system or section.gpu) and (section.num_gpus or section.num_nodes):
            cluster = resolve.cluster(section, source=source)
        return Job(model, scenario.training, scenario.parallelism, cluster, scenario.ft, section)
    training = validate_as(
        TrainingSection, _section(overrides, "training"), source="command line", prefix="training"
    )
    layout_fields = _section(overrides, "parallelism")
    layout = (
        validate_as(Parallelism, layout_fields, source="command line", prefix="parallelism")
        if layout_fields
        else None
    )
    section = validate_as(
        ClusterSection, _section(overrides, "cluster"), source="command line", prefix="cluster"
    )
    cluster = None
    if (section.system or section.gpu) and (section.num_gpus or section.num_nodes):
        cluster = resolve.cluster(section, source="command line")
    return Job(None, training, layout, cluster, None, section)


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
    "micro_batch_size", "precision", "tp", "pp", "dp", "cp", "vpp", "sequence_parallel", "recompute", "zero",
    "fsdp", "framework", "failure_rate",
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
