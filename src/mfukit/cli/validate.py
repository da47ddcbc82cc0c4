"""``mfukit validate`` and ``mfukit calibrate``: a site's measured runs against the model, and its own constants."""

from __future__ import annotations

from pathlib import Path

import click

from mfukit.cli.common import emit, format_option
from mfukit.cli.render import Format
from mfukit.errors import InputError
from mfukit.perf.validation import (
    calibrate_site,
    check_runs,
    read_site_runs,
)
from mfukit.perf.validation_views import calibrate_output, validate_output

RUNS_ARGUMENT = click.argument(
    "runs_path", metavar="RUNS.csv", type=click.Path(dir_okay=False, path_type=Path)
)


@click.command("validate")
@RUNS_ARGUMENT
@format_option
def validate(runs_path: Path, fmt: Format) -> int:
    """Predict a site's measured runs (the calibration CSV schema) and print the error per source.

    Example: mfukit validate tests/data/perf/megatron_published_runs.csv
    """
    cases, skipped = read_site_runs(runs_path)
    if not cases:
        raise InputError(
            f"{runs_path} has no row the model can predict"
            + (f" ({len(skipped)} skipped: {skipped[0].reason})" if skipped else ""),
            source=str(runs_path),
            hint="each row needs the model shape, the layout (tp, pp, dp), the batch and a measured throughput",
        )
    return emit(validate_output(runs_path, check_runs(cases), skipped), fmt)


@click.command("calibrate")
@RUNS_ARGUMENT
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Directory for the overlay (efficiency.toml, loso_residuals.csv); put it on MFUKIT_CATALOG.",
)
@format_option
def calibrate(runs_path: Path, out_dir: Path, fmt: Format) -> int:
    """Fit the constants a site's measured runs exercise, as an overlay that MFUKIT_CATALOG loads.

    Example: mfukit calibrate our_runs.csv --out site-catalog/ && export MFUKIT_CATALOG=site-catalog
    """
    cases, skipped = read_site_runs(runs_path)
    if not cases:
        raise InputError(
            f"{runs_path} has no row the model can predict",
            source=str(runs_path),
            hint="each row needs the model shape, the layout (tp, pp, dp), the batch and a measured throughput",
        )
    _, before, after = calibrate_site(cases, out_dir)
    return emit(calibrate_output(runs_path, out_dir, len(cases), (before, after), skipped), fmt)
