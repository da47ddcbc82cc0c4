"""Search parallel layouts for the fastest step: tp, pp (even or Llama-3-style uneven), vpp, dp, cp, ep,
micro-batch, recompute, sharding (DDP, distributed optimizer, ZeRO-1/2/3, FSDP full/hybrid) and sequence
parallelism, for one GPU count or across counts.

The whole space of one GPU count is one numpy grid: layouts that break a rule are pruned and counted by
reason (divisibility of heads, layers, sequence or experts; the global batch; a sharding the framework
cannot combine with a pipeline; memory), the rest are evaluated at once by the memory model
(:mod:`mfukit.perf.memory_grid`) and the step-time model (:mod:`mfukit.perf.step_time`) and ranked by MFU
or by time to train.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np
import numpy.typing as npt

from mfukit import units
from mfukit.core.hardware import Accelerator, System
from mfukit.core.parallelism import Parallelism, Recompute, default_stage_split, divisors
from mfukit.core.results import ProgressCallback
from mfukit.perf.efficiency import efficiency_for, require_interleaving
from mfukit.perf.layouts import (
    RECOMPUTES,
    SHARDINGS,
    Bools,
    Floats,
    Ints,
    LayoutGrid,
    Workload,
    batch_change_note,
    concatenated,
    rounded_batch,
    with_changes,
)
from mfukit.perf.memory_grid import STAGE_KINDS, GridMemory, grid_memory, stage_layer_kinds
from mfukit.perf.model_states import Sharding
from mfukit.perf.step_time import Machine, StepEstimate, evaluate, machine_for, prepare
from mfukit.perf.uncertainty import Interval, cached_interval, regime_named, sharding_class_of

Objective = Literal["mfu", "time"]
REASONS = ("divisibility", "batch", "schedule", "compatibility", "memory", "headroom")
MAX_TP = 8  # TP stays within 8 GPUs even in larger NVLink domains, as published runs do
MAX_VPP = 8
MAX_MICRO_BATCH = 16
MIN_CP_CHUNK = 2048  # context parallelism splits sequences no finer than this many tokens per rank
DEFAULT_SHARDINGS: tuple[Sharding, ...] = SHARDINGS
# DeepSpeed ZeRO-2/3 do not run with its pipeline engine (deepspeed/runtime/pipe/engine.py asserts stage < 2).
_NO_PIPELINE = np.asarray([name in {"zero-2", "zero-3"} for name in SHARDINGS])


@dataclass(frozen=True)
class SearchSpace:
    """The options per knob (None: every value the model and cluster allow)."""

    tp: tuple[int, ...] | None = None
    pp: tuple[int, ...] | None = None
    vpp: tuple[int, ...] | None = None
    cp: tuple[int, ...] | None = None
    ep: tuple[int, ...] | None = None
    dp: tuple[int, ...] | None = None
    micro_batch_size: tuple[int, ...] | None = None
    recompute: tuple[Recompute, ...] = RECOMPUTES
    # full recompute of the first N layers of each chunk (parallelism.recompute_layers) when given; None: every
    # layer, and each full-recompute layout tried again with the fewest layers recomputed that fit
    recompute_layers: int | None = None
    sharding: tuple[Sharding, ...] = DEFAULT_SHARDINGS
    sequence_parallel: tuple[bool, ...] = (True, False)
    uneven_pipeline: bool = True


@dataclass(frozen=True)
class Plan:
    """One layout on one GPU count, with its estimate."""

    num_gpus: int
    layout: Parallelism
    micro_batch_size: int
    num_microbatches: int
    step_time_s: float
    mfu: float
    hfu: float
    model_flops_per_s_per_gpu: float
    tokens_per_s: float
    memory_bytes: float
    breakdown_s: dict[str, float]
    crosses_network: dict[str, bool]
    time_to_train_s: float | None
    interval: Interval | None = None  # the 80 % interval of the MFU (and of tokens/s), as factors

    @property
    def mfu_interval(self) -> tuple[float, float] | None:
        return None if self.interval is None else self.interval.around_mfu(self.mfu)

    @property
    def beyond_measured(self) -> bool:
        """Whether the plan is above every measured MFU of its GPU family, stack and precision, or in a
        regime no measured run shares (the mark a careful engineer reads before trusting it)."""
        if self.interval is None:
            return False
        highest = self.interval.highest_measured_mfu
        return self.interval.extrapolated or highest is None or self.mfu > highest

    @property
    def conservative_mfu(self) -> float:
        """The MFU the planner ranks on: the interval's lower bound (the estimate when there is none)."""
        return self.mfu * (self.interval.low_factor if self.interval else 1.0)

    @property
    def tokens_per_s_per_gpu(self) -> float:
        return self.tokens_per_s / self.num_gpus

    @property
    def global_batch_sequences(self) -> int:
        """The sequences per step this layout runs (the workload's batch, rounded where it may be)."""
        return self.layout.dp * self.micro_batch_size * self.num_microbatches

    def batch_note(self, workload: Workload) -> str | None:
        """What rounding did to the workload's batch for this plan (None: it runs the batch as given)."""
        return batch_change_note(
            workload.global_batch_sequences,
            self.global_batch_sequences,
            dp=self.layout.dp,
            micro_batch_size=self.micro_batch_size,
            rounding_frac=workload.batch_rounding_frac,
        )


