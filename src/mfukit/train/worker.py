"""The torchrun entry point: ``torchrun ... -m mfukit.train.worker <out>/config.json``.

Shape recommended by TorchElastic (torch/distributed/run.py): on every (re)start, load the newest
complete checkpoint that verifies (its files match their recorded sha256, it loads, and with
--verify-resume its parameters match their saved hash; one that fails is set aside and the next older one
is tried, down to a fresh start), then train with periodic saves. RANK and WORLD_SIZE may change between restarts;
each start is the next attempt in the ledger (:func:`next_attempt`), also across Slurm requeues.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import socket
import sys
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path
from types import FrameType
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.elastic.multiprocessing.errors import ErrorHandler, record
from torch.distributed.fsdp import FSDPModule, fully_shard
from torch.nn.parallel import DistributedDataParallel

from mfukit.core.files import write_text_atomic
from mfukit.ft.interval import recommended_interval_s
from mfukit.ft.ledger import EventLog, read_records
from mfukit.perf.flops import model_flops_per_token
from mfukit.train.checkpoint import Checkpointer, TrainState, params_sha256
from mfukit.train.commit import CheckpointMeta, CheckpointStore, Committed
from mfukit.train.config import TrainConfig
from mfukit.train.data import Sampler, TokenFile, ensure_synthetic, windows
from mfukit.train.faults import FaultInjector, parse_all
from mfukit.train.metrics import MetricsLog, StepMetrics, progress_line, say, step_mfu, straggler
from mfukit.train.model import Transformer, peak_memory_bytes
from mfukit.train.watchdog import Watchdog

LONG_PHASE_FACTOR = 4.0
"""Start-up, loading and synchronous saves may take this many hang timeouts (at least 120 s)."""
GRAD_CLIP_NORM = 1.0
MIN_LR_FRACTION = 0.1


def node_name() -> str:
    """The node a rank runs on: Slurm's name for it (SLURMD_NODENAME, set by srun), else the host name."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


@dataclass(frozen=True)
class Env:
    rank: int
    world_size: int
    local_rank: int
    attempt: int

    @classmethod
    def read(cls) -> Env:
        """The rank's environment; ``attempt`` is set once the group is up (:func:`next_attempt`)."""
        return cls(
            rank=int(os.environ["RANK"]),
            world_size=int(os.environ["WORLD_SIZE"]),
            local_rank=int(os.environ.get("LOCAL_RANK", "0")),
            attempt=0,
        )


def next_attempt(ledger: Path) -> int:
    """One more than the highest attempt the run's ledger holds: every start of the workers is a new attempt,
    whether torchrun restarted them, Slurm requeued the job, or someone submitted it again (torchrun's
    TORCHELASTIC_RESTART_COUNT starts from 0 at each of the last two)."""
    events, _ = read_records(ledger)
    attempts = [e["attempt"] for e in events if isinstance(e.get("attempt"), int) and e["attempt"] >= 0]
    return max(attempts, default=-1) + 1


def learning_rate(config: TrainConfig, step: int) -> float:
    """Linear warm-up, then cosine decay to 10 % of the peak at the last step."""
    if config.warmup_steps and step <= config.warmup_steps:
        return config.lr * step / config.warmup_steps
    span = max(1, config.steps - config.warmup_steps)
    progress = min(1.0, (step - config.warmup_steps) / span)
    return config.lr * (MIN_LR_FRACTION + (1 - MIN_LR_FRACTION) * 0.5 * (1 + math.cos(math.pi * progress)))


def _device(config: TrainConfig, env: Env) -> torch.device:
    use_cuda = config.device == "cuda" or (config.device == "auto" and torch.cuda.is_available())
    if use_cuda:
        torch.cuda.set_device(env.local_rank)
        return torch.device("cuda", env.local_rank)
    return torch.device("cpu")


def _build(config: TrainConfig, device: torch.device) -> nn.Module:
    torch.manual_seed(config.seed)
    with device:
        model = Transformer(config.model, config.seq_len)
    if config.compile:
        for layer in model.layers:
            layer.compile()
    if config.parallel == "fsdp":
        for layer in model.layers:
            fully_shard(layer)
        fully_shard(model)
        return model
    return DistributedDataParallel(model, forward_sync_buffers=False)


class _StopRequest:
    """SIGUSR1 (Slurm's --signal before the time limit or a preemption): checkpoint and stop."""

    def __init__(self) -> None:
        self.requested = False
        signal.signal(signal.SIGUSR1, self._handle)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.requested = True


