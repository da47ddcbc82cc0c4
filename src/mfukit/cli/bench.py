"""``mfukit bench``: live measurements on this machine (matmul, memory bandwidth, collectives, checkpoint, step)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from mfukit import catalog, units
from mfukit.cli.common import emit, format_option, scenario_argument, scenario_options
from mfukit.cli.render import Format, render
from mfukit.core.results import Output

_GPU_HELP = "Catalog accelerator to compare against (`mfukit catalog list accelerators`)."


def _device(choice: str) -> str:
    from mfukit.train.run import cuda_available, require_torch

    require_torch("to run `mfukit bench`")
    return "cuda" if cuda_available(choice) else "cpu"


def _threads(device: str, requested: int | None) -> tuple[int, str | None]:
    """CPU threads used (``--threads`` or torch's default) and the oversubscription warning; none on CUDA."""
    from mfukit.comm.bench import cpu_threads

    if device == "cuda":
        return 0, None
    return cpu_threads(requested)


def _env(device: str) -> dict[str, Any]:
    from mfukit.comm.bench import environment

    return environment(device)


device_option = click.option(
    "--device",
    type=click.Choice(["auto", "cpu", "cuda"]),
    default="auto",
    show_default=True,
    help="Where to measure.",
)


threads_option = click.option(
    "--threads",
    type=click.IntRange(min=1),
    help="torch CPU threads for the measurement [torch's default: the cores; warns when the free ones are fewer].",
)


@click.group()
def bench() -> None:
    """Measure this machine: GEMM FLOP/s, memory bandwidth, collectives (nccl-tests columns), checkpoint I/O, a step's MFU."""


@bench.command()
@device_option
@click.option(
    "--dtype",
    "dtypes",
    multiple=True,
    type=click.Choice(["fp32", "tf32", "bf16", "fp16"]),
    help="[fp32 and bf16 on CPU; bf16, fp16, tf32, fp32 on CUDA]",
)
@click.option("--sizes", help="Comma-separated square GEMM sizes [256..2048 on CPU, 1024..8192 on CUDA].")
@click.option("--gpu", help=_GPU_HELP)
@threads_option
@format_option
def matmul(
    device: str, dtypes: tuple[str, ...], sizes: str | None, gpu: str | None, threads: int | None, fmt: Format
) -> int:
    """Achieved TFLOP/s of square GEMMs per dtype over a size sweep, against the catalog peak."""
    from mfukit.comm.bench import matmul_sweep
    from mfukit.comm.bench_views import matmul_output

    where = _device(device)
    cuda = where == "cuda"
    if not cuda and "tf32" in dtypes:
        from mfukit.errors import InputError

        raise InputError(
            "TF32 is a tensor-core mode of NVIDIA GPUs; on CPU it would time fp32",
            source="command line",
            field="--dtype",
            value="tf32",
            hint="use --dtype fp32 or bf16 on CPU",
        )
    chosen = list(dtypes) or (["bf16", "fp16", "tf32", "fp32"] if cuda else ["fp32", "bf16"])
    used_threads, thread_warning = _threads(where, threads)
    sweep = (
        _int_list(sizes, "--sizes")
        if sizes
        else ([1024, 2048, 4096, 8192] if cuda else [256, 512, 1024, 2048])
    )
    accelerator = catalog.accelerator(gpu, field="--gpu") if gpu else None
    points = matmul_sweep(where, chosen, sweep)
    echo = {"device": where, "dtypes": chosen, "sizes": sweep, "gpu": gpu, "threads": threads}
    output = matmul_output(points, chosen, accelerator, _env(where), cpu_threads=None if cuda else used_threads,
                           thread_warning=thread_warning, echo=echo)  # fmt: skip
    return emit(output, fmt)


@bench.command()
@device_option
@click.option(
    "--sizes",
    help='Comma-separated buffer sizes, e.g. "64MiB,1GiB" [1 MiB..256 MiB on CPU, 64 MiB..2 GiB on CUDA].',
)
@click.option("--gpu", help=_GPU_HELP)
@threads_option
@format_option
def membw(device: str, sizes: str | None, gpu: str | None, threads: int | None, fmt: Format) -> int:
    """Copy bandwidth (read + write bytes per second) over a buffer-size sweep, against the catalog HBM bandwidth."""
    from mfukit.comm.bench import membw_sweep
    from mfukit.comm.bench_views import membw_output

    where = _device(device)
    used_threads, thread_warning = _threads(where, threads)
    if sizes:
        sweep = [int(units.parse_bytes(text.strip(), field="--sizes")) for text in sizes.split(",")]
    else:
        sweep = [2**p for p in (range(26, 32) if where == "cuda" else range(20, 29, 2))]
    accelerator = catalog.accelerator(gpu, field="--gpu") if gpu else None
    points = membw_sweep(where, sweep)
    echo = {"device": where, "sizes": sweep, "gpu": gpu, "threads": threads}
    output = membw_output(points, accelerator, _env(where), cpu_threads=used_threads if where == "cpu" else None,
                          thread_warning=thread_warning, echo=echo)  # fmt: skip
    return emit(output, fmt)


@bench.command()
@click.option("--nproc", type=click.IntRange(min=2), default=2, show_default=True, help="Ranks (processes).")
@click.option("--ops", default="all_reduce,all_gather,reduce_scatter,alltoall,broadcast", show_default=True)
@click.option("--min-bytes", "-b", default="8", show_default=True, help="Smallest size (nccl-tests -b).")
@click.option("--max-bytes", "-e", default="16MiB", show_default=True, help="Largest size (nccl-tests -e).")
@click.option(
    "--factor", "-f", type=click.IntRange(min=2), default=4, show_default=True, help="Size factor (-f)."
)
@click.option("--min-time", default="20ms", show_default=True, help="Timed duration per size and placement.")
@click.option(
    "--out", type=click.Path(file_okay=False, path_type=Path), help="Also write <op>.txt files here."
)
@format_option
def collectives(
    nproc: int,
    ops: str,
    min_bytes: str,
    max_bytes: str,
    factor: int,
    min_time: str,
    out: Path | None,
    fmt: Format,
) -> int:
    """Collectives over a size sweep (gloo on CPU, NCCL on GPU), printed in nccl-tests' columns."""
    from mfukit.comm.bench import COLLECTIVES
    from mfukit.errors import UnknownNameError
    from mfukit.train import bench_collectives as runs
    from mfukit.train.run import require_torch

    require_torch("to run `mfukit bench collectives`")
    chosen = [op.strip() for op in ops.split(",") if op.strip()]
    for op in chosen:
        if op not in COLLECTIVES:
            raise UnknownNameError("collective", op, COLLECTIVES, source="command line", field="--ops")
    sweep = runs.Sweep(_bytes(min_bytes, "--min-bytes"), _bytes(max_bytes, "--max-bytes"), factor)
    seconds = units.parse_duration_s(min_time, field="--min-time")
    try:
        measured = runs.measure(chosen, sweep, seconds, nproc, echo=lambda line: click.echo(line, err=True))
    except runs.Stopped as stopped:  # Ctrl-C or kill: the ranks are ended; exit as the shell does
        click.echo(str(stopped), err=True)
        click.get_current_context().exit(128 + stopped.signal)
    texts = runs.texts(measured, sweep)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        for op, text in texts.items():
            header = f"# {op}_perf (mfukit bench collectives, {measured['backend']})\n"
            (out / f"{op}.txt").write_text(header + text, encoding="utf-8")
    echo = {"nproc": nproc, "ops": chosen, "min_bytes": sweep.min_bytes, "max_bytes": sweep.max_bytes,
            "factor": factor}  # fmt: skip
    output = runs.collectives_output(measured, texts, echo)
    if fmt == "table":  # nccl-tests' own layout is the table: printed verbatim, never re-wrapped
        for op, text in texts.items():
            click.echo(f"# {op}_perf ({measured['backend']}, {measured['ranks']} ranks)")
            click.echo(text, nl=False)
        render(Output(output.schema, {}, assumptions=output.assumptions), "table")
        return 0
    return emit(output, fmt)


@bench.command()
@click.option("--size", default="512MiB", show_default=True, help="State size to save and load.")
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path(),
    show_default=True,
    help="Where to write (the disk under test).",
)
@format_option
def checkpoint(size: str, directory: Path, fmt: Format) -> int:
    """DCP save (sync and async) and load throughput against the disk's write bandwidth measured in the same run."""
    from mfukit.train.run import require_torch

    require_torch("to run `mfukit bench checkpoint`")
    from mfukit.train.bench_checkpoint import run_checkpoint_bench
    from mfukit.train.bench_views import checkpoint_output

    measured = run_checkpoint_bench(directory, int(units.parse_bytes(size, field="--size")))
    output = checkpoint_output(measured, _env("cpu"), {"size": size, "dir": str(directory)})
    return emit(output, fmt)