@dataclass
class SearchResult:
    plans: list[Plan]  # best first
    best_per_count: dict[int, Plan | None]
    configs_evaluated: int
    configs_considered: int
    rejected: dict[str, int]
    search_s: float
    machines: dict[int, Machine] = field(default_factory=dict)

    def nothing_fits(self, workload: Workload, num_gpus: int) -> str:
        """Why no layout came out: the layouts considered, the (disjoint) reasons, and the batch's part."""
        reasons = ", ".join(f"{reason} {count:,}" for reason, count in self.rejected.items() if count)
        text = (
            f"no layout fits on {num_gpus:,} GPUs: all {self.configs_considered:,} layouts considered were "
            f"rejected ({reasons or 'none could be built'})"
        )
        if self.rejected["batch"]:
            batch = workload.global_batch_sequences
            rounding = (
                f" even rounded by up to {units.format_percent(workload.batch_rounding_frac, 0)}"
                if workload.batch_rounding_frac
                else ""
            )
            text += (
                f"; the global batch of {batch:,} sequences is no whole number of micro-batches per DP rank"
                f"{rounding} for the DP degrees {num_gpus:,} GPUs allow: give --global-batch-size (sequences) "
                f"as a multiple of the DP you want"
            )
        return text


def _options(given: tuple[int, ...] | None, default: Iterable[int]) -> list[int]:
    return sorted(set(given)) if given is not None else sorted(set(default))


def _stage_splits(
    num_layers: int, pps: list[int], vpps: list[int], uneven: bool
) -> list[tuple[int, int, int, int]]:
    """(pp, vpp, first-stage layers, last-stage layers) of every pipeline the model allows."""
    splits = []
    for pp in pps:
        for vpp in vpps:
            if pp == 1 and vpp > 1:
                continue
            if num_layers % (pp * vpp) == 0:
                per = num_layers // pp
                splits.append((pp, vpp, per, per))
                continue
            # the split Megatron-Core / NeMo choose themselves (Llama 3 405B: 126 layers on 16 stages, one
            # layer fewer on the first and the last; core.parallelism.default_stage_split)
            split = default_stage_split(num_layers, pp, vpp) if uneven else None
            if split is not None:
                splits.append((pp, vpp, *split))
    return splits


def interleaving_breaks(pp: npt.ArrayLike, vpp: npt.ArrayLike, num_microbatches: npt.ArrayLike) -> Bools:
    """Where an interleaved pipeline (vpp > 1) cannot be scheduled: Megatron's interleaved 1F1B runs the
    micro-batches in groups of pp through each virtual stage, so their number must be a multiple of pp (and so
    at least pp); megatron/core/pipeline_parallel/schedules.py raises "number of microbatches is not
    divisible by pipeline-model-parallel-size when using interleaved schedule"."""
    stages, chunks, count = (np.asarray(a, dtype=np.int64) for a in (pp, vpp, num_microbatches))
    return np.asarray(
        (chunks > 1) & ((count < stages) | (count % np.maximum(stages, 1) != 0)), dtype=np.bool_
    )


