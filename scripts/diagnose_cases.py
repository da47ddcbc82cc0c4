"""The "22 % MFU on 128 A100s" case set: generated artifacts with one known, injected cause each.

A Llama-2-7B-shaped model trains on 128 A100-80GB (16 DGX nodes) at 4,096 tokens x 512 sequences per
step, data parallel with Megatron's distributed optimizer and full recompute (a layout that fits: see ``DATA_PARALLEL_LAYOUT``), or
TP 2 x PP 4 for the pipeline case. Healthy, a step takes T0 (44 % MFU: compute 90 % of the step, the last gradient bucket and the
optimizer exposed). Each case injects one cause sized to pull the job down to about 22 % MFU and
writes what the job would leave behind: a Kineto trace per rank (2 profiled steps), the training log,
nvidia-smi CSV telemetry per node, and for some cases an NCCL log.

    python scripts/diagnose_cases.py OUT_DIR [CASE ...]

Cases: dataloader, throttled_gpu, straggler, checkpoint, unbalanced_pipeline, socket_fallback.
``write_rank_trace`` is also used by benchmarks/diagnose.py to build large trace sets.
"""

from __future__ import annotations

import gzip
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from mfukit.catalog.resolve import model_spec
from mfukit.perf.flops import model_flops_per_token

WORLD = 128
STEPS = 2  # profiled steps per rank
GPUS_PER_NODE = 8
SEQ_LEN = 4096
GLOBAL_BATCH = 512
PEAK_FLOPS = 312e12  # A100 dense BF16
HEALTHY_MFU = 0.44
TARGET_MFU = 0.22
MODEL = {
    "name": "llama-2-7b",
    "num_hidden_layers": 32,
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "intermediate_size": 11008,
    "vocab_size": 32000,
    "mlp": "swiglu",
}
CASES = ("dataloader", "throttled_gpu", "straggler", "checkpoint", "unbalanced_pipeline", "socket_fallback")
EXPECTED_TOP = {
    "dataloader": "dataloader_stall",
    "throttled_gpu": "gpu_throttling",
    "straggler": "straggler_rank",
    "checkpoint": "checkpoint_stall",
    "unbalanced_pipeline": "stage_imbalance",
    "socket_fallback": "nccl_socket_fallback",
}
THROTTLED_RANK = 75
STRAGGLER_RANK = 42


def healthy_step_s() -> float:
    """T0: the step time at HEALTHY_MFU (model FLOPs per token, perf.flops, full attention)."""
    model = model_spec(MODEL, source="diagnose_cases")
    tokens = GLOBAL_BATCH * SEQ_LEN
    return tokens * model_flops_per_token(model, SEQ_LEN) / (WORLD * PEAK_FLOPS * HEALTHY_MFU)


@dataclass
class RankPlan:
    """What one rank does in one step (seconds)."""

    dataloader_s: float
    compute_s: float
    comm_s: float
    comm_wait_s: float = 0.0
    host_gap_s: float = 0.0
    comm_slowdown: float = 1.0
    stage_idle: bool = False
    extra: dict[str, float] = field(default_factory=dict)


class TraceWriter:
    """Kineto-schema events for one rank, with launches correlated to kernels."""

    def __init__(self, rank: int, world: int, pid: int = 4242) -> None:
        self.rank = rank
        self.world = world
        self.pid = pid
        self.correlation = 1000
        self.events: list[dict[str, object]] = []

    def cpu(self, name: str, start_us: float, dur_us: float, cat: str = "user_annotation") -> None:
        self.events.append(
            {
                "ph": "X",
                "cat": cat,
                "name": name,
                "pid": self.pid,
                "tid": self.pid,
                "ts": start_us,
                "dur": dur_us,
            }
        )

    def kernel(
        self,
        name: str,
        start_us: float,
        dur_us: float,
        stream: int,
        launch_us: float,
        args: dict[str, object] | None = None,
    ) -> None:
        self.correlation += 1
        self.events.append(
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": self.pid, "tid": self.pid,
             "ts": launch_us, "dur": 4.0, "args": {"correlation": self.correlation}}
        )  # fmt: skip
        kernel_args: dict[str, object] = {
            "device": self.rank % GPUS_PER_NODE,
            "stream": stream,
            "correlation": self.correlation,
        }
        kernel_args.update(args or {})
        self.events.append(
            {"ph": "X", "cat": "kernel", "name": name, "pid": self.rank % GPUS_PER_NODE, "tid": stream,
             "ts": start_us, "dur": dur_us, "args": kernel_args}
        )  # fmt: skip

    def document(self) -> dict[str, object]:
        return {
            "schemaVersion": 1,
            "distributedInfo": {"backend": "nccl", "rank": self.rank, "world_size": self.world},
            "deviceProperties": [{"id": 0, "name": "NVIDIA A100-SXM4-80GB"}],
            "traceEvents": self.events,
            "displayTimeUnit": "ms",
        }


