"""The knobs of a layout that its run did not publish: what a tuned run of that layout uses.

A published run (or a user's layout in ``mfukit estimate``) often gives the global batch and the degrees but
not the micro-batch or the activation recompute. Guessing them one way for every run is wrong where it
matters most: with ZeRO-3 or FSDP every micro-batch gathers the whole model again (DeepSpeed's stage-3 hooks,
FSDP's reshard after forward), so a 175B run of 8 sequences per rank read as 8 micro-batches of 1 moves 8x
the weights it moved; and a recompute mode guessed too light refuses a layout that ran. The rule:

- **the micro-batch**, with a pipeline, is 1: the bubble is (pp - 1) / m of the step (Narayanan et al. SC21
  eq. 1), so pipelined runs keep many small micro-batches (Megatron-LM's
  ``examples/gpt3/train_gpt3_175b_distributed.sh`` and NeMo's Llama 3 70B recipe set 1). Without a pipeline
  it is one of the planner's sizes (up to 16) that splits each DP rank's sequences into whole micro-batches;
- **the recompute** is none, selective or full;
- **the virtual pipeline stages** (read for a measured run that gives a pipeline but no vpp, on a stack with an
  interleaved schedule): 1 to :data:`~mfukit.perf.planner.MAX_VPP` chunks per rank that split the layers
  (evenly, or as :func:`~mfukit.core.parallelism.default_stage_split` splits them), as the NeMo and
  Megatron-Bridge recipes interleave their pipelined layouts (the bubble is (pp - 1) / (v m), Narayanan et al.
  SC21 §2.2.2);
- of those candidates, the fastest that fits in HBM with the headroom ``plan`` keeps free (the memory model's
  peak) by the step-time model under the installed constants, as a run tuned on its cluster would be; when
  none fits, the one that needs the least memory (and the estimate says it does not fit).

Calibration rows are read once, with the shipped constants; a refit does not revisit the choice.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mfukit.core.parallelism import Parallelism, Recompute, default_stage_split
from mfukit.perf.layouts import RECOMPUTES, Workload, concatenated, grid_of, rounded_batch
from mfukit.perf.planner import (
    MAX_VPP,
    evaluate_grid_memory,
    interleaving_breaks,
    least_recompute,
    micro_batch_options,
    recomputing_fewer,
)
from mfukit.perf.step_time import Machine
from mfukit.perf.views import recompute_text


@dataclass(frozen=True)
class TunedChoice:
    layout: Parallelism  # with the recompute chosen (the given one when it was given)
    micro_batch_size: int
    notes: list[str]  # what was chosen and why, for the estimate's assumptions


def tuned_choice(
    workload: Workload,
    layout: Parallelism,
    machine: Machine,
    *,
    micro_batch_size: int | None,
    recomputes: tuple[Recompute, ...] | None,
    vpps: Sequence[int] | None = None,
    recompute_layers: Sequence[int | None] | None = None,
    headroom_bytes: float = 0.0,
) -> TunedChoice:
    """The micro-batch (``micro_batch_size`` when given), recompute (one of ``recomputes``; every mode when
    None) and virtual pipeline stages (one of ``vpps``; the layout's when None) a tuned run of ``layout`` uses
    (module docstring), full recompute covering one of ``recompute_layers`` (the layout's when None);
    fitting means leaving ``headroom_bytes`` of HBM free, as ``plan`` does."""
    modes = RECOMPUTES if recomputes is None else recomputes
    if micro_batch_size is not None:
        sizes = [micro_batch_size]
    else:  # the planner's micro-batch sizes (those that split the batch); 1 with a pipeline
        sizes = [1] if layout.pp > 1 else micro_batch_options(workload)
    chunks = [_with_vpp(layout, workload.model.num_hidden_layers, v) for v in (vpps or [layout.vpp])]
    full_layers = recompute_layers or [layout.recompute_layers]
    recomputed = [(mode, layers) for mode in modes for layers in (full_layers if mode == "full" else [None])]
    options = [
        (chunked.model_copy(update={"recompute": mode, "recompute_layers": layers}), size, int(batch))
        for chunked in chunks
        for mode, layers in recomputed
        for size in sizes
        for batch in rounded_batch(workload, [layout.dp * size]).tolist()
        if batch > 0 and not interleaving_breaks(layout.pp, chunked.vpp, batch // (layout.dp * size))
    ]
    if not options:  # no candidate splits the batch: the estimate says why, at micro-batch 1
        return TunedChoice(layout, micro_batch_size or 1, [])
    hbm = machine.accelerator.hbm_bytes
    grid = grid_of(
        [candidate for candidate, _, _ in options],
        model=workload.model,
        micro_batch_size=[size for _, size, _ in options],
        num_microbatches=[batch // (layout.dp * size) for _, size, batch in options],
    )
    if recompute_layers is None and len(modes) > 1 and "full" in modes:
        # recompute not given: a tuned run recomputes only as many layers as fitting takes, as plan searches it
        # (a given "full" is every layer)
        counts = least_recompute(
            workload,
            grid,
            machine.gpus_per_node,
            hbm,
            headroom_bytes,
            none_searched="none" in modes,
            check_peak=headroom_bytes > 0,
        )
        options += [
            (candidate.model_copy(update={"recompute_layers": int(count)}), size, batch)
            for (candidate, size, batch), count in zip(options, counts, strict=True)
            if count > 0
        ]
        grid = concatenated(grid, recomputing_fewer(grid, counts))
    candidates = [candidate for candidate, _, _ in options]
    estimate, memory, _ = evaluate_grid_memory(workload, grid, machine)
    # runs at all (its required bytes fit); with a headroom, keeps it free as plan does
    fits = memory.fits(hbm, headroom_bytes, keep_headroom=headroom_bytes > 0)
    best = (
        int(np.argmin(np.where(fits, estimate.step_time_s, np.inf)))
        if fits.any()
        else int(np.argmin(memory.required_bytes))
    )
    chosen, size, _ = options[best]
    notes = []
    if micro_batch_size is None:
        notes.append(
            f"micro-batch not given: {size}, "
            + (
                "as pipelined Megatron-LM and NeMo recipes run (the bubble is (pp-1)/m)"
                if layout.pp > 1
                else "the fastest of those that fit and split each DP rank's sequences into whole micro-batches"
            )
            + " (training.micro_batch_size fixes it)"
        )
    if len(full_layers) > 1 and chosen.recompute == "full":
        covered = (
            "every layer"
            if chosen.recompute_layers is None
            else f"{chosen.recompute_layers} layers per chunk"
        )
        notes.append(f"full recompute of {covered}: the least of those given that fits")
    if len(modes) > 1:
        notes.append(
            f"recompute not given: {recompute_text(chosen)}, the fastest of {', '.join(modes)} (full of every "
            "layer, or of the fewest layers per chunk that fit) that fits (parallelism.recompute and "
            "recompute_layers fix it)"
        )
    scheduled = sorted({candidate.vpp for candidate in candidates})
    if len(chunks) > 1:
        notes.append(
            f"vpp not given: {chosen.vpp}, the fastest of {', '.join(map(str, scheduled))} that fits "
            "(parallelism.vpp fixes it)"
        )
    return TunedChoice(chosen, size, notes)


def interleavings(num_layers: int, pp: int) -> list[int]:
    """The virtual pipeline stages per rank (1 to :data:`MAX_VPP`) that split ``num_layers`` over ``pp``
    ranks: evenly, or as :func:`~mfukit.core.parallelism.default_stage_split` splits them."""
    if pp == 1:
        return [1]
    return [
        v
        for v in range(1, MAX_VPP + 1)
        if v == 1
        or (num_layers >= pp * v and num_layers % (pp * v) == 0)
        or default_stage_split(num_layers, pp, v) is not None
    ]


def _with_vpp(layout: Parallelism, num_layers: int, vpp: int) -> Parallelism:
    """``layout`` with ``vpp`` chunks per rank and the stage split that goes with them; a count of recomputed
    layers per chunk keeps its share of each rank's layers (N x v over the rank's layers)."""
    if vpp == layout.vpp:
        return layout
    split = default_stage_split(num_layers, layout.pp, vpp)
    first, last = split or (None, None)
    recomputed = layout.recompute_layers
    if recomputed is not None:
        recomputed = max(1, math.ceil(recomputed * layout.vpp / vpp))
    return layout.model_copy(
        update={
            "vpp": vpp,
            "first_stage_layers": first,
            "last_stage_layers": last,
            "recompute_layers": recomputed,
        }
    )
