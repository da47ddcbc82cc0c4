"""What ``mfukit bench checkpoint`` and ``bench step`` show: the checkpoint I/O against the disk measured in
the same run, and one device's training step, as command outputs (``echo``: the inputs the command echoes).
Imported only when the command runs (the measurements need torch)."""

from __future__ import annotations

from typing import Any

from mfukit import units
from mfukit.core.results import Output, Table, shown
from mfukit.train.bench_checkpoint import PROBE_THREADS, ROUNDS, WRITER_THREADS, CheckpointBench
from mfukit.train.bench_step import StepBench
from mfukit.train.prepare import Prepared

SAVE_ABOVE_CEILING = 1.1
"""A save this much faster than the best probe of the same bytes means the disk's speed changed mid-run."""


def checkpoint_output(measured: CheckpointBench, environment: dict[str, Any], echo: dict[str, Any]) -> Output:
    """The probes, the sync and async saves and the load, with the ratio of each to the disk's limit."""
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
        "environment": environment,
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
    return Output(
        "bench.checkpoint/1",
        result,
        inputs=echo,
        assumptions=assumptions,
        warnings=warnings,
        tables=[table],
    )


def step_output(
    measured: StepBench,
    prepared: Prepared,
    device: str,
    peak: float | None,
    peak_source: str,
    environment: dict[str, Any],
    echo: dict[str, Any],
) -> Output:
    """The step's time, throughput, MFU (against ``peak``, from ``peak_source``) and memory on ``device``."""
    config = prepared.config
    where = device
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
        "environment": environment,
    }
    assumptions = [
        f"MFU peak: {peak_source}",
        f"precision: {config.precision if where == 'cuda' else 'fp32'}; 2 warm-up steps excluded",
        "memory_bytes: torch.cuda.max_memory_allocated on CUDA; on CPU the peak resident set of this process "
        "(getrusage ru_maxrss: interpreter and torch included), as `mfukit train` records it",
    ]
    return Output(
        "bench.step/1",
        result,
        inputs=echo,
        assumptions=[*prepared.assumptions, *assumptions],
        tables=[table],
    )