GEMMS = (
    "ampere_bf16_s16816gemm_bf16_256x128_ldg8_f2f_stages_64x3_tn",
    "sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64",
)
ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL128(ncclDevKernelArgsStorage<4096ul>)"
SENDRECV = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"
BUCKETS = 8
PARAMS = 6.74e9
BUCKET_BYTES = 4 * PARAMS / BUCKETS  # fp32 gradients (Megatron's main grads, DDP under AMP) in 8 buckets
# A healthy fabric runs the gradient all-reduce at this share of the bus bandwidth comm's collective model
# gives 128 A100s on 16 DGX nodes with 8x HDR each (healthy nccl-tests runs reach 0.95-1.0 of it).
HEALTHY_BUSBW_SHARE = 0.9


def healthy_busbw() -> float:
    """Bus bandwidth of the gradient all-reduce on the healthy cluster (bytes/s)."""
    from mfukit import catalog
    from mfukit.comm.model import predict
    from mfukit.comm.topology import from_system

    system = catalog.system("dgx-a100-80gb")
    topology, _ = from_system(
        system, catalog.accelerator(system.accelerator), num_nodes=WORLD // GPUS_PER_NODE
    )
    return HEALTHY_BUSBW_SHARE * float(
        predict("all_reduce", BUCKET_BYTES, topology, WORLD).busbw_bytes_per_s[0]
    )


def healthy_comm_s() -> float:
    """The step's gradient all-reduce on the healthy cluster: bus bytes 2(n-1)/n x S per bucket."""
    return BUCKETS * BUCKET_BYTES * 2 * (WORLD - 1) / WORLD / healthy_busbw()


def plan_step(writer: TraceWriter, step: int, t0_us: float, step_us: float, plan: RankPlan) -> None:
    """One ProfilerStep: data loading, forward, backward with bucketed all-reduce, optimizer."""
    us = 1e6
    writer.cpu(f"ProfilerStep#{step}", t0_us, step_us, cat="user_annotation")
    writer.cpu("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", t0_us, plan.dataloader_s * us)
    t = t0_us + plan.dataloader_s * us
    if plan.stage_idle:
        _pipeline_stage(writer, t, t0_us + step_us, plan)
        return
    n_forward, n_backward = 6, 16
    gap = plan.host_gap_s * us / (n_forward + n_backward)
    forward = plan.compute_s / 3 * us / n_forward
    backward = plan.compute_s * 2 / 3 * us / n_backward
    for index in range(n_forward):
        t += gap
        writer.kernel(GEMMS[index % 2], t, forward, 7, t - (gap + 20.0 if gap else 300.0))
        t += forward + 3.0
    comm_free = t
    bucket = plan.comm_s * plan.comm_slowdown * us / BUCKETS
    last_end = t
    for index in range(n_backward):
        t += gap
        writer.kernel(GEMMS[index % 2], t, backward, 7, t - (gap + 20.0 if gap else 300.0))
        t += backward + 3.0
        if index % 2 == 1:
            start = max(t, comm_free)
            duration = bucket + (plan.comm_wait_s * us if index == n_backward - 1 else 0.0)
            writer.kernel(ALLREDUCE, start, duration, 20, start - 15.0,
                          {"Collective name": "allreduce", "In msg nelems": int(BUCKET_BYTES / 4), "Out msg nelems": int(BUCKET_BYTES / 4),
                           "Group size": writer.world, "dtype": "Float"})  # fmt: skip
            comm_free = start + duration
            last_end = comm_free
    t = max(t, last_end)
    optimizer = 0.03 * plan.extra.get("t0_s", 1.0) * us / 4
    for _ in range(4):
        writer.kernel(
            "void multi_tensor_apply_kernel<TensorListMetadata<4>, AdamFunctor<float>>",
            t + 5.0,
            optimizer,
            7,
            t,
        )
        t += optimizer + 5.0