class Trainer:
    def __init__(self, config: TrainConfig, env: Env) -> None:
        self.stop = _StopRequest()  # first: SIGUSR1's default action would end the process
        self.config = config
        self.env = env
        self.out = config.out
        self.events = EventLog(self.out / "ledger.jsonl", attempt=env.attempt)
        self.metrics = MetricsLog(self.out / "metrics.jsonl")
        self.device = _device(config, env)
        long_phase_s = max(120.0, LONG_PHASE_FACTOR * config.hang_timeout_s)
        self.long_phase_s = long_phase_s
        self.watchdog = Watchdog(config.hang_timeout_s, self._on_hang)
        self.watchdog.start(long_phase_s)
        backend = "cpu:gloo,cuda:nccl" if self.device.type == "cuda" else "gloo"
        dist.init_process_group(backend=backend, timeout=timedelta(seconds=long_phase_s))
        # checkpoint collectives on their own gloo group (never interleaved with training collectives)
        self.checkpoint_group = dist.new_group(backend="gloo", timeout=timedelta(seconds=long_phase_s))
        attempt: list[Any] = [next_attempt(self.events.path) if env.rank == 0 else None]
        dist.broadcast_object_list(attempt, src=0, group=self.checkpoint_group)
        self.env = env = replace(env, attempt=int(attempt[0]))
        self.events.attempt = env.attempt
        self.step = 0
        self.resumed_step = 0
        self.faults = FaultInjector(
            parse_all(config.faults, steps=config.steps, world_size=env.world_size),
            self.out / "faults",
            env.rank,
            self.events.record,
        )
        self.model = _build(config, self.device)
        self.optimizer = self._optimizer()
        tokens = self._tokens()
        self.tokens = tokens.open()
        self.sampler = Sampler(tokens.num_sequences(config.seq_len), config.seed)
        self.train_state = TrainState()
        self.store = CheckpointStore(self.out / "checkpoints", config.checkpoint.keep)
        self.checkpointer = Checkpointer(
            self.store,
            self.model,
            self.optimizer,
            self.train_state,
            group=self.checkpoint_group,
            mode=config.checkpoint.mode,
            writer_threads=config.checkpoint.writer_threads,
            config_hash=config.config_hash(),
            faults=self.faults,
            record=self.events.record,
            verify=config.verify_resume,
        )
        self.flops_per_token = model_flops_per_token(config.model, config.seq_len, config.attention_flops)
        self.interval_s = config.checkpoint.interval_s or math.inf
        self.last_save_t = time.perf_counter()

    def _optimizer(self) -> torch.optim.Optimizer:
        config = self.config
        return torch.optim.AdamW(
            self.model.parameters(), lr=config.lr, betas=(0.9, 0.95), weight_decay=config.weight_decay
        )

    def _fresh_state(self) -> None:
        """New weights, optimizer and step (every rank, together): a failed load may have written part of
        the state in place."""
        self.model = _build(self.config, self.device)
        self.optimizer = self._optimizer()
        self.train_state = TrainState()
        self.checkpointer.model = self.model
        self.checkpointer.optimizer = self.optimizer
        self.checkpointer.train_state = self.train_state

    def _tokens(self) -> TokenFile:
        """The token file; a synthetic one missing on this cluster's storage is made by rank 0 first."""
        config = self.config
        path = Path(config.data_path)
        if config.synthetic_tokens is not None and self.env.rank == 0 and not path.exists():
            ensure_synthetic(
                path.parent,
                vocab_size=config.model.vocab_size,
                num_tokens=config.synthetic_tokens,
                seed=config.seed,
            )
        dist.barrier(group=self.checkpoint_group)
        return TokenFile.at(path, config.model.vocab_size)

    # ------------------------------------------------------------------ events

    def _on_hang(self, silent_s: float) -> None:
        self.events.record("hang", rank=self.env.rank, step=self.step + 1, silent_s=silent_s)

    def _record0(self, kind: str, **fields: Any) -> None:
        if self.env.rank == 0:
            self.events.record(kind, **fields)

    # ------------------------------------------------------------------ resume

    def resume(self) -> None:
        started = time.time()
        resumed_from: CheckpointMeta | None = None
        load_s = 0.0
        while resumed_from is None:
            self.watchdog.beat(self.long_phase_s)  # hashing and loading a large checkpoint take a while
            choice: list[Any] = [self._newest_verified() if self.env.rank == 0 else None]
            dist.broadcast_object_list(choice, src=0, group=self.checkpoint_group)
            if choice[0] is None:
                break  # nothing (left) to resume from: a fresh start
            committed = next(c for c in self.store.scan()[0] if c.path.name == choice[0])
            problem, load_s = self._load(committed)
            if problem is None:
                resumed_from = committed.meta
            else:
                if self.env.rank == 0:
                    self._set_aside(committed, problem)
                self._fresh_state()
        if resumed_from is not None:
            self.step = self.resumed_step = self.train_state.step
            self.sampler.position = self.train_state.sampler_position
        # which node each rank runs on; a collective, so every rank has loaded before torn saves go
        nodes: list[Any] = [None] * self.env.world_size
        dist.all_gather_object(nodes, node_name(), group=self.checkpoint_group)
        if self.env.rank == 0:
            for torn in self.store.discard_torn():
                self.events.record("torn_checkpoint", path=torn.path.name, reason=torn.reason)
        self._record0(
            "attempt_start",
            world_size=self.env.world_size,
            resumed_step=self.step,
            resumed_world_size=resumed_from.world_size if resumed_from else None,
            load_s=load_s,
            init_s=time.time() - started,
            device=str(self.device),
            nodes=nodes,
        )
        self.watchdog.beat(self.long_phase_s)  # the first step may compile or allocate for a while
        if resumed_from is not None and self.env.rank == 0:
            say(
                f"[train] attempt {self.env.attempt}: resumed from step {self.step} "
                f"(saved by {resumed_from.world_size} ranks, now {self.env.world_size}) in {load_s:.2f} s"
            )

    def _newest_verified(self) -> str | None:
        """Rank 0: the newest committed checkpoint whose files match their sha256; the others set aside."""
        for committed in reversed(self.store.scan()[0]):
            self.watchdog.beat(self.long_phase_s)
            problem = self.store.verify(committed)
            if problem is None:
                return committed.path.name
            self._set_aside(committed, problem)
        return None

    def _set_aside(self, committed: Committed, problem: str) -> None:
        target = self.store.quarantine(committed)
        self.events.record("corrupt_checkpoint", step=committed.meta.step, path=target.name, reason=problem)
        say(
            f"[train] checkpoint {committed.path.name}: {problem}; set aside as {target.name}, "
            "resuming from the newest older checkpoint that verifies"
        )

    def _load(self, committed: Committed) -> tuple[str | None, float]:
        """Load ``committed`` on every rank; (why it cannot be used, or None; seconds)."""
        failed = ""
        load_s = 0.0
        try:
            load_s = self.checkpointer.load(committed)
        # any unreadable archive or torn file, on any rank (DCP raises CheckpointException, a BaseException,
        # on every rank when one fails to read): all ranks fall back together
        except (Exception, CheckpointException) as error:
            first_line = (str(error).strip().splitlines() or [""])[0]
            failed = f"cannot be loaded ({type(error).__name__}: {first_line})"
        problems: list[Any] = [None] * self.env.world_size
        dist.all_gather_object(problems, failed, group=self.checkpoint_group)
        problem = next((p for p in problems if p), None)
        if problem is None and self.config.verify_resume:
            problem = self._verify(committed.meta)
        return problem, load_s

    def _verify(self, saved: CheckpointMeta) -> str | None:
        """--verify-resume: the loaded parameters against the hash saved with them (every rank calls it)."""
        loaded = params_sha256(self.model)
        verdict: list[Any] = [None]
        if self.env.rank == 0:
            if saved.params_sha256 is None:  # saved without --verify-resume: nothing to compare with
                self.events.record("resume_verified", step=saved.step, match=None, sha256=loaded)
                checked = "its files matched their sha256" if saved.sha256 else "it has no file hashes either"
                say(
                    f"[train] --verify-resume: step {saved.step} was saved without a parameter hash, so the "
                    f"parameters cannot be compared ({checked}); from now on every save records one"
                )
            else:
                same = loaded == saved.params_sha256
                self.events.record("resume_verified", step=saved.step, match=same, sha256=loaded)
                if not same:
                    verdict = [f"its parameters hash to {loaded}, not the saved {saved.params_sha256}"]
        dist.broadcast_object_list(verdict, src=0, group=self.checkpoint_group)
        return verdict[0] if isinstance(verdict[0], str) else None

    # ------------------------------------------------------------------ one step

    def _micro_batches(self) -> list[torch.Tensor]:
        config, env = self.config, self.env
        indices = self.sampler.take(config.global_batch_size)
        per_rank = config.global_batch_size // env.world_size
        mine = indices[env.rank * per_rank : (env.rank + 1) * per_rank]
        rows = torch.from_numpy(windows(self.tokens, mine, config.seq_len))
        return [
            chunk.to(self.device, non_blocking=True) for chunk in torch.split(rows, config.micro_batch_size)
        ]

    @contextlib.contextmanager
    def _sync_gradients(self, last: bool) -> Iterator[None]:
        if isinstance(self.model, DistributedDataParallel) and not last:
            with self.model.no_sync():
                yield
            return
        if isinstance(self.model, FSDPModule):
            self.model.set_requires_gradient_sync(last)
        yield

    def _autocast(self) -> contextlib.AbstractContextManager[Any]:
        if self.device.type == "cuda" and self.config.precision in ("bf16", "fp16"):
            dtype = torch.bfloat16 if self.config.precision == "bf16" else torch.float16
            return torch.autocast("cuda", dtype=dtype)
        return contextlib.nullcontext()

    def _timed(self) -> float:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter()

    def train_step(self, step: int) -> tuple[float, float, float]:
        """One optimizer step; returns (this rank's mean loss, its forward compute seconds, the seconds it
        waited for its batch)."""
        started = time.perf_counter()
        micro_batches = self._micro_batches()
        data_s = time.perf_counter() - started
        slow = self.faults.slow_factor()
        loss_sum = 0.0
        compute_s = 0.0
        for index, batch in enumerate(micro_batches):
            with self._sync_gradients(index == len(micro_batches) - 1):
                started = self._timed()
                with self._autocast():
                    loss = self.model(batch[:, :-1], batch[:, 1:]) / len(micro_batches)
                forward_s = self._timed() - started
                if slow > 1:
                    time.sleep((slow - 1) * forward_s)
                compute_s += slow * forward_s
                loss.backward()
            loss_sum += float(loss.detach())
        nn.utils.clip_grad_norm_(self.model.parameters(), GRAD_CLIP_NORM)
        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate(self.config, step)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss_sum, compute_s, data_s

    # ------------------------------------------------------------------ the loop

    def _save_due(self, step: int) -> bool:
        """Rank 0's view; every rank follows it (it travels in the per-step gather)."""
        policy = self.config.checkpoint
        if step == self.config.steps or self.faults.forces_save(step):
            return True
        if policy.interval_steps is not None:
            return step % policy.interval_steps == 0
        if (
            policy.daly_mtbf_s is not None
            and not self.checkpointer.committed
            and not self.checkpointer.pending
        ):
            return True  # the first save measures the blocking time that the Daly interval needs
        return time.perf_counter() - self.last_save_t >= self.interval_s

    def run(self) -> None:
        config, env = self.config, self.env
        self.resume()
        world = env.world_size
        loss = math.nan
        stopped = False
        while self.step < config.steps:
            step = self.step + 1
            self.faults.before_step(step)
            started_t = time.time()
            started = time.perf_counter()
            loss_local, compute_s, data_s = self.train_step(step)
            local = torch.tensor(
                [
                    loss_local,
                    compute_s,
                    float(self.stop.requested),
                    float(self._save_due(step)),
                    self.interval_s,
                    data_s,
                ],
                dtype=torch.float64,
            )
            gathered = torch.empty(world * local.numel(), dtype=torch.float64)
            dist.all_gather_single(gathered, local)
            table = gathered.view(world, -1)
            step_time_s = time.perf_counter() - started
            self.step = step
            self.train_state.sampler_position = self.sampler.position
            self.watchdog.beat()
            loss = float(table[:, 0].mean())
            stop = bool(table[:, 2].max() > 0)
            save = bool(table[0, 3] > 0) or stop
            self.interval_s = float(table[0, 4])
            self._log(
                step, started_t, step_time_s, loss, [float(v) for v in table[:, 1]], float(table[:, 5].max())
            )
            self.checkpointer.poll()
            if save:
                self.watchdog.beat(self.long_phase_s)
                self.checkpointer.save(step)
                self.last_save_t = time.perf_counter()
                self.watchdog.beat()
            self._maybe_choose_interval(step_time_s)
            if stop and step < config.steps:
                stopped = True
                break
        self.watchdog.beat(self.long_phase_s)
        self.checkpointer.close()
        digest = params_sha256(self.model)
        if env.rank == 0:
            self._write_result(loss, digest, stopped)
            self.events.record("attempt_end", step=self.step, status="stopped" if stopped else "complete")
        self.watchdog.stop()

    def _maybe_choose_interval(self, step_time_s: float) -> None:
        """Daly mode: once the first save is durable, set the time interval to ``mfukit ft``'s recommended one
        for the measured blocking and persist times (rank 0 decides; the others follow it in the gather)."""
        policy = self.config.checkpoint
        saver = self.checkpointer
        if (
            policy.daly_mtbf_s is None
            or not math.isinf(self.interval_s)
            or self.env.rank != 0
            or saver.last_commit_s is None
        ):
            return
        blocking_s = policy.blocking_s or saver.last_blocking_s
        persist_s = max(0.0, saver.last_commit_s - saver.last_blocking_s)
        self.interval_s = recommended_interval_s(
            max(blocking_s, 1e-6), persist_s, policy.daly_mtbf_s, step_time_s
        )
        self.events.record(
            "interval",
            interval_s=self.interval_s,
            checkpoint_s=blocking_s,
            persist_s=persist_s,
            step_time_s=step_time_s,
            mtbf_s=policy.daly_mtbf_s,
        )

    def _log(
        self,
        step: int,
        started_t: float,
        step_time_s: float,
        loss: float,
        compute: list[float],
        data_s: float,
    ) -> None:
        if self.env.rank != 0:
            return
        config = self.config
        tokens = config.global_batch_size * config.seq_len
        tokens_per_s = tokens / step_time_s
        slowest, ratio = straggler(compute)
        metrics = StepMetrics(
            step=step,
            attempt=self.env.attempt,
            t_start=started_t,
            t_end=started_t + step_time_s,
            step_time_s=step_time_s,
            data_time_s=data_s,
            loss=loss,
            lr=learning_rate(config, step),
            tokens=tokens,
            tokens_per_s=tokens_per_s,
            mfu=step_mfu(self.flops_per_token, tokens_per_s, self.env.world_size, config.peak_flops_per_s),
            memory_bytes=peak_memory_bytes(self.device),
            rank_compute_s=compute,
            slowest_rank=slowest,
            straggler_ratio=ratio,
        )
        self.metrics.write(metrics)
        if step % config.log_every == 0 or step == config.steps or step == self.resumed_step + 1:
            say(progress_line(metrics, config.steps))

    def _write_result(self, loss: float, digest: str | None, stopped: bool) -> None:
        committed, _ = self.store.scan()
        result = {
            "status": "stopped" if stopped else "complete",
            "step": self.step,
            "final_loss": loss,
            "params_sha256": digest,
            "world_size": self.env.world_size,
            "attempt": self.env.attempt,
            "checkpoints": [c.meta.step for c in committed],
        }
        write_text_atomic(self.out / "result.json", json.dumps(result, indent=2))


