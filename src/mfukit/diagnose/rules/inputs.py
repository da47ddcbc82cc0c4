"""``degraded_input``: what could not be judged, and which artifact would decide it. Never a silent zero."""

from __future__ import annotations

from mfukit.diagnose.context import Context
from mfukit.diagnose.findings import Evidence, Finding, Impact
from mfukit.diagnose.records import DamagedInput, PipelineTimeline, RankTrace, TrainingLog, TrainLedger

# Clocks whose origins differ by more than this are different clocks (relative vs epoch, or hosts
# without NTP): cross-rank start times are not compared.
MIXED_CLOCK_S = 3600.0


def degraded(title: str, summary: str, evidence: list[Evidence], decide: str) -> Finding:
    return Finding(
        id="degraded_input",
        title=title,
        severity="warning",
        summary=summary,
        evidence=evidence,
        impact=Impact(step_fraction=None, basis="not a cost: a limit on what this diagnosis could judge"),
        fix=[decide],
        prevention=[
            "keep profiler traces of every rank for a few steps (torch.profiler schedule wait=5, warmup=1, active=3)"
        ],
    )


def analyze(ctx: Context) -> list[Finding]:
    findings: list[Finding] = []
    damaged: list[Evidence] = []
    for record in ctx.records:
        if isinstance(record, RankTrace | TrainingLog | PipelineTimeline | TrainLedger):
            rank = record.rank if isinstance(record, RankTrace) else None
            damaged.extend(Evidence(record.file, problem, rank=rank) for problem in record.problems)
        elif isinstance(record, DamagedInput):
            damaged.append(Evidence(record.file, record.problem))
    if damaged:
        findings.append(
            degraded(
                "Some inputs were partial or damaged",
                f"{len(damaged)} problem(s) in the inputs; what they hold was analysed, what they lack was not",
                damaged,
                "re-collect the damaged artifacts (complete trace files, full logs); findings below use what was readable",
            )
        )
    traces = ctx.of(RankTrace)
    if ctx.unrecognised:
        findings.append(
            degraded(
                "Some files were skipped",
                f"{len(ctx.unrecognised)} file(s) matched no artifact kind or could not be parsed",
                [Evidence(path, f"skipped: {why}") for path, why in ctx.unrecognised],
                "check `mfukit diagnose --help` for the kinds read; rename or convert the file",
            )
        )
    worlds = {t.world_size for t in traces if t.world_size}
    ranks = {t.rank for t in traces if t.rank is not None}
    if worlds and traces:
        world = max(worlds)
        missing = sorted(set(range(world)) - ranks)
        if missing and len(ranks) > 1:
            shown = ", ".join(str(r) for r in missing[:12]) + (" ..." if len(missing) > 12 else "")
            findings.append(
                degraded(
                    f"{len(missing)} of {world} ranks have no trace",
                    f"ranks {shown} were not traced: a straggler among them cannot be named from traces",
                    [Evidence(traces[0].file, f"world size {world}, {len(ranks)} ranks traced")],
                    "trace every rank (or at least one per node), or add telemetry of every GPU",
                )
            )
    claimed = [t.rank for t in traces if t.rank is not None]
    duplicated = sorted({r for r in claimed if claimed.count(r) > 1})
    if duplicated or len(worlds) > 1:
        findings.append(
            degraded(
                "The traces are not one job's ranks",
                f"rank(s) {', '.join(map(str, duplicated[:8]))} appear in several traces"
                if duplicated
                else f"world sizes differ ({sorted(worlds)})",
                [
                    Evidence(t.file, f"rank {t.rank}, world size {t.world_size}", rank=t.rank)
                    for t in traces[:8]
                ],
                "pass one job's traces (one per rank); cross-rank comparisons (stragglers) were skipped",
            )
        )
    origins = [t.clock_origin_s for t in traces if t.steps]
    if len(origins) > 1 and max(origins) - min(origins) > MIXED_CLOCK_S:
        findings.append(
            degraded(
                "Rank traces use different clocks",
                "clock origins differ by more than an hour: cross-rank start times are not compared; "
                "stragglers are judged from per-rank durations, which need no common clock",
                [Evidence(t.file, f"clock origin {t.clock_origin_s:.0f} s", rank=t.rank) for t in traces[:8]],
                "run chrony/NTP on every node, or record all ranks in one profiling window",
            )
        )
    for trace in traces:
        if (
            trace.world_size
            and trace.world_size > 1
            and trace.num_comm_kernels == 0
            and trace.num_comm_annotations > 0
        ):
            findings.append(
                degraded(
                    "Collectives were issued but no communication kernel was recognised",
                    f"{trace.num_comm_annotations} collective calls on the CPU, no NCCL/RCCL kernel on the GPU: "
                    "their kernels have names this version does not know, so communication is counted as compute",
                    [
                        Evidence(
                            trace.file, "collective annotations without matching kernels", rank=trace.rank
                        )
                    ],
                    "report the kernel names (top kernels in the JSON output) so they can be classified",
                )
            )
    if ctx.expected.layout_problem is not None:
        findings.append(
            degraded(
                "The job's layout does not fit in memory",
                ctx.expected.layout_problem,
                [],
                "describe the layout that ran in the scenario (parallelism zero/fsdp/recompute, training micro_batch_size) "
                "(`mfukit estimate` on it must say it fits)",
            )
        )
    if ctx.mfu.measured is None:
        findings.append(
            degraded(
                "MFU not measured",
                ctx.mfu.method,
                [],
                "pass the training log and --model, --gpu, --gpus (or a scenario file with [model] and [cluster])",
            )
        )
    if not ctx.ranks:
        findings.append(
            degraded(
                "No profiler trace: the time breakdown is unknown"
                if not traces
                else "No profiler trace holds a usable step: the time breakdown is unknown",
                "compute, communication, idle and data-loader shares need a PyTorch profiler trace"
                + (f" ({len(traces)} trace(s) given, none with a step that can be judged)" if traces else ""),
                [],
                "record a few steps with torch.profiler (activities=[CPU, CUDA]) on every rank and pass the traces; "
                "or, where Python cannot be changed, Nsight Systems on a few ranks: nsys profile -t cuda,nvtx,osrt "
                "--capture-range=cudaProfilerApi -o rank%q{SLURM_PROCID} <launch command>, then nsys export --type "
                "sqlite; with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET in the job's environment and nccl-tests "
                "(all_reduce_perf -b 8 -e 8G -f 2 -g 1) across its nodes",
            )
        )
    return findings