def _pipeline_stage(writer: TraceWriter, start_us: float, end_us: float, plan: RankPlan) -> None:
    """A pipeline stage: its compute spread over the step with waits (p2p receives) between chunks."""
    chunks = 32
    compute = plan.compute_s * 1e6 / chunks
    span = (end_us - start_us) * 0.97
    stride = span / chunks
    for index in range(chunks):
        t = start_us + index * stride
        writer.kernel(
            SENDRECV,
            t,
            40.0,
            24,
            t - 10.0,
            {"Collective name": "send", "In msg nelems": 4096 * 4096, "Group size": 2, "dtype": "BFloat16"},
        )
        writer.kernel(GEMMS[index % 2], t + 50.0, compute, 7, t)


def write_rank_trace(
    path: Path, rank: int, world: int, plans: list[RankPlan], step_s: float, origin_s: float = 1.7e9
) -> None:
    writer = TraceWriter(rank, world)
    t = origin_s * 1e6
    for index, plan in enumerate(plans):
        plan_step(writer, 100 + index, t, step_s * 1e6, plan)
        t += step_s * 1e6
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(json.dumps(writer.document()).encode("utf-8"), compresslevel=1, mtime=0))


def megatron_log(
    path: Path,
    step_s: float,
    iterations: int = 200,
    interval: int = 10,
    save_every: int | None = None,
    save_s: float = 0.0,
) -> None:
    """A Megatron-LM log: one line per logging interval, wall-clock stamped; saves stall the wall clock only."""
    wall = 1_700_000_000.0
    lines = []
    for iteration in range(interval, iterations + 1, interval):
        wall += step_s * interval
        stamp = _stamp(wall)
        lines.append(
            f" [{stamp}] iteration {iteration:>8}/  500000 | consumed samples: {iteration * GLOBAL_BATCH:>12} | "
            f"elapsed time per iteration (ms): {step_s * 1e3:.1f} | learning rate: 3.000000E-04 | "
            f"global batch size: {GLOBAL_BATCH:>5} | lm loss: {2.5 - iteration * 1e-4:.6E} | loss scale: 1.0 | "
            "grad norm: 0.812 | number of skipped iterations:   0 | number of nan iterations:   0 |"
        )
        if save_every and iteration % save_every == 0:
            lines.append(f"saving checkpoint at iteration {iteration:>7} to /lustre/ckpt/llama7b")
            wall += save_s
            lines.append(
                f"  successfully saved checkpoint from iteration {iteration:>7} to /lustre/ckpt/llama7b [ t 1/2, p 1/4 ]"
            )
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _stamp(wall: float) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(wall, tz=datetime.UTC).strftime("%Y-%m-%d %H:%M:%S")


def jsonl_log(path: Path, step_s: float, data_s: float, steps: int = 60) -> None:
    """mfukit's own JSON-lines metrics (the training harness format)."""
    tokens = GLOBAL_BATCH * SEQ_LEN
    with path.open("w", encoding="utf-8") as stream:
        for step in range(1, steps + 1):
            record = {"step": step, "loss": 2.5 - step * 1e-3, "step_time_s": step_s, "data_time_s": data_s,
                      "tokens_per_s": tokens / step_s, "memory": {"max_allocated_bytes": 61e9}}  # fmt: skip
            stream.write(json.dumps(record) + "\n")


