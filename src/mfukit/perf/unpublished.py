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
- of those candidates, the fastest that fits in HBM with the headroom ``plan`` keeps free (the memory model's
  peak) by the step-time model under the installed constants, as a run tuned on its cluster would be; when
  none fits, the one that needs the least memory (and the estimate says it does not fit).

Calibration rows are read once, with the shipped constants; a refit does not revisit the choice.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mfukit.core.parallelism import Parallelism, Recompute
from mfukit.perf.layouts import RECOMPUTES, Workload, grid_of, rounded_batch
from mfukit.perf.planner import evaluate_grid_memory, interleaving_breaks, micro_batch_options
from mfukit.perf.step_time import Machine


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
    headroom_bytes: float = 0.0,
) -> TunedChoice:
    """The micro-batch (``micro_batch_size`` when given) and recompute (one of ``recomputes``; every mode when
    None) a tuned run of ``layout`` uses (module docstring); fitting means leaving ``headroom_bytes`` of HBM
    free, as ``plan`` does."""
    modes = RECOMPUTES if recomputes is None else recomputes
    if micro_batch_size is not None:
        sizes = [micro_batch_size]
    else:  # the planner's micro-batch sizes (those that split the batch); 1 with a pipeline
        sizes = [1] if layout.pp > 1 else micro_batch_options(workload)
    pairs = [
        (mode, size, int(batch))
        for mode in modes
        for size in sizes
        for batch in rounded_batch(workload, [layout.dp * size]).tolist()
        if batch > 0 and not interleaving_breaks(layout.pp, layout.vpp, batch // (layout.dp * size))
    ]
    if not pairs:  # no candidate splits the batch: the estimate says why, at micro-batch 1
        return TunedChoice(layout, micro_batch_size or 1, [])
    candidates = [layout.model_copy(update={"recompute": mode}) for mode, _, _ in pairs]
    grid = grid_of(
        candidates,
        model=workload.model,
        micro_batch_size=[size for _, size, _ in pairs],
        num_microbatches=[batch // (layout.dp * size) for _, size, batch in pairs],
    )
    estimate, memory, _ = evaluate_grid_memory(workload, grid, machine)
    hbm = machine.accelerator.hbm_bytes
    # runs at all (its required bytes fit); with a headroom, keeps it free as plan does
    fits = (memory.required_bytes <= hbm) & (
        (headroom_bytes <= 0) | (memory.peak_bytes <= hbm - headroom_bytes)
    )
    best = (
        int(np.argmin(np.where(fits, estimate.step_time_s, np.inf)))
        if fits.any()
        else int(np.argmin(memory.required_bytes))
    )
    mode, size, _ = pairs[best]
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
    if len(modes) > 1:
        notes.append(
            f"recompute not given: {mode}, the fastest of {', '.join(modes)} that fits "
            "(parallelism.recompute fixes it)"
        )
    return TunedChoice(candidates[best], size, notes)
