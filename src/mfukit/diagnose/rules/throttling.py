"""``gpu_throttling``: a GPU whose clocks the hardware cut (heat, power delivery), from telemetry.

In synchronous training every rank waits for the slowest GPU, so one GPU at clock ratio c slows the
whole job: with compute taking a share k of today's step on the healthy ranks, the slow GPU adds
k(1/c - 1) of the step (without a trace, a step that is all compute loses 1 - c). Evidence: hardware clock-event reasons (HW slowdown,
HW/SW thermal, HW power brake) during busy samples, an SM clock below its peers, DCGM violation
counters far above the fleet's, Megatron's ``MnClk/Rnk`` report.
"""

from __future__ import annotations

from dataclasses import dataclass

from mfukit import units
from mfukit.diagnose.breakdown import job_fraction, median
from mfukit.diagnose.context import Context
from mfukit.diagnose.findings import Evidence, Finding, Impact, severity_for
from mfukit.diagnose.records import GpuSeries, LogEvent, TrainingLog
from mfukit.diagnose.sources.telemetry import HARDWARE_REASONS, drain_step, gpu_label, reason_names

BUSY_UTILIZATION = 0.5
REASON_SHARE = 0.2  # hardware reasons in >= 20 % of busy samples
CLOCK_RATIO = 0.9  # busy SM clock < 90 % of the fleet's median
VIOLATION_S = 10.0
VIOLATION_FACTOR = 10.0


@dataclass(frozen=True)
class Throttled:
    series: GpuSeries
    clock_ratio: float | None
    reason_share: float
    reasons: list[str]
    why: str


def _label(series: GpuSeries) -> str:
    return gpu_label(series.host, series.gpu, series.uuid, series.file)


def _busy(series: GpuSeries) -> list[float | None]:
    return [
        s.sm_clock_hz for s in series.samples if s.utilization is None or s.utilization >= BUSY_UTILIZATION
    ]


def _examine(all_series: list[GpuSeries]) -> list[Throttled]:
    clocks = {id(s): [c for c in _busy(s) if c is not None] for s in all_series}
    medians = {key: median(values) for key, values in clocks.items() if values}
    fleet = median(list(medians.values())) if len(medians) > 1 else None
    violations = [s.samples[-1].thermal_violation_s or 0.0 for s in all_series if s.samples]
    fleet_violation = median(violations) if violations else 0.0
    found = []
    for series in all_series:
        busy = [s for s in series.samples if s.utilization is None or s.utilization >= BUSY_UTILIZATION]
        if not busy:
            continue
        masks = [s.throttle_reasons for s in busy if s.throttle_reasons is not None]
        hardware = [m for m in masks if m & HARDWARE_REASONS]
        share = len(hardware) / len(masks) if masks else 0.0
        names = sorted({name for m in hardware for name in reason_names(m & HARDWARE_REASONS)})
        ratio = None
        own = medians.get(id(series))
        if own is not None and fleet:
            ratio = own / fleet
        elif own is not None and busy[0].max_sm_clock_hz:
            ratio = own / busy[0].max_sm_clock_hz
        violation = series.samples[-1].thermal_violation_s or 0.0
        whys = []
        if share >= REASON_SHARE:
            whys.append(f"{', '.join(names)} active in {share:.0%} of busy samples")
        if ratio is not None and ratio < CLOCK_RATIO and fleet:
            whys.append(f"busy SM clock {units.format_count(own or 0.0)}Hz = {ratio:.0%} of the fleet median")
        if violation >= VIOLATION_S and violation >= VIOLATION_FACTOR * max(fleet_violation, 1e-9):
            whys.append(f"thermal violation {violation:.1f} s vs fleet median {fleet_violation:.1f} s")
        if whys:
            found.append(Throttled(series, ratio, share, names, "; ".join(whys)))
    return found


def _megatron_clock(ctx: Context) -> list[Evidence]:
    evidence = []
    for log in ctx.of(TrainingLog):
        for event in log.events:
            values = dict(event.values) if isinstance(event, LogEvent) else {}
            low, high = values.get("MnClk"), values.get("MxClk")
            if low and high and low < CLOCK_RATIO * high:
                rank = int(values.get("MnClk_rank", -1))
                evidence.append(
                    Evidence(log.file, f"Megatron straggler report: min SM clock {low:.0f} MHz on rank {rank} "
                             f"vs max {high:.0f} MHz", rank=rank, step=event.step)
                )  # fmt: skip
    return evidence