def telemetry(directory: Path, samples: int = 20, throttled_rank: int | None = None) -> None:
    """nvidia-smi --query-gpu CSV, one file per node, 1 s apart."""
    header = ("timestamp, index, name, pci.bus_id, utilization.gpu [%], clocks.sm [MHz], clocks.max.sm [MHz], "
              "power.draw [W], power.limit [W], temperature.gpu, clocks_event_reasons.active")  # fmt: skip
    directory.mkdir(parents=True, exist_ok=True)
    for node in range(WORLD // GPUS_PER_NODE):
        rows = [header]
        for second in range(samples):
            for gpu in range(GPUS_PER_NODE):
                rank = node * GPUS_PER_NODE + gpu
                hot = rank == throttled_rank
                clock, reasons, temp, power = (
                    (705, "0x0000000000000048", 91, 215.0) if hot else (1410, "0x0000000000000000", 62, 355.0)
                )
                rows.append(
                    f"2026/11/29 10:00:{second:02d}.000, {gpu}, NVIDIA A100-SXM4-80GB, 00000000:{0x07 + gpu * 0x10:02X}:00.0, "
                    f"{97 if not hot else 99} %, {clock} MHz, 1410 MHz, {power:.2f} W, 400.00 W, {temp}, {reasons}"
                )
        (directory / f"node{node:02d}.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")


# The data-parallel cases' layout: Megatron's distributed optimizer (ZeRO-1: fp32 gradients reduce-scattered,
# bf16 weights all-gathered, about the bus bytes of the traced fp32 AllReduce buckets) with full activation
# recompute, so that 4 sequences of 4,096 tokens fit: `mfukit estimate` gives 51.9 GiB per GPU (plain DDP
# without recompute would need 194 GiB of the 80).
DATA_PARALLEL_LAYOUT = 'zero = 1\nrecompute = "full"\n'


def scenario(path: Path, *, tp: int = 1, pp: int = 1) -> None:
    dp = WORLD // (tp * pp)
    # the data-parallel cases trace one forward and backward per step (a micro-batch of all 4 sequences
    # a GPU gets); the pipeline case runs 32 micro-batches of one sequence through its 4 stages (TP 2 x
    # PP 4 fits without sharding or recompute)
    micro = GLOBAL_BATCH // dp if pp == 1 else 1
    fields = "\n".join(f"{k} = {json.dumps(v)}" for k, v in MODEL.items())
    path.write_text(
        f'[model]\n{fields}\n\n[training]\nseq_len = {SEQ_LEN}\nglobal_batch_size = {GLOBAL_BATCH}\nmicro_batch_size = {micro}\nprecision = "bf16"\n\n'
        f'[cluster]\nsystem = "dgx-a100-80gb"\nnum_gpus = {WORLD}\nfailure_rate_per_1000_node_days = 6.5\n\n'
        f"[parallelism]\ntp = {tp}\npp = {pp}\ndp = {dp}\n" + (DATA_PARALLEL_LAYOUT if pp == 1 else ""),
        encoding="utf-8",
    )


def _plans(case: str, rank: int, t0: float) -> tuple[list[RankPlan], float]:
    """Each rank's three profiled steps and the step time of the case."""
    slow = HEALTHY_MFU / TARGET_MFU  # the factor by which the injected cause stretches the step
    compute, comm = 0.90 * t0, healthy_comm_s()
    exposed = 0.01 * t0
    base = {"t0_s": t0}
    if case == "dataloader":
        extra = (slow - 1.0) * t0
        return [RankPlan(0.01 * t0 + extra, compute, comm, extra=base) for _ in range(STEPS)], t0 + extra
    if case == "throttled_gpu":
        extra = compute  # the throttled GPU runs at half clock: its compute takes twice as long
        if rank == THROTTLED_RANK:
            return [RankPlan(0.01 * t0, 2 * compute, comm, extra=base) for _ in range(STEPS)], t0 + extra
        return [
            RankPlan(0.01 * t0, compute, comm, comm_wait_s=extra, extra=base) for _ in range(STEPS)
        ], t0 + extra
    if case == "straggler":
        extra = (slow - 1.0) * t0
        if rank == STRAGGLER_RANK:
            return [
                RankPlan(0.01 * t0, compute, comm, host_gap_s=extra, extra=base) for _ in range(STEPS)
            ], t0 + extra
        return [
            RankPlan(0.01 * t0, compute, comm, comm_wait_s=extra, extra=base) for _ in range(STEPS)
        ], t0 + extra
    if case == "socket_fallback":
        # NCCL over TCP sockets: every bucket slows by the same factor, sized (like every case) to pull the job
        # to TARGET_MFU; it puts the all-reduce at a few GB/s of busbw, what sockets over one host interface
        # give (the aws-do-eks TCP fixture in tests/data/comm: 2.0 GB/s).
        slowdown = _slowdown_to(t0 * slow, RankPlan(0.01 * t0, compute, comm, extra=base))
        plans = [RankPlan(0.01 * t0, compute, comm, comm_slowdown=slowdown, extra=base) for _ in range(STEPS)]
        return plans, _duration(plans[0]) + exposed
    if case == "unbalanced_pipeline":
        tp, pp = 2, 4
        stage = rank // (WORLD // pp)
        del tp
        # the last stage does 3x the others' work; balanced, each would do 1.5 C and the job runs at 44 %
        unit = t0 * 32 / 35 / 1.5  # C such that T_balanced = (m+p-1)/m x 1.5 C = t0
        stage_compute = 3 * unit if stage == pp - 1 else unit
        step = (3 * unit / 32) * 31 + (3 * unit + 3 * unit) / 32
        return [
            RankPlan(0.005 * t0, stage_compute, 0.0, stage_idle=True, extra=base) for _ in range(STEPS)
        ], step
    return [RankPlan(0.01 * t0, compute, comm, extra=base) for _ in range(STEPS)], t0


def _slowdown_to(step_s: float, plan: RankPlan) -> float:
    """The communication slowdown at which one step of ``plan`` lasts ``step_s`` (bisection)."""
    low, high = 1.0, 1e4
    for _ in range(60):
        middle = (low * high) ** 0.5
        plan.comm_slowdown = middle
        low, high = (middle, high) if _duration(plan) < step_s else (low, middle)
    return low


def _duration(plan: RankPlan) -> float:
    """How long one step of ``plan`` runs (a dry run of plan_step)."""
    writer = TraceWriter(0, WORLD)
    plan_step(writer, 0, 0.0, 1e12, plan)
    return max(float(e["ts"]) + float(e.get("dur", 0.0)) for e in writer.events if e["cat"] == "kernel") / 1e6  # type: ignore[arg-type]


def write_case(out: Path, case: str) -> Path:
    """Write one case under ``out/case``; returns the case directory (the scenario file sits beside it)."""
    if case not in CASES:
        raise ValueError(f"unknown case {case!r}; choose from {CASES}")
    t0 = healthy_step_s()
    directory = out / case
    (directory / "traces").mkdir(parents=True, exist_ok=True)
    step_s = t0
    for rank in range(WORLD):
        plans, step_s = _plans(case, rank, t0)
        write_rank_trace(
            directory / "traces" / f"rank{rank:03d}.pt.trace.json.gz", rank, WORLD, plans, step_s
        )
    telemetry(directory / "telemetry", throttled_rank=THROTTLED_RANK if case == "throttled_gpu" else None)
    if case == "dataloader":
        jsonl_log(directory / "metrics.jsonl", step_s, step_s - t0)
    elif case == "checkpoint":
        save_s = 50 * t0 * (HEALTHY_MFU / TARGET_MFU - 1.0)
        megatron_log(directory / "train.log", t0, save_every=50, save_s=save_s)
    else:
        megatron_log(directory / "train.log", step_s)
    if case == "socket_fallback":
        (directory / "nccl_debug.log").write_text(
            "gpu-node01:4242:4242 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.11<0>\n"
            "gpu-node01:4242:4242 [0] NCCL INFO NET/IB : No device found.\n"
            "gpu-node01:4242:4242 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.11<0>\n"
            "gpu-node01:4242:4242 [0] NCCL INFO Using network Socket\n"
            "gpu-node01:4242:4242 [0] NCCL INFO Channel 00/0 : 7[7] -> 8[0] [send] via NET/Socket/0\n",
            encoding="utf-8",
        )
    scenario(
        out / f"{case}.toml",
        tp=2 if case == "unbalanced_pipeline" else 1,
        pp=4 if case == "unbalanced_pipeline" else 1,
    )
    return directory


def iter_cases(out: Path, cases: tuple[str, ...] = CASES) -> Iterator[tuple[str, Path]]:
    for case in cases:
        yield case, write_case(out, case)


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    out = Path(argv[0])
    for case, directory in iter_cases(out, tuple(argv[1:]) or CASES):
        print(
            f"{case}: {directory} (scenario {out / (case + '.toml')}, expected top finding {EXPECTED_TOP[case]})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