@bench.command()
@scenario_argument
@scenario_options("model", "seq_len", "micro_batch_size", "precision", "attention_flops", "gpu", "system")
@click.option(
    "--steps", type=click.IntRange(min=1), default=5, show_default=True, help="Timed steps (after 2 warm-up)."
)
@device_option
@click.option("--compile", "compile_model", is_flag=True, help="torch.compile every transformer block.")
@click.option(
    "--peak-flops",
    help='Peak FLOP/s per device ("989 TFLOPS" or a `bench matmul` JSON) [catalog on a catalog GPU, else measured].',
)
@format_option
def step(
    scenario_path: Path | None,
    overrides: dict[str, Any],
    steps: int,
    device: str,
    compile_model: bool,
    peak_flops: str | None,
    fmt: Format,
) -> int:
    """MFU of one device's training step (forward, backward, AdamW) for the scenario's model."""
    from mfukit.train.bench_step import run_step_bench
    from mfukit.train.bench_views import step_output
    from mfukit.train.preflight import check_fits
    from mfukit.train.prepare import TrainRequest, prepare
    from mfukit.train.run import resolve_peak

    where = _device(device)
    request = TrainRequest(
        scenario_path=scenario_path, overrides=overrides, steps=1, nproc_per_node=1, peak_flops=peak_flops
    )
    prepared = prepare(request, cuda=where == "cuda")
    check_fits(
        prepared,
        cuda=where == "cuda",
        nproc_per_node=1,
        source=str(scenario_path) if scenario_path else "command line",
    )
    peak, peak_source = resolve_peak(peak_flops, prepared, where == "cuda")
    config = prepared.config
    measured = run_step_bench(
        config.model,
        seq_len=config.seq_len,
        micro_batch_size=config.micro_batch_size,
        steps=steps,
        device=where,
        precision=config.precision,
        peak_flops_per_s=peak,
        attention=config.attention_flops,
        compile_model=compile_model,
    )
    inputs = {
        "scenario": str(scenario_path) if scenario_path else None,
        "overrides": overrides,
        "steps": steps,
        "device": where,
    }
    output = step_output(measured, prepared, where, peak, peak_source, _env(where), inputs)
    return emit(output, fmt)


def _bytes(text: str, field: str) -> int:
    """A size as nccl-tests takes it: plain bytes ("8") or with a unit ("16MiB")."""
    return int(text) if text.strip().isdigit() else int(units.parse_bytes(text, field=field))


def _int_list(text: str, field: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        from mfukit.errors import InputError

        raise InputError(
            "is not a comma-separated list of integers", source="command line", field=field, value=text
        ) from None
    return values