def analyze(ctx: Context) -> list[Finding]:
    throttled = _examine(ctx.of(GpuSeries))
    megatron = _megatron_clock(ctx)
    if not throttled and not megatron:
        return []
    ratios = [t.clock_ratio for t in throttled if t.clock_ratio is not None]
    clock = min(ratios) if ratios else None
    compute_share = job_fraction(ctx.ranks, "compute") if ctx.ranks else None
    basis = "slowest GPU's busy SM clock vs its peers; every rank waits for it each step"
    if compute_share is None:
        compute_share = 1.0
        ctx.assumptions.append(
            "throttling cost assumes the step is all compute (no trace gave the compute share)"
        )
    else:
        basis += f"; compute share {compute_share:.0%} of the step (traces)"
    fraction = None
    model_compute = ctx.model_compute_s()
    step = ctx.step_now_s
    if clock is not None and clock < 1.0 and not ctx.ranks and model_compute and step:
        # the performance model's compute of one step on a healthy GPU, stretched by 1/c on the slow one
        fraction = min(1.0, model_compute * (1.0 / clock - 1.0) / step)
        basis = (
            f"slowest GPU's busy SM clock vs its peers: the performance model's {model_compute:.2f} s of compute "
            f"per step takes 1/{clock:.2f} as long on it, every rank waits; over today's step of {step:.2f} s"
        )
        ctx.assumptions = [a for a in ctx.assumptions if not a.startswith("throttling cost assumes")]
    elif clock is not None and clock < 1.0:
        # compute share k of today's (slowed) step: the slow GPU adds k(1/c - 1) of it;
        # without a trace the step is taken as all compute at nominal speed: 1 - c is lost
        fraction = min(1.0, compute_share * (1.0 / clock - 1.0)) if ctx.ranks else 1.0 - clock
    evidence = [Evidence(t.series.file, t.why, gpu=_label(t.series)) for t in throttled] + megatron
    hosts = sorted({t.series.host for t in throttled if t.series.host})
    impact = (
        ctx.impact(fraction, basis)
        if fraction is not None
        else Impact(None, None, "cost unknown: no SM clock samples to size the slowdown")
    )
    severity = severity_for(fraction) if fraction is not None else "warning"
    if any(t.reasons for t in throttled) and severity == "info":
        severity = "warning"
    return [
        Finding(
            id="gpu_throttling",
            title=f"{len(throttled) or len(megatron)} GPU(s) throttled"
            + (f", slowest at {clock:.0%} clock" if clock else ""),
            severity=severity,
            summary=(
                f"{'; '.join(f'{_label(t.series)}: {t.why}' for t in throttled[:4])}"
                + ("" if throttled else megatron[0].what)
            ),
            evidence=evidence[:20],
            impact=impact,
            fix=[
                drain_step(
                    hosts[:4],
                    "gpu_throttling",
                    [(t.series.uuid, t.series.file) for t in throttled],
                )
                if throttled
                else "drain the node of the rank Megatron's straggler report names: scontrol update nodename=<node> state=drain reason=gpu_throttling",
                "on the node: nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER (which reason is active, temperature vs slowdown temperature, power limit)",
                "restore the default power limit if it was lowered: nvidia-smi -pl <default watts>",
                "check cooling and power: fan/inlet temperature, blocked airflow, PSU health (ipmitool sdr; ipmitool sel list)",
                "before returning it: dcgmi diag -r 3 on the node (thermal and power stress)",
            ],
            prevention=[
                "alert on DCGM_FI_DEV_CLOCK_THROTTLE_REASONS & 0xE8 (HW slowdown, thermal, power brake) and on a rising DCGM_FI_DEV_THERMAL_VIOLATION",
                "run dcgmi diag -r 2 in the Slurm epilog and drain on failure",
            ],
            recoverable_fraction=fraction,
            mfu_after_fix=ctx.mfu_after(fraction),
            details={"clock_ratio": clock, "compute_share": compute_share, "hosts": hosts},
        )
    ]
