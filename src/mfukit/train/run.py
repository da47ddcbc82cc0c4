"""``mfukit train``: prepare the run directory, launch torchrun, and account for what happened.

The run directory (``--out``, default ``runs/<scenario name>``) holds ``config.json``, ``data/``,
``checkpoints/``, ``metrics.jsonl``, ``ledger.jsonl``, ``logs/train.log``, ``result.json`` (rank 0, at
the end) and ``goodput.json`` (the launcher's account of the latest launch).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mfukit import units
from mfukit.core.files import write_text_atomic
from mfukit.errors import InputError, MissingComponentError
from mfukit.ft.ledger import EventLog, Goodput, account, read_records
from mfukit.train import launch, ownership
from mfukit.train.commit import CheckpointStore
from mfukit.train.config import TrainConfig
from mfukit.train.data import ensure_synthetic, open_token_file
from mfukit.train.ettr import expected_ettr, predicted_ettr
from mfukit.train.preflight import check_fits
from mfukit.train.prepare import Prepared, TrainRequest, prepare, synthetic_token_count

INSTALL_TORCH = "pip install 'mfukit[torch]'  (or any torch >= 2.13: pip install torch)"


def require_torch(purpose: str) -> None:
    if importlib.util.find_spec("torch") is None:
        raise MissingComponentError("torch", purpose=purpose, install=INSTALL_TORCH)


def cuda_available(device: str) -> bool:
    if device == "cpu":
        return False
    import torch

    available = bool(torch.cuda.is_available())
    if device == "cuda" and not available:
        raise InputError("no CUDA device is visible", source="command line", field="--device", value=device)
    return available


@dataclass
class TrainOutcome:
    result: dict[str, Any]
    goodput: Goodput
    assumptions: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    exit_code: int = 0


def resolve_peak(text: str | None, prepared: Prepared, cuda: bool) -> tuple[float | None, str]:
    """Peak FLOP/s per device for MFU and where it comes from: a value, a `bench matmul` JSON, or measured."""
    dtype = prepared.peak_dtype
    if text is not None and text != "measure":
        path = Path(text)
        if path.suffix == ".json":
            return _peak_from_bench(path, dtype), f"measured by `mfukit bench matmul` ({path}), {dtype}"
        return units.parse_flops_per_s(text, field="--peak-flops"), f"--peak-flops {text}"
    accelerator = prepared.accelerator
    if text is None and cuda and accelerator is not None:
        return accelerator.peak_flops(dtype), f"catalog {accelerator.name} dense {dtype} peak"
    from mfukit.comm.bench import measure_peak_flops

    device = "cuda" if cuda else "cpu"
    if not cuda:
        import torch

        torch.set_num_threads(1)  # torchrun gives each worker OMP_NUM_THREADS=1
    value = measure_peak_flops(device, dtype)
    return (
        value,
        f"best {dtype} GEMM measured on this {device} just before the run ({'1 thread' if not cuda else 'one GPU'})",
    )


def _peak_from_bench(path: Path, dtype: str) -> float:
    try:
        envelope = json.loads(path.read_text(encoding="utf-8"))
        return float(envelope["result"]["peak_flops_per_s"][dtype])
    except FileNotFoundError:
        raise InputError("file not found", source=str(path), field="--peak-flops") from None
    except (OSError, ValueError, KeyError, TypeError):
        raise InputError(
            f"holds no result.peak_flops_per_s.{dtype}",
            source=str(path),
            field="--peak-flops",
            hint=f"write it with `mfukit bench matmul --dtype {dtype} --format json > {path.name}`",
        ) from None


def _check_existing(config: TrainConfig) -> None:
    latest = CheckpointStore(config.out / "checkpoints", config.checkpoint.keep).latest()
    if latest is None:
        return
    if latest.meta.config_hash != config.config_hash():
        raise InputError(
            f"holds checkpoints of another configuration (hash {latest.meta.config_hash}, this run {config.config_hash()})",
            source=str(config.out),
            field="--out",
            hint="use a new --out, or the same model, data, batch and optimizer settings to resume",
        )
    if latest.meta.step >= config.steps:
        raise InputError(
            f"already holds a finished run (checkpoint at step {latest.meta.step} of {config.steps})",
            source=str(config.out),
            field="--out",
            hint="choose another --out, remove this one, or ask for more --steps",
        )


def run_training(
    request: TrainRequest, echo: Callable[[str], None], timeout_s: float | None = None
) -> TrainOutcome:
    require_torch("to run `mfukit train`")
    cuda = cuda_available(request.device)
    prepared = prepare(request, cuda=cuda)
    config = prepared.config
    source = str(request.scenario_path) if request.scenario_path else "command line"
    fits = check_fits(
        prepared, cuda=cuda, nproc_per_node=prepared.world_size // prepared.nnodes_min, source=source
    )
    if fits is not None:
        prepared.assumptions.append(
            f"memory per rank: ~{units.format_bytes(fits.need_bytes)} needed (the memory model of "
            f"`mfukit estimate`) of {units.format_bytes(fits.available_bytes)} ({fits.available_how})"
        )
    else:
        prepared.warnings.append("host memory unknown (no MemAvailable in /proc/meminfo): no memory check")
    with ownership.hold(config.out) as lock:
        return _launch(request, prepared, cuda, lock, echo, timeout_s)


def _launch(
    request: TrainRequest,
    prepared: Prepared,
    cuda: bool,
    lock: ownership.RunDirectoryLock,
    echo: Callable[[str], None],
    timeout_s: float | None,
) -> TrainOutcome:
    """The run, in its own (locked) run directory."""
    config = prepared.config
    out = config.out
    if request.data is not None:
        tokens = open_token_file(request.data, vocab_size=config.model.vocab_size, seq_len=config.seq_len)
    else:
        tokens = ensure_synthetic(
            out / "data",
            vocab_size=config.model.vocab_size,
            num_tokens=synthetic_token_count(config),
            seed=config.seed,
        )
        prepared.assumptions.append(
            f"synthetic tokens ({tokens.num_tokens:,}, noisy permutation chain) in {tokens.path}"
        )
    peak, peak_source = resolve_peak(request.peak_flops, prepared, cuda)
    synthetic = None if request.data is not None else tokens.num_tokens
    config = config.model_copy(
        update={
            "data_path": str(tokens.path),
            "synthetic_tokens": synthetic,
            "peak_flops_per_s": peak,
            "peak_source": peak_source,
        }
    )
    _check_existing(config)
    config.write(out / "config.json")
    events = EventLog(out / "ledger.jsonl", attempt=-1)
    events.record(
        "launch", config_hash=config.config_hash(), world_size=prepared.world_size, steps=config.steps
    )
    job = launch.Torchrun(
        module="mfukit.train.worker",
        args=[str(out / "config.json")],
        nproc_per_node=prepared.world_size // prepared.nnodes_min,
        nnodes=request.nnodes,
        max_restarts=request.max_restarts,
        run_id=f"mfukit-{config.name}-{int(time.time())}",
    )
    with _metrics_served(request.metrics_listen, out, config.name, echo):
        finished = launch.run(
            job,
            log_path=out / "logs" / "train.log",
            echo=echo,
            timeout_s=timeout_s,
            keep_fds=[lock.descriptor],
            on_start=lambda pid: lock.note(f"torchrun PID {pid}"),
        )
    if finished.signal_name is not None:
        events.record("stop", signal=finished.signal_name, by="launcher")
    events.record(
        "run_end",
        returncode=finished.returncode,
        timed_out=finished.timed_out,
        stopped_by=finished.signal_name,
    )
    outcome = summarize(config, prepared, finished)
    write_text_atomic(out / "goodput.json", json.dumps(outcome.result, indent=2))
    return outcome


def _metrics_served(
    listen: str | None, out: Path, name: str, echo: Callable[[str], None]
) -> contextlib.AbstractContextManager[object]:
    """``--metrics-listen``: the run's metrics.jsonl followed and served as ``mfukit watch`` serves it."""
    if listen is None:
        return contextlib.nullcontext()
    from mfukit.watch.config import JobSpec, WatchConfig, parse_listen
    from mfukit.watch.exporter import Watch, in_background

    host, port = parse_listen(listen, "--metrics-listen")
    config = WatchConfig(
        logs=(out / "metrics.jsonl",), host=host, port=port, job_name=name, kind="mfukit-jsonl"
    )
    watch = Watch(config, JobSpec(), warn=lambda text: echo(f"[train] warning: {text}"))

    @contextlib.contextmanager
    def served() -> Iterator[object]:
        with in_background(watch) as bound:
            echo(f"[train] metrics on http://{host}:{bound}/metrics")
            yield bound

    return served()


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def summarize(config: TrainConfig, prepared: Prepared, finished: launch.Finished) -> TrainOutcome:
    """The envelope's result: the run's outcome, its goodput ledger and its measured vs predicted ETTR."""
    out = config.out
    events, torn_events = read_records(out / "ledger.jsonl")
    steps, torn_steps = read_records(out / "metrics.jsonl")
    goodput = account(events, steps)
    warnings = list(prepared.warnings)
    if torn_events or torn_steps:
        warnings.append(
            f"{torn_events + torn_steps} unreadable line(s) in the ledger/metrics (a write cut by a kill)"
        )
    result_path = out / "result.json"
    final = json.loads(result_path.read_text(encoding="utf-8")) if result_path.exists() else {}
    committed, _ = CheckpointStore(out / "checkpoints", config.checkpoint.keep).scan()
    launch_t = max((float(e["t"]) for e in events if e.get("kind") == "launch"), default=0.0)
    set_aside = [e for e in events if e.get("kind") == "corrupt_checkpoint" and float(e["t"]) >= launch_t]
    for event in set_aside:
        warnings.append(
            f"checkpoint step {event['step']} failed verification ({event['reason']}): set aside as "
            f"{out / 'checkpoints' / event['path']}, the run resumed from an older one (inspect, then delete it)"
        )
    session = [s for s in steps if float(s["t_start"]) >= launch_t]
    first_of_attempt: dict[int, int] = {}
    for record in session:
        first_of_attempt[record["attempt"]] = min(
            record["step"], first_of_attempt.get(record["attempt"], record["step"])
        )
    steady = [s for s in session if s["step"] != first_of_attempt[s["attempt"]]]  # warm-up steps left out
    chosen = [e for e in events if e.get("kind") == "interval" and float(e["t"]) >= launch_t]
    assumptions = [*prepared.assumptions, f"MFU peak: {config.peak_source}"]
    ft = prepared.scene.ft
    nodes = prepared.nnodes_min
    predicted = predicted_ettr(goodput, ft, num_gpus=prepared.world_size, num_nodes=nodes)
    expected = expected_ettr(goodput, ft, prepared.failures, assumptions)
    mfus = [float(s["mfu"]) for s in steady if s.get("mfu") is not None]
    ratios = [float(s["straggler_ratio"]) for s in steady]
    slowest = [int(s["slowest_rank"]) for s in steady]
    result: dict[str, Any] = {
        "status": final.get("status", "failed"),
        "steps": int(final.get("step", max((int(s["step"]) for s in session), default=0))),
        "steps_planned": config.steps,
        "restarts": goodput.restarts,
        "recovery_s": [r.recovery_s for r in goodput.recoveries],
        "recoveries": [asdict(r) for r in goodput.recoveries],
        "final_loss": final.get("final_loss"),
        "checkpoints": [c.meta.step for c in committed],
        "checkpoints_committed": goodput.checkpoints_committed,
        "ettr_measured": goodput.ettr,
        "ettr_steady_state": goodput.ettr_steady_state,
        "ettr_predicted": predicted,
        "ettr_expected": expected,
        "goodput": goodput.buckets() | {"wall_s": goodput.wall_s},
        "mfu": _median(mfus),
        "peak_flops_per_s": config.peak_flops_per_s,
        "peak_source": config.peak_source,
        "tokens_per_s": _median([float(s["tokens_per_s"]) for s in steady]),
        "step_time_s": _median([float(s["step_time_s"]) for s in steady]),
        "straggler_ratio_max": max(ratios, default=None),
        "slowest_rank": statistics.mode(slowest) if slowest else None,
        "checkpoint_interval_s": chosen[-1]["interval_s"] if chosen else config.checkpoint.interval_s,
        "checkpoint_interval_steps": config.checkpoint.interval_steps,
        "world_size": prepared.world_size,
        "parallel": config.parallel,
        "device": config.device,
        "params_sha256": final.get("params_sha256"),
        "config_hash": config.config_hash(),
        "out_dir": str(out),
        "metrics_path": str(out / "metrics.jsonl"),
        "ledger_path": str(out / "ledger.jsonl"),
        "log_path": str(out / "logs" / "train.log"),
        "torchrun_returncode": finished.returncode,
    }
    assumptions.append(
        "ettr_predicted: `mfukit ft`'s expected ETTR (Daly's exact model) with this run's own failures (graceful stops left out), "
        "recovery per restart, interval, blocking and persist per save; it models the training phase, so "
        "compare it with ettr_steady_state (ettr_measured also counts start-up and shutdown)"
    )
    assumptions.append(
        f"ettr_expected: the same model and checkpoint policy under the failure model "
        f"({prepared.failures.display_name}) for {prepared.world_size} rank(s) on {nodes} node(s)"
    )
    exit_code = 0
    if finished.signal is not None:
        if result["status"] != "complete":
            result["status"] = "stopped"
        warnings.append(
            f"stopped by {finished.signal_name} after {finished.wall_s:.0f} s: torchrun and its workers were ended "
            f"(SIGTERM, then SIGKILL after {launch.GRACE_S:.0f} s); rerun the same command to resume from the "
            "newest complete checkpoint"
        )
        exit_code = 128 + finished.signal  # the shell's convention: 130 for SIGINT, 143 for SIGTERM
    elif finished.timed_out:
        warnings.append(f"the run exceeded --timeout after {finished.wall_s:.0f} s and was stopped")
        exit_code = 1
    elif finished.returncode != 0 or result["status"] != "complete":
        cause = next((line for line in reversed(finished.tail) if "error" in line.lower()), "see the log")
        warnings.append(
            f"training did not complete (torchrun exit {finished.returncode}, status {result['status']}): {cause.strip()} "
            f"— log: {out / 'logs' / 'train.log'}; rerun the same command to resume from the newest checkpoint"
        )
        exit_code = 1
    return TrainOutcome(
        result=result, goodput=goodput, assumptions=assumptions, warnings=warnings, exit_code=exit_code
    )