class WholeErrorFile(ErrorHandler):
    """torch's error handler, but a failed rank's error file is written whole or not at all.

    torchrun reads every failed rank's ``TORCHELASTIC_ERROR_FILE`` and itself dies with a ``JSONDecodeError``
    (the run ends, no restart) when one is empty. torch's handler opens the file and then writes it
    (``error_handler.py``, ``record_exception``), so a rank that torchrun stops in between, such as the peer
    of a hung rank, whose collective failed the moment the watchdog ended that rank, leaves it empty. The
    same JSON goes through a temporary file and a rename instead: torchrun sees the whole report or none.
    """

    def record_exception(self, e: BaseException) -> None:
        path = self._get_error_file_path()
        if not path:  # unset, or empty (torchrun's log dir is /dev/null): no report, as torch's handler
            return
        report = {
            "message": {
                "message": f"{type(e).__name__}: {e}",
                "extraInfo": {"py_callstack": traceback.format_exc(), "timestamp": str(int(time.time()))},
            }
        }
        write_text_atomic(Path(path), json.dumps(report))


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit("usage: torchrun ... -m mfukit.train.worker CONFIG.json")
    config = TrainConfig.read(Path(sys.argv[1]))
    trainer = Trainer(config, Env.read())
    try:
        trainer.run()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    record(main, error_handler=WholeErrorFile())()
    # Everything is on disk and every collective has finished: skip the interpreter teardown, which
    # takes seconds with torch loaded and delays torchrun's view of a finished worker.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
