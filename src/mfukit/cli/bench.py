"""``mfukit bench``: live measurements on this machine (matmul, memory bandwidth, collectives, checkpoint, step)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any, cast

import click

from mfukit import catalog, units
from mfukit.cli.common import emit, format_option, scenario_argument, scenario_options
from mfukit.cli.render import Format, render
from mfukit.core.hardware import Dtype
from mfukit.core.results import Output, Table, shown

SAVE_ABOVE_CEILING = 1.1
"""A save this much faster than the best probe of the same bytes means the disk's speed changed mid-run."""
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
    best = {dtype: max(p.flops_per_s for p in points if p.dtype == dtype) for dtype in chosen}
    peaks = {d: accelerator.peak_flops_per_s.get(cast(Dtype, d)) for d in chosen} if accelerator else {}
    table = Table(
        "GEMM throughput",
        ["dtype", "M=N=K", "time", "achieved", "of peak"],
        csv_columns=["dtype", "size", "time_s", "flops_per_s", "fraction_of_peak"],
    )
    for point in points:
        peak = peaks.get(point.dtype)
        table.add(
            point.dtype,
            point.size,
            shown(point.time_s, units.format_duration),
            shown(point.flops_per_s, units.format_flops_rate),
            shown(point.flops_per_s / peak if peak else None, units.format_percent),
        )
    result = {
        "points": points,
        "peak_flops_per_s": best,
        "catalog_peak_flops_per_s": peaks,
        "fraction_of_catalog_peak": {d: best[d] / p for d, p in peaks.items() if p},
        "environment": _env(where),
    }
    assumptions = [
        "FLOP/s = 2 M N K / time; two warm-up calls; at least 0.2 s timed per point",
        *([f"{used_threads} torch CPU thread(s)"] if not cuda else []),
    ]
    return emit(
        Output(
            "bench.matmul/1",
            result,
            inputs={"device": where, "dtypes": chosen, "sizes": sweep, "gpu": gpu, "threads": threads},
            assumptions=assumptions,
            warnings=[thread_warning] if thread_warning else [],
            tables=[table],
        ),
        fmt,
    )


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

    where = _device(device)
    used_threads, thread_warning = _threads(where, threads)
    if sizes:
        sweep = [int(units.parse_bytes(text.strip(), field="--sizes")) for text in sizes.split(",")]
    else:
        sweep = [2**p for p in (range(26, 32) if where == "cuda" else range(20, 29, 2))]
    accelerator = catalog.accelerator(gpu, field="--gpu") if gpu else None
    limit = accelerator.hbm_bytes_per_s if accelerator else None
    points = membw_sweep(where, sweep)
    table = Table(
        "Copy bandwidth",
        ["buffer", "time", "bandwidth", "of HBM peak"],
        csv_columns=["buffer_bytes", "time_s", "bytes_per_s", "fraction_of_peak"],
    )
    for point in points:
        table.add(
            shown(point.buffer_bytes, units.format_bytes),
            shown(point.time_s, units.format_duration),
            shown(point.bytes_per_s, units.format_rate),
            shown(point.bytes_per_s / limit if limit else None, units.format_percent),
        )
    best = max(p.bytes_per_s for p in points)
    result = {
        "points": points,
        "best_bytes_per_s": best,
        "catalog_bytes_per_s": limit,
        "fraction_of_catalog": best / limit if limit else None,
        "environment": _env(where),
    }
    assumptions = [
        "bytes moved = 2 x buffer per copy (read + write, STREAM Copy convention)",
        *([f"{used_threads} torch CPU thread(s)"] if where == "cpu" else []),
    ]
    return emit(
        Output(
            "bench.membw/1",
            result,
            inputs={"device": where, "sizes": sweep, "gpu": gpu, "threads": threads},
            assumptions=assumptions,
            warnings=[thread_warning] if thread_warning else [],
            tables=[table],
        ),
        fmt,
    )


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
    from mfukit.comm.bench import COLLECTIVES, CollectiveRow, nccl_tests_text
    from mfukit.errors import UnknownNameError
    from mfukit.train import launch
    from mfukit.train.run import require_torch

    require_torch("to run `mfukit bench collectives`")
    chosen = [op.strip() for op in ops.split(",") if op.strip()]
    for op in chosen:
        if op not in COLLECTIVES:
            raise UnknownNameError("collective", op, COLLECTIVES, source="command line", field="--ops")
    low = _bytes(min_bytes, "--min-bytes")
    high = _bytes(max_bytes, "--max-bytes")
    seconds = units.parse_duration_s(min_time, field="--min-time")
    with tempfile.TemporaryDirectory(prefix="mfukit-bench-") as scratch:
        result_path = Path(scratch) / "collectives.json"
        job = launch.Torchrun(
            module="mfukit.comm.bench",
            args=[
                "collectives",
                str(result_path),
                f"--ops={','.join(chosen)}",
                f"--min-bytes={low}",
                f"--max-bytes={high}",
                f"--factor={factor}",
                f"--min-time={seconds}",
            ],
            nproc_per_node=nproc,
        )
        finished = launch.run(
            job, log_path=Path(scratch) / "torchrun.log", echo=lambda line: click.echo(line, err=True)
        )
        if (
            finished.signal is not None
        ):  # Ctrl-C or kill: torchrun and its ranks are ended, exit as the shell does
            click.echo(f"stopped by {finished.signal_name}", err=True)
            click.get_current_context().exit(128 + finished.signal)
        if finished.returncode != 0 or not result_path.exists():
            tail = "\n".join(finished.tail[-10:])
            raise RuntimeError(
                f"the collectives benchmark failed (torchrun exit {finished.returncode}):\n{tail}"
            )
        measured = json.loads(result_path.read_text(encoding="utf-8"))
    texts: dict[str, str] = {}
    for op, rows in measured["ops"].items():
        texts[op] = nccl_tests_text(
            [CollectiveRow(**row) for row in rows],
            devices=measured["devices"],
            min_bytes=low,
            max_bytes=high,
            factor=factor,
        )
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
            (out / f"{op}.txt").write_text(
                f"# {op}_perf (mfukit bench collectives, {measured['backend']})\n" + texts[op],
                encoding="utf-8",
            )
    result = {
        "backend": measured["backend"],
        "ranks": measured["ranks"],
        "ops": measured["ops"],
        "nccl_tests": texts,
        "environment": measured["environment"],
    }
    assumptions = [
        "time per op averaged over ranks (nccl-tests -a 1); busbw factors of nccl-tests doc/PERFORMANCE.md",
        "out-of-place all_reduce/broadcast include a local copy (torch's are in place); in-place alltoall includes the copy back",
    ]
    output = Output(
        "bench.collectives/1",
        result,
        inputs={"nproc": nproc, "ops": chosen, "min_bytes": low, "max_bytes": high, "factor": factor},
        assumptions=assumptions,
    )
    if fmt == "table":  # nccl-tests' own layout is the table: printed verbatim, never re-wrapped
        for op, text in texts.items():
            click.echo(f"# {op}_perf ({measured['backend']}, {measured['ranks']} ranks)")
            click.echo(text, nl=False)
        render(Output(output.schema, {}, assumptions=assumptions), "table")
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
    from mfukit.train.bench_checkpoint import PROBE_THREADS, ROUNDS, WRITER_THREADS, run_checkpoint_bench

    measured = run_checkpoint_bench(directory, int(units.parse_bytes(size, field="--size")))
    table = Table(
        "Checkpoint I/O", ["quantity", "value", "ratio"], csv_columns=["quantity", "value", "ratio"]
    )
    ceiling = measured.disk_write_bytes_per_s
    for name, probed in measured.disk_probes_bytes_per_s.items():
        table.add(
            f"disk write probe ({name}, fsync)", shown(probed, units.format_rate), f"{probed / ceiling:.2f}"
        )
    table.add("disk write bandwidth (best probe)", shown(ceiling, units.format_rate), "1.00 (the limit)")
    table.add(
        "sync save",
        shown(measured.save_bytes_per_s, units.format_rate),
        f"{measured.save_vs_disk:.2f} of disk",
    )
    table.add("sync save time", shown(measured.sync_save_s, units.format_duration), "")
    table.add("harness sync save time", shown(measured.harness_sync_save_s, units.format_duration), "")
    table.add(
        "async blocking time (harness save)",
        shown(measured.async_blocking_s, units.format_duration),
        f"{measured.blocking_vs_sync:.3f} of harness sync save",
    )
    table.add("async until committed", shown(measured.async_total_s, units.format_duration), "")
    table.add(
        "async blocking time (DCP alone, no hashing)",
        shown(measured.bare_blocking_s, units.format_duration),
        f"{measured.bare_blocking_vs_sync:.3f} of sync save",
    )
    table.add("async until durable (no hashing)", shown(measured.bare_total_s, units.format_duration), "")
    table.add("load (page cache dropped)", shown(measured.load_bytes_per_s, units.format_rate), "")
    result = {
        "state_bytes": measured.state_bytes,
        "disk_write_bytes_per_s": ceiling,
        "disk_probes_bytes_per_s": measured.disk_probes_bytes_per_s,
        "save_bytes_per_s": measured.save_bytes_per_s,
        "save_vs_disk": measured.save_vs_disk,
        "sync_save_s": measured.sync_save_s,
        "harness_sync_save_s": measured.harness_sync_save_s,
        "async_blocking_s": measured.async_blocking_s,
        "async_blocking_vs_sync": measured.blocking_vs_sync,
        "async_total_s": measured.async_total_s,
        "async_blocking_without_hashing_s": measured.bare_blocking_s,
        "async_blocking_without_hashing_vs_sync": measured.bare_blocking_vs_sync,
        "async_total_without_hashing_s": measured.bare_total_s,
        "load_s": measured.load_s,
        "load_bytes_per_s": measured.load_bytes_per_s,
        "environment": _env("cpu"),
    }
    assumptions = [
        f"disk write bandwidth: the save's own bytes written as DCP lays them out (tensor after tensor, one "
        f"file per writer thread, each fsynced, then a metadata file), with 1 and {PROBE_THREADS} threads; "
        "the best probe is the limit",
        f"best of {ROUNDS} rounds of the probes and the synchronous saves, interleaved; async blocking: the "
        "best steady-state save (after the first, which allocates the staging buffers), each started once "
        "the previous one is committed",
        "async blocking over harness sync save: the training harness's own saves (its Checkpointer in a "
        "one-rank gloo group; async: the state copied to reused host buffers, the files hashed as they are "
        "written, committed in the background; sync: the same write, hashed, then the commit); without "
        "hashing: dcp.async_save alone through the same stager over dcp.save, DCP's plain writer",
        f"FileSystemWriter with {WRITER_THREADS} threads and files, fsynced, as the training harness saves "
        "([checkpoint] writer_threads)",
    ]
    warnings = []
    if measured.save_vs_disk > SAVE_ABOVE_CEILING:
        warnings.append(
            f"the save ran at {measured.save_vs_disk:.2f} of the best probe of the same bytes: the disk's speed "
            "changed during the run (a shared disk, a write cache filling), so this ratio is no efficiency; rerun "
            "on a quiet disk or with a larger --size"
        )
    return emit(
        Output(
            "bench.checkpoint/1",
            result,
            inputs={"size": size, "dir": str(directory)},
            assumptions=assumptions,
            warnings=warnings,
            tables=[table],
        ),
        fmt,
    )


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
    table = Table(f"Training step of {config.model.name}", ["quantity", "value"])
    table.add("parameters", shown(measured.params, units.format_count))
    table.add("tokens per step", measured.tokens_per_step)
    table.add("step time (median)", shown(measured.step_time_s, units.format_duration))
    table.add("tokens/s", shown(measured.tokens_per_s, units.format_count))
    table.add("achieved", shown(measured.achieved_flops_per_s, units.format_flops_rate))
    table.add("MFU", shown(measured.mfu, units.format_percent))
    memory_what = "peak allocated (CUDA)" if where == "cuda" else "peak RSS of the process"
    table.add(f"memory ({memory_what})", shown(measured.memory_bytes, units.format_bytes))
    result = {
        "model": config.model.name,
        "params": measured.params,
        "tokens_per_step": measured.tokens_per_step,
        "step_times_s": measured.step_times_s,
        "step_time_s": measured.step_time_s,
        "tokens_per_s": measured.tokens_per_s,
        "flops_per_token": measured.flops_per_token,
        "achieved_flops_per_s": measured.achieved_flops_per_s,
        "peak_flops_per_s": peak,
        "mfu": measured.mfu,
        "memory_bytes": measured.memory_bytes,
        "environment": _env(where),
    }
    assumptions = [
        f"MFU peak: {peak_source}",
        f"precision: {config.precision if where == 'cuda' else 'fp32'}; 2 warm-up steps excluded",
        "memory_bytes: torch.cuda.max_memory_allocated on CUDA; on CPU the peak resident set of this process "
        "(getrusage ru_maxrss: interpreter and torch included), as `mfukit train` records it",
    ]
    inputs = {
        "scenario": str(scenario_path) if scenario_path else None,
        "overrides": overrides,
        "steps": steps,
        "device": where,
    }
    return emit(
        Output(
            "bench.step/1",
            result,
            inputs=inputs,
            assumptions=[*prepared.assumptions, *assumptions],
            tables=[table],
        ),
        fmt,
    )


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