def micro_batch_options(workload: Workload) -> list[int]:
    """Micro-batch sizes worth trying: those dividing the global batch, and powers of two where the batch may
    be rounded."""
    batch = workload.global_batch_sequences
    sizes = {b for b in range(1, MAX_MICRO_BATCH + 1) if batch % b == 0}
    if workload.batch_rounding_frac > 0:
        sizes |= {2**k for k in range(MAX_MICRO_BATCH.bit_length()) if 2**k <= MAX_MICRO_BATCH}
    return sorted(sizes)


def _cartesian(*lengths: int) -> list[np.ndarray]:
    """Index arrays of the cartesian product of options of the given lengths."""
    grids = np.meshgrid(*(np.arange(n) for n in lengths), indexing="ij")
    return [grid.reshape(-1) for grid in grids]


def stack_space(space: SearchSpace, workload: Workload, accelerator: Accelerator) -> SearchSpace:
    """``space`` narrowed to what the workload's stack implements (its facts in perf/data/efficiency.toml):
    its shardings, unless the space already names them, and one stage per rank (vpp 1) for a stack without
    an interleaved schedule, which refuses a named vpp > 1 (as ``estimate`` does)."""
    facts = efficiency_for(accelerator, workload.framework)
    if facts.shardings is not None and space.sharding == DEFAULT_SHARDINGS:
        space = replace(space, sharding=tuple(name for name in DEFAULT_SHARDINGS if name in facts.shardings))
    if not facts.interleaved_pipeline:
        require_interleaving(accelerator, workload.framework, max(space.vpp or (1,)))
        space = replace(space, vpp=(1,))
    return space


