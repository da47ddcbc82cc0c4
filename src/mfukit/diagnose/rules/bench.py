"""``low_gemm_throughput``: an ``mfukit bench matmul`` result below what the performance model assumes.

The performance model times every 16-bit GEMM on a curve fitted on measured training runs of the accelerator
family (``perf.efficiency``; for a part no run calibrates, set from its vendor's measured best GEMM): the
share of the dense peak it assumes for the bench's largest GEMM is the bar. The bench's large square GEMMs are the easiest a
GPU gets (a training step's are smaller and less regular), so a healthy GPU reaches at least that; a bench
below it means this GPU cannot reach the MFU the model predicts: clocks held down (power or thermal
throttling, a lowered power limit), a software stack that misses the tensor cores, or a faulty part.

Cost: the GEMMs of a step take ``1/r`` as long at ``r`` = measured / assumed, so the step loses
``compute share x (1 - r)``, the compute share from the traces. Without traces the cost is not quantified.
A bench measured on a CPU, or with no accelerator given, is not judged (degraded input). Throttling
found in the telemetry explains the shortfall.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from mfukit import units
from mfukit.core.hardware import Dtype
from mfukit.diagnose.breakdown import job_fraction
from mfukit.diagnose.context import Context
from mfukit.diagnose.findings import Evidence, Finding, Impact, severity_for
from mfukit.diagnose.records import BenchMatmul
from mfukit.diagnose.rules.inputs import degraded
from mfukit.perf.efficiency import DEFAULT_FRAMEWORK, efficiency_for, large_gemm_fraction

JUDGED: tuple[Dtype, ...] = ("bf16", "fp16")
"""The dtypes the performance model prices with ``gemm_peak_fraction`` (training runs in them)."""


def analyze(ctx: Context) -> list[Finding]:
    benches = ctx.of(BenchMatmul)
    cluster = ctx.cluster
    if not benches:
        return []
    if cluster is None:
        return [
            _not_judged(benches, "no accelerator given to compare with (--gpu or --system, or a scenario)")
        ]
    gpu = [b for b in benches if b.device.startswith("cuda")]
    findings = []
    if len(gpu) < len(benches):
        findings.append(
            _not_judged(
                [b for b in benches if b not in gpu],
                f"measured on a CPU, not on a {cluster.accelerator.name}",
            )
        )
    accelerator = cluster.accelerator
    framework = ctx.training.framework if ctx.training is not None else DEFAULT_FRAMEWORK
    efficiency = efficiency_for(accelerator, framework)
    slow: list[Slow] = []
    for bench in gpu:
        # what the bench's largest GEMM takes on the performance model's own GEMM curve
        fraction = large_gemm_fraction(accelerator, efficiency, "bf16", bench.largest_size)
        for dtype, rate in bench.best_flops_per_s:
            peak = accelerator.peak_flops_per_s.get(cast(Dtype, dtype))
            if dtype in JUDGED and peak is not None and rate < fraction * peak:
                slow.append(Slow(bench, dtype, rate, peak, fraction))
    if slow:
        findings.append(_slow(ctx, slow))
    return findings


def _not_judged(benches: list[BenchMatmul], why: str) -> Finding:
    return degraded(
        f"{len(benches)} bench matmul result(s) not judged",
        why,
        [Evidence(b.file, f"device {b.device} ({b.device_name})") for b in benches],
        "run `mfukit bench matmul --dtype bf16 --gpu <accelerator>` on the training nodes and give the "
        "cluster (--gpu/--system and --gpus)",
    )


@dataclass(frozen=True)
class Slow:
    """One bench dtype below the model's GEMM curve: its best rate, the dense peak, the share assumed."""

    bench: BenchMatmul
    dtype: str
    rate: float
    peak: float
    assumed_fraction: float

    @property
    def ratio(self) -> float:
        return self.rate / (self.assumed_fraction * self.peak)


def _slow(ctx: Context, slow: list[Slow]) -> Finding:
    accelerator = ctx.cluster.accelerator.name if ctx.cluster else "the accelerator"
    worst = min(slow, key=lambda item: item.ratio)
    ratio, fraction = worst.ratio, worst.assumed_fraction
    share = job_fraction(ctx.ranks, "compute") if ctx.ranks else None
    lost = share * (1.0 - ratio) if share is not None else None
    evidence = [
        Evidence(
            item.bench.file,
            f"{item.dtype}: {units.format_flops_rate(item.rate)} at best ({item.bench.largest_size}^3 GEMMs at "
            f"most), {item.rate / item.peak:.0%} of the {units.format_flops_rate(item.peak)} dense peak; the "
            f"performance model assumes {item.assumed_fraction:.0%} for that GEMM",
            gpu=item.bench.device_name,
        )
        for item in slow
    ]
    return Finding(
        id="low_gemm_throughput",
        title=f"GEMMs run at {ratio:.0%} of what the performance model assumes for {accelerator}",
        severity=severity_for(lost) if lost is not None else ("error" if ratio < 0.5 else "warning"),
        summary=(
            f"mfukit bench matmul reaches {worst.rate / worst.peak:.0%} of the dense {worst.dtype} peak; the "
            f"performance model (and its expected MFU) assumes {fraction:.0%} for a GEMM that size (its GEMM curve, "
            "perf.efficiency, fitted on measured training runs or set from the part's measured best GEMM): every "
            "GEMM of a step takes "
            f"{1 / ratio:.2f}x as long on this GPU"
        ),
        evidence=evidence,
        impact=ctx.impact(lost, "compute share of the traced step x (1 - measured / assumed GEMM rate)")
        if lost is not None
        else Impact(None, basis="not quantified without a profiler trace (the compute share is unknown)"),
        fix=[
            "see why the clocks are held: nvidia-smi -q -d PERFORMANCE,CLOCK (Clocks Event Reasons: SW/HW power "
            "cap, HW slowdown, thermal) and nvidia-smi -q -d POWER (restore the default power limit with "
            "nvidia-smi -pl <default W>)",
            "run the vendor diagnostic on the node: dcgmi diag -r 3; drain it (scontrol update nodename=<node> "
            "state=drain reason=gemm) and RMA the GPU if it fails",
            "re-run `mfukit bench matmul --dtype bf16` inside the training container: a torch/cuBLAS build "
            "without the GPU's tensor-core kernels shows as the same shortfall on every node",
        ],
        prevention=[
            "gate node admission on `mfukit bench matmul --dtype bf16 --gpu <accelerator>`: drain nodes whose "
            "GEMM rate falls below the performance model's assumption"
        ],
        recoverable_fraction=lost,
        mfu_after_fix=ctx.mfu_after(lost),
        explained_by="gpu_throttling" if ctx.find("gpu_throttling") is not None else None,
        details={"measured_to_assumed": ratio, "assumed_fraction_of_peak": fraction},
    )
