"""``launch_overhead``: the GPU idles between kernels because the CPU cannot launch them fast enough.

Measured as GPU idle time in gaps shorter than ``LAUNCH_GAP_S`` (50 us: a kernel launch costs 5-20 us,
HTA docs) plus the share of kernels shorter than one launch. CUDA graphs replay a whole sequence with
one launch and remove most of it.
"""

from __future__ import annotations

from mfukit.diagnose.breakdown import job_fraction, median
from mfukit.diagnose.context import Context
from mfukit.diagnose.findings import WARNING_STEP_FRACTION, Evidence, Finding, severity_for
from mfukit.diagnose.records import RankTrace
from mfukit.diagnose.sources.kineto import LAUNCH_GAP_S, SHORT_KERNEL_S


def analyze(ctx: Context) -> list[Finding]:
    ranks = ctx.ranks
    if not ranks:
        return []
    fraction = job_fraction(ranks, "launch_gap")
    if fraction < WARNING_STEP_FRACTION:
        return []
    traces = {t.file: t for t in ctx.of(RankTrace)}
    short = [t.num_short_kernels / t.num_kernels for t in traces.values() if t.num_kernels]
    kernel = [t.median_kernel_s for t in traces.values() if t.median_kernel_s is not None]
    graphs = sum(t.cuda_graph_launches for t in traces.values())
    evidence = [
        Evidence(
            r.file,
            f"{r.fractions['launch_gap']:.1%} of step idle in gaps < {LAUNCH_GAP_S * 1e6:.0f} us; "
            f"{traces[r.file].num_short_kernels} of {traces[r.file].num_kernels} kernels shorter than {SHORT_KERNEL_S * 1e6:.0f} us",
            rank=r.rank,
        )
        for r in sorted(ranks, key=lambda r: -r.fractions["launch_gap"])[:4]
    ]
    return [
        Finding(
            id="launch_overhead",
            title=f"Kernel launch overhead: {fraction:.0%} of each step in launch-sized gaps",
            severity=severity_for(fraction),
            summary=(
                f"median kernel {median(kernel) * 1e6:.0f} us, {median(short):.0%} of kernels shorter than a launch; "
                f"the GPU idles {fraction:.0%} of the step between back-to-back kernels"
                + (f" ({graphs} CUDA-graph launches already seen)" if graphs else "")
            ),
            evidence=evidence,
            impact=ctx.impact(
                fraction, f"median over ranks of idle time in gaps < {LAUNCH_GAP_S * 1e6:.0f} us / step time"
            ),
            fix=[
                "capture the step in CUDA graphs: torch.compile(model, mode='reduce-overhead'), or Megatron/Transformer Engine --enable-cuda-graph",
                "fewer, larger kernels: a larger micro-batch (--micro-batch-size), fused optimizers (torch.optim.AdamW(fused=True)), fused norms/activations",
                "keep the launch thread free: no .item()/.cpu() syncs in the step, pin the trainer to its NUMA node",
            ],
            prevention=[
                "track kernels per step and median kernel time in the profiler summary when changing batch size or model width"
            ],
            recoverable_fraction=fraction,
            mfu_after_fix=ctx.mfu_after(fraction),
            details={
                "median_kernel_s": median(kernel),
                "short_kernel_share": median(short),
                "cuda_graph_launches": graphs,
            },
        )
    ]