def enumerate_layouts(
    workload: Workload, system: System, num_gpus: int, space: SearchSpace
) -> tuple[LayoutGrid, dict[str, int], int]:
    """Every buildable layout of ``space`` on ``num_gpus`` GPUs; the rejected ones counted by reason."""
    model = workload.model
    domain = system.scale_up_domain_gpus
    tps = _options(space.tp, (t for t in divisors(domain) if t <= max(system.gpus_per_node, MAX_TP)))
    pps = _options(space.pp, (p for p in range(1, model.num_hidden_layers + 1) if p <= num_gpus))
    vpps = _options(space.vpp, range(1, MAX_VPP + 1))
    cps = _options(
        space.cp, (c for c in (1, 2, 4, 8, 16, 32) if c == 1 or workload.seq_len // c >= MIN_CP_CHUNK)
    )
    eps = _options(space.ep, divisors(model.moe.num_experts) if model.moe else [1])
    micro = _options(space.micro_batch_size, micro_batch_options(workload))
    splits = _stage_splits(model.num_hidden_layers, pps, vpps, space.uneven_pipeline)
    recomputes = np.asarray([RECOMPUTES.index(mode) for mode in space.recompute], dtype=np.int64)
    shardings = np.asarray([SHARDINGS.index(name) for name in space.sharding], dtype=np.int64)
    sps = np.asarray(space.sequence_parallel, dtype=bool)
    table = np.asarray(splits, dtype=np.int64).reshape(-1, 4)
    index = _cartesian(
        len(tps), len(table), len(cps), len(eps), len(micro), len(recomputes), len(shardings), len(sps)
    )
    tp = np.asarray(tps, dtype=np.int64)[index[0]]
    pp, vpp, first, last = table[index[1]].T
    cp = np.asarray(cps, dtype=np.int64)[index[2]]
    ep = np.asarray(eps, dtype=np.int64)[index[3]]
    mbs = np.asarray(micro, dtype=np.int64)[index[4]]
    recompute = recomputes[index[5]]
    sharding = shardings[index[6]]
    sp = sps[index[7]]
    # sequence parallelism means nothing without TP: keep one of the two for tp = 1
    both = set(space.sequence_parallel) == {True, False}
    keep = ~((tp == 1) & sp) if both else np.ones(len(tp), dtype=bool)
    model_parallel = tp * pp * cp
    dp = np.where(num_gpus % model_parallel == 0, num_gpus // np.maximum(model_parallel, 1), 0)
    considered = int(keep.sum())
    kv_ok = (model.kv_heads % tp == 0) | (model.mla is not None)
    divisible = (
        (dp > 0)
        & (model.num_attention_heads % tp == 0)
        & kv_ok
        & (model.intermediate_size % tp == 0)
        & (workload.seq_len % (2 * cp) == 0)
        & ((dp * cp) % ep == 0)
    )
    if space.dp is not None:
        divisible &= np.isin(dp, space.dp)
    sequences = rounded_batch(workload, dp * mbs)
    batch_ok = divisible & (sequences > 0)
    num_microbatches = sequences // np.maximum(dp * mbs, 1)
    schedulable = batch_ok & ~interleaving_breaks(pp, vpp, num_microbatches)
    compatible = schedulable & ~((pp > 1) & _NO_PIPELINE[sharding])
    rejected = {
        "divisibility": int((keep & ~divisible).sum()),
        "batch": int((keep & divisible & ~batch_ok).sum()),
        "schedule": int((keep & batch_ok & ~schedulable).sum()),
        "compatibility": int((keep & schedulable & ~compatible).sum()),
    }
    chosen = keep & compatible
    grid = LayoutGrid(
        tp=tp[chosen],
        pp=pp[chosen],
        vpp=vpp[chosen],
        dp=dp[chosen],
        cp=cp[chosen],
        ep=ep[chosen],
        mbs=mbs[chosen],
        num_microbatches=num_microbatches[chosen],
        first_layers=first[chosen],
        last_layers=last[chosen],
        sp=sp[chosen] & (tp[chosen] > 1),
        recompute=recompute[chosen],
        sharding=sharding[chosen],
        recompute_layers=np.where(
            recompute[chosen] == RECOMPUTES.index("full"), space.recompute_layers or 0, 0
        ).astype(np.int64),
    )
    return grid, rejected, considered


def planned_layouts(
    workload: Workload,
    system: System,
    accelerator: Accelerator,
    num_gpus: int,
    space: SearchSpace,
    headroom_bytes: float = 0.0,
) -> tuple[LayoutGrid, dict[str, int], int]:
    """What ``plan`` ranks (and ``plan --all`` lists): :func:`enumerate_layouts`, and, unless the space fixes
    the recomputed layers, each full-recompute layout again with the fewest layers recomputed that fit."""
    grid, why, total = enumerate_layouts(workload, system, num_gpus, space)
    if space.recompute_layers is not None:
        return grid, why, total
    counts = least_recompute(
        workload,
        grid,
        system.gpus_per_node,
        accelerator.hbm_bytes,
        headroom_bytes,
        none_searched="none" in space.recompute,
    )
    partial = recomputing_fewer(grid, counts)
    return concatenated(grid, partial), why, total + len(partial)


def recomputing_fewer(grid: LayoutGrid, counts: Ints) -> LayoutGrid:
    """The layouts of ``grid`` with a count (> 0), each recomputing only that many layers per model chunk."""
    keep = counts > 0
    return with_changes(grid.take(keep), recompute_layers=counts[keep])


def least_recompute(
    workload: Workload,
    grid: LayoutGrid,
    gpus_per_node: int,
    hbm_bytes: float,
    headroom_bytes: float,
    *,
    none_searched: bool = True,
    check_peak: bool = True,
) -> Ints:
    """For each layout of ``grid``: the fewest layers per model chunk full recompute must cover for it to fit;
    0 where it is not a full recompute of every layer, does not fit even so, or needs every layer. Fewer
    layers recomputed is what Megatron users tune ``--recompute-num-layers`` for: every layer stored instead
    of recomputed saves its forward. A stage's memory is affine in the share r of its layers
    recomputed (their inputs kept, the others' activations whole), so two evaluations, every layer and one
    layer per chunk, give the least r that keeps both the allocation and the peak with its headroom in HBM,
    on the first, the second and the last stage. Where nothing recomputed fits as well, the layout without
    recompute is the better one and the count is 0 (``none_searched``: it is in the grid)."""
    every_layer = (grid.recompute == RECOMPUTES.index("full")) & (grid.recompute_layers == 0)
    counts = np.zeros(len(grid), dtype=np.int64)
    base = grid.take(every_layer)
    if not len(base):
        return counts
    one_layer = with_changes(base, recompute_layers=1)
    full = grid_memory(workload, base, gpus_per_node=gpus_per_node)
    one = grid_memory(workload, one_layer, gpus_per_node=gpus_per_node)
    needed = np.zeros(len(base))
    stage_layers = {
        stage: np.add(*stage_layer_kinds(workload, base, kind)) for stage, kind in STAGE_KINDS.items()
    }
    # what must fit: the allocation; and, as plan keeps it, the peak with its allocator cache and headroom
    limits = [("required_bytes", hbm_bytes)] + ([("bytes", hbm_bytes - headroom_bytes)] if check_peak else [])
    for stage, layers in stage_layers.items():
        share_one = one_layer.recomputed_share(layers)
        for suffix, capacity in limits:
            present = np.isfinite(getattr(full, f"{stage}_{suffix}"))  # the middle stage exists with pp > 2
            at_full = np.where(present, getattr(full, f"{stage}_{suffix}"), 0.0)
            at_one = np.where(present, getattr(one, f"{stage}_{suffix}"), 0.0)
            # bytes the share of layers not recomputed adds, per unit of share
            per_share = (at_one - at_full) / np.maximum(1.0 - share_one, 1e-12)
            share = 1.0 - (capacity - at_full) / np.maximum(per_share, 1e-12)
            layers_needed = np.ceil(np.clip(share, 0.0, 1.0) * layers / base.vpp - 1e-9)
            needed = np.maximum(needed, np.where(present, layers_needed, 0.0))
    per_chunk = np.max(np.stack(list(stage_layers.values())), axis=0) // base.vpp

    fits = full.fits(hbm_bytes, headroom_bytes, keep_headroom=check_peak)
    if none_searched:
        # without recompute at all (no working set either) it may fit where one layer would not: that layout
        # is in the grid already and faster
        none = grid_memory(
            workload, with_changes(base, recompute=RECOMPUTES.index("none")), gpus_per_node=gpus_per_node
        )
        fits &= ~none.fits(hbm_bytes, headroom_bytes, keep_headroom=check_peak)
    needed = np.maximum(needed, 1.0)
    counts[every_layer] = np.where(fits & (needed < per_chunk), needed, 0).astype(np.int64)
    return counts


def layout_intervals(workload: Workload, grid: LayoutGrid, machine: Machine) -> list[Interval]:
    """The 80 % interval of every layout of ``grid`` (:mod:`mfukit.perf.uncertainty`): its regime is the GPU
    family, the stack, the sharding class, the GPU count and the precision."""
    accelerator = machine.accelerator.name
    found: dict[tuple[int, int], Interval] = {}
    out = []
    for sharding, gpus in zip(grid.sharding.tolist(), grid.world_size.tolist(), strict=True):
        key = (int(sharding), int(gpus))
        if key not in found:
            regime = regime_named(
                accelerator,
                workload.framework,
                sharding_class_of(SHARDINGS[key[0]]),
                key[1],
                workload.precision,
            )
            found[key] = cached_interval(regime)
        out.append(found[key])
    return out


def plan_at(
    workload: Workload,
    grid: LayoutGrid,
    estimate: StepEstimate,
    memory: Floats,
    crosses: dict[str, np.ndarray],
    index: int,
    tokens: float | None,
    interval: Interval | None = None,
) -> Plan:
    num_gpus = int(grid.world_size[index])
    tokens_per_s = float(estimate.tokens_per_s[index])
    return Plan(
        interval=None if interval is None else interval.capped(float(estimate.kernel_ceiling[index])),
        num_gpus=num_gpus,
        layout=grid.layout(index, workload.model.num_hidden_layers),
        micro_batch_size=int(grid.mbs[index]),
        num_microbatches=int(grid.num_microbatches[index]),
        step_time_s=float(estimate.step_time_s[index]),
        mfu=float(estimate.mfu[index]),
        hfu=float(estimate.hfu[index]),
        model_flops_per_s_per_gpu=float(estimate.model_flops_per_s_per_gpu[index]),
        tokens_per_s=tokens_per_s,
        memory_bytes=float(memory[index]),
        breakdown_s=estimate.row(index),
        crosses_network={name: bool(values[index]) for name, values in crosses.items()},
        time_to_train_s=tokens / tokens_per_s if tokens else None,
    )


def evaluate_grid(
    workload: Workload, grid: LayoutGrid, machine: Machine
) -> tuple[StepEstimate, Floats, dict[str, np.ndarray]]:
    """Step estimates, peak memory and the tiers each dimension crosses, for every layout of ``grid``."""
    estimate, memory, crosses = evaluate_grid_memory(workload, grid, machine)
    return estimate, memory.peak_bytes, crosses


def evaluate_grid_memory(
    workload: Workload, grid: LayoutGrid, machine: Machine
) -> tuple[StepEstimate, GridMemory, dict[str, np.ndarray]]:
    """:func:`evaluate_grid` with the whole memory result (peak and required bytes)."""
    prepared = prepare(workload, grid, machine)
    memory = grid_memory(workload, grid, gpus_per_node=machine.gpus_per_node)
    return evaluate(prepared), memory, prepared.comm.crosses_network


def search(
    workload: Workload,
    system: System,
    accelerator: Accelerator,
    gpu_counts: Sequence[int],
    *,
    space: SearchSpace | None = None,
    objective: Objective = "mfu",
    tokens: float | None = None,
    top_k: int = 5,
    progress: ProgressCallback | None = None,
    headroom_bytes: float = 0.0,
) -> SearchResult:
    """The best layouts of ``workload`` on each of ``gpu_counts`` GPUs, and the overall top ``top_k``.

    A layout whose peak fits in HBM but leaves less than ``headroom_bytes`` free is rejected as "headroom"
    (``cluster.hbm_headroom``), one that does not fit as "memory"."""
    started = time.perf_counter()
    space = space or SearchSpace()
    space = stack_space(space, workload, accelerator)
    hbm = accelerator.hbm_bytes
    rejected = dict.fromkeys(REASONS, 0)
    evaluated = considered = 0
    candidates: list[Plan] = []
    best: dict[int, Plan | None] = {}
    machines: dict[int, Machine] = {}
    for done, count in enumerate(gpu_counts):
        grid, why, total = planned_layouts(workload, system, accelerator, count, space, headroom_bytes)
        considered += total
        for reason, number in why.items():
            rejected[reason] += number
        machine = machine_for(system, accelerator, count)
        machines[count] = machine
        best[count] = None
        if len(grid):
            estimate, held, crosses = evaluate_grid_memory(workload, grid, machine)
            memory = held.peak_bytes
            evaluated += len(grid)
            # runs at all (MemoryEstimate.fits); a plan also keeps the headroom free with its allocator cache
            in_hbm = held.fits(hbm, keep_headroom=False)
            fits = held.fits(hbm, headroom_bytes)
            rejected["memory"] += int((~in_hbm).sum())
            rejected["headroom"] += int((in_hbm & ~fits).sum())
            intervals = layout_intervals(workload, grid, machine)
            # ranked conservatively: on the lower bound of each layout's 80 % interval, so a regime the model
            # has been wrong about (or never measured) must beat the others by its uncertainty
            low = np.asarray([interval.low_factor for interval in intervals])
            value = estimate.mfu if objective == "mfu" else estimate.tokens_per_s
            score = np.where(fits, value * low, -np.inf)
            order = [int(i) for i in np.argsort(-score, kind="stable")[:top_k] if np.isfinite(score[i])]
            plans = [
                plan_at(workload, grid, estimate, memory, crosses, i, tokens, intervals[i]) for i in order
            ]
            candidates.extend(plans)
            best[count] = plans[0] if plans else None
        if progress is not None:
            progress(done + 1, len(gpu_counts))

    def key(plan: Plan) -> float:
        low = plan.interval.low_factor if plan.interval else 1.0  # the interval's lower bound, as scored
        return -(plan.mfu if objective == "mfu" else plan.tokens_per_s) * low

    candidates.sort(key=key)
    return SearchResult(
        plans=candidates[:top_k],
        best_per_count=best,
        configs_evaluated=evaluated,
        configs_considered=considered,
        rejected=rejected,
        search_s=time.perf_counter() - started,
        machines=machines,
    )
